"""``envhub bench verify``: code-repair verifications per second, warm pool against cold sandboxes.

Each verification is the whole verifier on a gold submission: snapshot of the agent's sandbox,
integrity checks, and the hidden tests in a fresh grading sandbox. The baseline in the same run
grades the same instances with a cold sandbox per episode and per grading (``sandbox_pool=0``).
"""

from __future__ import annotations

import queue
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from envhub.registry import make

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


def run_bench(out: Callable[[Any], None] = print, n: int = 40, jobs: int = 2, sandbox: str = "auto") -> dict:
    env = make(ENV_ID, split="train")
    ids = sorted(env.tasks.task_ids("train"))
    step = max(1, len(ids) // n)
    ids = ids[::step][:n]
    env.close()
    warm_rate, warm_verify_s, warm_ok = _grade_all(ids, jobs, pool=2 * jobs + 2, sandbox=sandbox)
    cold_rate, cold_verify_s, cold_ok = _grade_all(ids[: max(jobs, n // 4)], jobs, pool=0, sandbox=sandbox)
    result = {
        "instances": len(ids), "jobs": jobs,
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
