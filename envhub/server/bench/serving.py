"""Serving benchmark: WebSocket step round trips, our server next to OpenEnv's, in one run.

Both servers host the *same* trivial env -- :class:`EchoEnv`, an envhub env whose one tool
echoes its argument -- so the difference measured is the serving stack, not the env: OpenEnv's
side wraps the very same class in an ``openenv`` ``Environment`` and serves it with
``openenv.core.env_server.create_app`` launched the way OpenEnv's templates do
(``uvicorn.run(app, host, port)``). Each server runs in its own process; the load generator is
the lean client of :mod:`envhub.server.bench.loadgen`, identical for both, in this process. Rounds
alternate between the servers (A B A B ...) so that background load on a shared machine hits
both alike; steps/s is the median over rounds, latency percentiles are over all steps.

Wall-clock steps/s on two cores is also the load generator's and every other process's CPU
share; the server's own CPU time per step (all its threads, from ``/proc``) is reported beside
it, because it is what bounds throughput when the server is the bottleneck and it barely moves
when the machine is busy with other work.

``python -m envhub.server.bench.serving`` runs it; ``run_bench(out=print)`` returns the figures.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from envhub.budget import Budget
from envhub.env import Env
from envhub.sandboxes.spawner import stop
from envhub.tools import tool
from envhub.types import Outcome, Task, Verdict

STEP_TEXT = '<tool_call>{"name": "echo", "arguments": {"text": "hello world"}}</tool_call>'


# ---- the env both servers host ---------------------------------------------------------------


class _EchoTasks:
    name = "echo"
    version = "echo-1"

    def task_ids(self, split: str) -> list[str]:
        return ["echo-0"]

    def get(self, task_id: str) -> Task:
        return Task(task_id=task_id, family="echo", split="train", prompt="Echo what you are given.")


class _AlwaysRight:
    def verify(self, task: Task, submission: dict[str, Any], episode: Any) -> Verdict:
        return Verdict(reward=1.0, outcome=Outcome.SUCCESS)


class EchoEnv(Env):
    """A trivial env: ``echo`` returns its text; ``finish`` ends the episode with reward 1."""

    env_id = "envhub/BenchEcho-v0"
    family = "echo"
    version = "1"
    default_budget = Budget(max_turns=1_000_000, max_tool_calls=1_000_000, max_agent_seconds=1e9)

    def load_tasks(self) -> _EchoTasks:
        return _EchoTasks()

    def make_verifier(self) -> _AlwaysRight:
        return _AlwaysRight()

    @tool
    def echo(self, text: str) -> str:
        """Return the text."""
        return text

    @tool(terminal=True)
    def finish(self) -> str:
        """End the episode."""
        return ""


def openenv_app() -> Any:
    """OpenEnv's ``create_app`` hosting :class:`EchoEnv` through an OpenEnv ``Environment``."""
    from openenv.core.env_server import Action, Environment, Observation, State, create_app

    class EchoAction(Action):
        text: str = ""

    class EchoObservation(Observation):
        messages: list[dict[str, Any]] = []
        tools: list[dict[str, Any]] = []

    class OpenEnvEcho(Environment):  # type: ignore[misc]
        SUPPORTS_CONCURRENT_SESSIONS = True

        def __init__(self) -> None:
            super().__init__()
            self.env = EchoEnv()
            self._state = State(episode_id=None, step_count=0)

        def _convert(self, obs: Any) -> EchoObservation:
            return EchoObservation(messages=[m.model_dump(mode="json") for m in obs.messages],
                                   tools=[t.model_dump(mode="json") for t in obs.tools],
                                   done=obs.done, reward=obs.reward, metadata=obs.info)

        def reset(self, seed: int | None = None, episode_id: str | None = None, **kw: Any) -> EchoObservation:
            self._state = State(episode_id=episode_id or "echo", step_count=0)
            return self._convert(self.env.reset(seed=seed))

        def step(self, action: EchoAction, timeout_s: float | None = None, **kw: Any) -> EchoObservation:
            self._state.step_count += 1
            return self._convert(self.env.step(action.text))

        @property
        def state(self) -> State:
            return self._state

        def close(self) -> None:
            self.env.close()

    return create_app(OpenEnvEcho, EchoAction, EchoObservation, env_name="echo", max_concurrent_envs=256)


def ours_app() -> Any:
    from envhub.server.app import create_app
    from envhub.server.hub import ServerConfig

    return create_app(EchoEnv, ServerConfig(max_sessions=256, session_ttl_s=60))


# ---- servers in subprocesses -----------------------------------------------------------------


def _serve(which: str, port: int) -> None:
    """Subprocess entry: serve one side on 127.0.0.1:port."""
    import uvicorn

    if which == "openenv":
        uvicorn.run(openenv_app(), host="127.0.0.1", port=port, log_level="warning")  # OpenEnv's launch
        return
    from envhub.server.cli import uvicorn_options

    uvicorn.run(ours_app(), **uvicorn_options(host="127.0.0.1", port=port, ping_interval=20.0,
                                              max_message_bytes=1 << 20, log_level="warning"))


