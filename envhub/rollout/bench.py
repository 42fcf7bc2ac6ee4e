"""Benchmarks of the core: env step latency and episode throughput.

Figures are printed next to a baseline measured in the same run (Gymnasium's CartPole step, the
cheapest step a Gymnasium user knows), as ratios; no figure here is ever a test assertion.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q / 100 * len(ordered)))]


def _cartpole_step_seconds(n: int = 2000) -> float:
    import gymnasium

    env = gymnasium.make("CartPole-v1")
    env.reset(seed=0)
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        _, _, term, trunc, _ = env.step(env.action_space.sample())
        times.append(time.perf_counter() - t0)
        if term or trunc:
            env.reset()
    return statistics.median(times)


def bench_env_step(*, env_id: str = "envhub/Computation-v0", episodes: int = 200, sandbox: str = "auto",
                   out: Callable[[Any], None] = print) -> dict[str, Any]:
    """Gold-policy episodes; step latencies split into steps that ran a tool and steps that did not."""
    from envhub.policies import GoldPolicy
    from envhub.registry import make

    env = make(env_id, sandbox=sandbox)
    ids = list(env.tasks.task_ids("train"))[:episodes]
    policy = GoldPolicy()
    no_tool: list[float] = []
    tool: list[float] = []
    format_err: list[float] = []
    t_start = time.perf_counter()
    for task_id in ids:
        obs = env.reset(task_id=task_id)
        agent = policy.start(env, obs, seed=0)
        while not obs.done:
            text = agent.act(obs).text
            t0 = time.perf_counter()
            obs = env.step(text)
            dt = time.perf_counter() - t0
            (no_tool if obs.done else tool).append(dt)
    wall = time.perf_counter() - t_start
    # steps the model gets wrong cost nothing either: a malformed call answered with an error message
    for task_id in ids[:50]:
        env.reset(task_id=task_id)
        t0 = time.perf_counter()
        env.step("<tool_call>{not json</tool_call>")
        format_err.append(time.perf_counter() - t0)
    env.close()
    base = _cartpole_step_seconds()
    result = {
        "episodes": len(ids),
        "episodes_per_second": len(ids) / wall,
        "no_tool_step_p50_ms": percentile(no_tool, 50) * 1e3,
        "no_tool_step_p99_ms": percentile(no_tool, 99) * 1e3,
        "format_error_step_p50_ms": percentile(format_err, 50) * 1e3,
        "tool_step_p50_ms": percentile(tool, 50) * 1e3,
        "tool_step_p99_ms": percentile(tool, 99) * 1e3,
        "cartpole_step_p50_ms": base * 1e3,
    }
    result["no_tool_step_vs_cartpole"] = result["no_tool_step_p50_ms"] / result["cartpole_step_p50_ms"]
    out(f"env-step benchmark: {env_id}, {len(ids)} gold episodes, sandbox={sandbox}")
    out(f"  no-tool step (answer + verify)  p50 {result['no_tool_step_p50_ms']:.3f} ms  "
        f"p99 {result['no_tool_step_p99_ms']:.3f} ms   (target p50 <= 1 ms)")
    out(f"  format-error step               p50 {result['format_error_step_p50_ms']:.3f} ms")
    out(f"  tool step (python in sandbox)   p50 {result['tool_step_p50_ms']:.1f} ms  "
        f"p99 {result['tool_step_p99_ms']:.1f} ms")
    out(f"  episodes/s {result['episodes_per_second']:.1f}")
    out(f"  baseline CartPole-v1 step p50 {result['cartpole_step_p50_ms']:.4f} ms; "
        f"no-tool step is {result['no_tool_step_vs_cartpole']:.1f}x a CartPole step")
    if any(spec.name == "python" for spec in env.tool_specs):
        result["python_tool"] = bench_python_tool(env_id=env_id, out=out)
    return result


def bench_python_tool(*, env_id: str = "envhub/Computation-v0", backends: tuple[str, ...] = ("docker", "bwrap"),
                      calls: int = 200, out: Callable[[Any], None] = print) -> dict[str, dict[str, float]]:
    """Step latency of the ``python`` tool, per sandbox backend, against the path it replaced.

    The programs are the gold solutions' python calls of the first ``calls`` train tasks. "fork"
    is ``env.step`` with the call (the code runs in a child forked from the sandbox's resident
    executor); "exec" is what the tool did before, on the same warm sandbox and in the same run:
    write ``main.py``, then exec ``python3 main.py``, timed without ``env.step``'s own overhead
    (so the comparison favours the old path). The two alternate call by call, so load on the
    machine hits both alike. A backend that does not work here is reported as skipped.
    """
    from envhub.registry import make

    results: dict[str, dict[str, float]] = {}
    probe = make(env_id)  # starts no sandbox: only its tasks and gold actions are read
    steps = [(action.text, call.arguments["code"])
             for task_id in probe.tasks.task_ids("train")[:calls]
             for action in probe.gold_actions(probe.tasks.get(task_id))
             for call in probe.parser.parse(action.text).calls if call.name == "python"]
    probe.close()
    if not steps:
        return results
    for backend in backends:
        try:
            env = make(env_id, sandbox=backend, sandbox_pool=0,
                       budget={"max_turns": 2 * calls + 4, "max_tool_calls": 2 * calls + 4,
                               "max_agent_seconds": 3600.0})
            env.reset(task_id=env.tasks.task_ids("train")[0])
            env.step(steps[0][0])  # starts the sandbox; not timed
            sandbox = env.sandbox()
        except Exception as exc:  # a backend that does not work here is a line in the report
            out(f"  python tool on {backend}: skipped ({exc})")
            continue
        fork: list[float] = []
        old: list[float] = []
        try:
            for text, code in steps:
                t0 = time.perf_counter()
                obs = env.step(text)
                fork.append(time.perf_counter() - t0)
                if obs.done:
                    raise RuntimeError(f"the python tool ended the episode: {obs.outcome}")
                t0 = time.perf_counter()
                sandbox.write_files({"main.py": code})
                sandbox.exec(["python3", "main.py"]).summary()
                old.append(time.perf_counter() - t0)
        finally:
            env.close()
        row = {"fork_p50_ms": percentile(fork, 50) * 1e3, "fork_p99_ms": percentile(fork, 99) * 1e3,
               "exec_p50_ms": percentile(old, 50) * 1e3, "exec_p99_ms": percentile(old, 99) * 1e3}
        row["speedup_p50"] = row["exec_p50_ms"] / row["fork_p50_ms"]
        results[backend] = row
        out(f"  python tool on {backend:6} fork p50 {row['fork_p50_ms']:.2f} ms (p99 {row['fork_p99_ms']:.1f})  "
            f"vs main.py + python3 p50 {row['exec_p50_ms']:.2f} ms (p99 {row['exec_p99_ms']:.1f})  "
            f"= {row['speedup_p50']:.1f}x faster   (target fork p50 <= 5 ms; {len(steps)} calls each)")
    return results
