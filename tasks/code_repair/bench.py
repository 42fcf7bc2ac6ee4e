"""``envhub bench verify``: code-repair verifications per second.

Two figures, each against a baseline measured in the same run:

* the hidden-test layer alone on the same gold submissions in warm grading sandboxes: the
  observation probes (today's grader) against the in-process pytest grader it replaced
  (:mod:`envhub.verifiers.pytest_grader`, kept as this baseline only);
* whole gold episodes (snapshot, integrity, hidden tests) with a warm pool against cold
  sandboxes per episode and per grading (``sandbox_pool=0``).
"""

from __future__ import annotations

import queue
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from envhub.registry import make
from envhub.sandboxes import SandboxSpec, select_backend, shared_pool
from envhub.verifiers.probes.grader import run_probes
from envhub.verifiers.pytest_grader import run_hidden_tests

from .observations import project_suite
from .workspace import project_sources, project_tests

ENV_ID = "envhub/CodeRepair-v0"


def _grade_all(task_ids: list[str], jobs: int, pool: int, sandbox: str) -> tuple[float, float, int]:
    envs = [make(ENV_ID, split="train", sandbox=sandbox, sandbox_pool=pool) for _ in range(jobs)]
    # warm up: one episode per worker, so a pool is full before timing starts
    for env, tid in zip(envs, task_ids, strict=False):
        env.play(tid, env.gold_actions)

    idle: queue.SimpleQueue = queue.SimpleQueue()
    for env in envs:
        idle.put(env)

    def work(i: int) -> tuple[float, bool]:
        env = idle.get()  # an env runs one episode at a time
        try:
            verdict = env.play(task_ids[i], env.gold_actions)
            return env.episode.metrics.verifier_seconds, verdict.outcome.value == "success"
        finally:
            idle.put(env)

    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=jobs) as pool_:
        results = list(pool_.map(work, range(len(task_ids)), chunksize=1))
    wall = time.perf_counter() - t0
    for env in envs:
        env.close()
    ok = sum(1 for _, s in results if s)
    return len(task_ids) / wall, sum(v for v, _ in results) / len(results), ok


def _layer_rates(env: Any, ids: list[str], sandbox: str, rounds: int = 2) -> dict[str, float]:
    """Hidden-test verifications/s of the probes and of the pytest baseline, interleaved per instance."""
    backend = select_backend(sandbox)
    limits = env.grading_limits or env.sandbox_spec.limits
    probe_pool = shared_pool(backend, SandboxSpec(limits=limits, role="grading"), size=2)
    pytest_pool = shared_pool(backend, SandboxSpec(limits=limits, role="grading", preload=("pytest",)), size=2)
    seconds = {"probes": 0.0, "pytest": 0.0}
    accepted = {"probes": 0, "pytest": 0}
    for _ in range(rounds + 1):  # the first round warms both pools and is not counted
        timed = _ != 0
        for task_id in ids:
            inst = env.tasks.instance(task_id)
            gold = project_sources(inst.project)
            for name, pool in (("probes", probe_pool), ("pytest", pytest_pool)):
                with pool.acquire() as sb:
                    t0 = time.perf_counter()
                    if name == "probes":
                        ok = not run_probes(sb, project_suite(inst.project), files=gold,
                                            tests=inst.expected_tests).failed()
                    else:
                        ok = run_hidden_tests(sb, files=gold, tests=project_tests(inst.project),
                                              expected=inst.expected_tests).all_passed
                    if timed:
                        seconds[name] += time.perf_counter() - t0
                        accepted[name] += ok
    count = rounds * len(ids)
    return {"probe_verifications_per_s": count / seconds["probes"],
            "pytest_verifications_per_s": count / seconds["pytest"],
            "probe_gold_accepted": accepted["probes"] == count, "pytest_gold_accepted": accepted["pytest"] == count}


def run_bench(out: Callable[[Any], None] = print, n: int = 40, jobs: int = 2, sandbox: str = "auto") -> dict:
    env = make(ENV_ID, split="train", sandbox=sandbox)
    ids = sorted(env.tasks.task_ids("train"))
    step = max(1, len(ids) // n)
    ids = ids[::step][:n]
    layer = _layer_rates(env, ids[: max(4, n // 4)], sandbox)
    env.close()
    out(f"hidden-test layer, {max(4, n // 4)} gold submissions x 2 rounds, one worker, warm grading sandboxes:")
    out(f"  observation probes: {layer['probe_verifications_per_s']:.2f} verifications/s; in-process pytest "
        f"(baseline, replaced): {layer['pytest_verifications_per_s']:.2f}/s; probes / pytest: "
        f"{layer['probe_verifications_per_s'] / layer['pytest_verifications_per_s']:.2f}x; every gold accepted: "
        f"{layer['probe_gold_accepted']} / {layer['pytest_gold_accepted']}")
    warm_rate, warm_verify_s, warm_ok = _grade_all(ids, jobs, pool=2 * jobs + 2, sandbox=sandbox)
    cold_rate, cold_verify_s, cold_ok = _grade_all(ids[: max(jobs, n // 4)], jobs, pool=0, sandbox=sandbox)
    result = {
        **layer, "instances": len(ids), "jobs": jobs,
        "warm_episodes_per_s": warm_rate, "warm_verify_seconds_mean": warm_verify_s,
        "warm_verifications_per_s": jobs / warm_verify_s if warm_verify_s else 0.0,
        "cold_episodes_per_s": cold_rate, "cold_verify_seconds_mean": cold_verify_s,
        "gold_success": warm_ok == len(ids) and cold_ok == max(jobs, n // 4),
    }
    result["speedup_vs_cold"] = warm_rate / cold_rate if cold_rate else float("nan")
    out(f"verify benchmark: {len(ids)} gold code-repair episodes, {jobs} workers")
    out(f"  warm pool: {warm_rate:.2f} graded episodes/s measured, each a whole gold episode "
        f"(target >= 10 verifications/s)")
    out(f"             verifier {warm_verify_s * 1e3:.0f} ms each: {result['warm_verifications_per_s']:.1f}/s "
        f"over {jobs} workers if they did nothing else (derived, not measured)")
    out(f"  cold sandboxes (baseline): {cold_rate:.2f} episodes/s; verifier {cold_verify_s * 1e3:.0f} ms each")
    out(f"  warm / cold: {result['speedup_vs_cold']:.2f}x; every gold accepted: {result['gold_success']}")
    return result