@contextlib.contextmanager
def _server(which: str) -> Iterator[tuple[int, int]]:
    import socket

    import httpx

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "envhub.server.bench.serving", "--serve", which, str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while True:
            if proc.poll() is not None:
                err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
                raise RuntimeError(f"the {which} server exited:\n{err[-3000:]}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise RuntimeError(f"the {which} server did not start")
            time.sleep(0.1)
        yield port, proc.pid
    finally:
        stop(proc, 10)
        if proc.stderr is not None:
            proc.stderr.close()


# ---- load ------------------------------------------------------------------------------------


@dataclass
class Round:
    steps: int
    seconds: float
    latencies: list[float]
    #: CPU seconds the server process (all its threads) used during the round.
    server_cpu_s: float
    #: CPU seconds the load generator (this process) used during the round.
    client_cpu_s: float = 0.0

    @property
    def steps_per_s(self) -> float:
        return self.steps / self.seconds


def _process_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process, all threads (Linux /proc; 0.0 elsewhere)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    import os

    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _one_round(port: int, sessions: int, steps: int, pid: int = 0) -> Round:
    from envhub.server.bench.loadgen import open_ws

    sockets = [await open_ws("127.0.0.1", port) for _ in range(sessions)]
    for ws in sockets:
        reply = await ws.ask({"type": "reset", "data": {}})
        if reply.get("type") != "observation":
            raise RuntimeError(f"reset failed: {reply}")
    payload = json.dumps({"type": "step", "data": {"text": STEP_TEXT}}).encode()
    latencies: list[float] = []
    clock = time.perf_counter

    async def drive(ws: Any) -> None:
        for _ in range(steps):
            t0 = clock()
            await ws.roundtrip(payload)
            latencies.append(clock() - t0)

    cpu0, own0 = _process_cpu_s(pid), time.process_time()
    t0 = clock()
    await asyncio.gather(*(drive(ws) for ws in sockets))
    seconds = clock() - t0
    cpu, own = _process_cpu_s(pid) - cpu0, time.process_time() - own0
    check = json.loads(await sockets[0].roundtrip(payload))
    if check.get("type") != "observation" or check["data"]["observation"]["messages"][0]["content"] != "hello world":
        raise RuntimeError(f"unexpected step reply: {check}")
    for ws in sockets:
        ws.close()
    await asyncio.sleep(0.05)
    return Round(steps=sessions * steps, seconds=seconds, latencies=latencies, server_cpu_s=cpu,
                 client_cpu_s=own)


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q / 100 * len(ordered)))]


def _summary(rounds: list[Round]) -> dict[str, float]:
    lat = [x for r in rounds for x in r.latencies]
    return {
        "steps_per_s": statistics.median(r.steps_per_s for r in rounds),
        "p50_ms": _percentile(lat, 50) * 1e3,
        "p99_ms": _percentile(lat, 99) * 1e3,
        "server_cpu_us_per_step": 1e6 * sum(r.server_cpu_s for r in rounds) / sum(r.steps for r in rounds),
        "client_cpu_us_per_step": 1e6 * sum(r.client_cpu_s for r in rounds) / sum(r.steps for r in rounds),
        "steps": float(sum(r.steps for r in rounds)),
    }


def run_bench(out: Callable[[Any], None] = print, *, rounds: int = 5, steps_single: int = 2000,
              steps_each_64: int = 60) -> dict[str, Any]:
    """WebSocket step p50/p99 and steps/s at 1 and 64 sessions: envhub's server vs OpenEnv's."""
    try:
        import uvloop

        loop_factory: Any = uvloop.new_event_loop
    except ImportError:
        loop_factory = asyncio.new_event_loop
    levels = {1: steps_single, 64: steps_each_64}
    results: dict[str, dict[int, list[Round]]] = {"envhub": {1: [], 64: []}, "openenv": {1: [], 64: []}}
    with _server("envhub") as ours, _server("openenv") as theirs:
        servers = {"envhub": ours, "openenv": theirs}
        with asyncio.Runner(loop_factory=loop_factory) as runner:
            for port, pid in servers.values():  # warm up both (imports, first sessions, caches)
                runner.run(_one_round(port, 8, 50, pid))
            for _ in range(rounds):
                for sessions, steps in levels.items():
                    for name, (port, pid) in servers.items():
                        results[name][sessions].append(runner.run(_one_round(port, sessions, steps, pid)))
    report: dict[str, Any] = {
        name: {str(s): _summary(rs) for s, rs in by_level.items()} for name, by_level in results.items()
    }
    report["ratio_steps_per_s"] = {
        str(s): report["envhub"][str(s)]["steps_per_s"] / report["openenv"][str(s)]["steps_per_s"] for s in levels
    }
    report["ratio_server_cpu_per_step"] = {
        str(s): report["openenv"][str(s)]["server_cpu_us_per_step"]
        / max(report["envhub"][str(s)]["server_cpu_us_per_step"], 1e-9) for s in levels
    }
    out(f"serve benchmark: WebSocket step round trips, {rounds} alternating rounds, env {EchoEnv.env_id}")
    out(f"  {'sessions':>8}  {'server':<8} {'steps/s':>9} {'p50 ms':>8} {'p99 ms':>8} {'server CPU us/step':>19} "
        f"{'client CPU us/step':>19}")
    for s in levels:
        for name in ("envhub", "openenv"):
            row = report[name][str(s)]
            out(f"  {s:>8}  {name:<8} {row['steps_per_s']:>9.0f} {row['p50_ms']:>8.3f} {row['p99_ms']:>8.3f} "
                f"{row['server_cpu_us_per_step']:>19.1f} {row['client_cpu_us_per_step']:>19.1f}")
        out(f"  {s:>8}  ratio    {report['ratio_steps_per_s'][str(s)]:>8.2f}x steps/s, "
            f"{report['ratio_server_cpu_per_step'][str(s)]:.2f}x less server CPU per step (target >= 2x)")
    return report


def main() -> None:
    if len(sys.argv) == 4 and sys.argv[1] == "--serve":
        _serve(sys.argv[2], int(sys.argv[3]))
        return
    report = run_bench()
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()


__all__ = ["EchoEnv", "run_bench"]
