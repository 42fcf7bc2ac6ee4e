"""Task difficulty for a policy (``envhub profile``): pass@k per task, and which tasks teach.

Every task of the split (or a seeded sample of ``--limit`` of them) is rolled out ``k`` times as one
GRPO group, into ``--out`` (an ordinary rollout directory, so rerunning resumes and ``envhub report``
renders it, with the difficulty histogram). Per task, with ``n`` scored samples (infra failures are
ours, not the policy's, so they are left out of ``n``) and ``c`` successes:

- ``pass@1 = c / n``, the per-sample success rate;
- ``pass@k = 1 - C(n-c, k) / C(n, k)``, the unbiased estimator (Chen et al., 2021); undefined
  (None) when infra failures left fewer than ``k`` scored samples.

A group whose samples all fail or all succeed has zero reward variance and teaches GRPO nothing, so
the curriculum list (``curriculum.json``) is the tasks with ``0 < c < n``. ``profile.json`` holds the
per-task numbers and the counts.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from math import comb
from pathlib import Path
from typing import Any

from envhub.run_dir import Run
from envhub.store import write_json_atomic
from envhub.types import Outcome, TrajectoryRecord


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased pass@k estimate from ``n`` samples with ``c`` successes; needs ``n >= k >= 1``."""
    if not 0 <= c <= n or k < 1 or n < k:
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - comb(n - c, k) / comb(n, k)


def profile_records(records: Iterable[TrajectoryRecord], k: int) -> dict[str, Any]:
    """Per-task pass@1 and pass@k of trajectory records, and the curriculum list (0 < c < n)."""
    per_task: dict[str, dict[str, int]] = defaultdict(lambda: {"samples": 0, "n": 0, "c": 0, "infra": 0})
    for rec in records:
        outcome = rec.outcome
        row = per_task[rec.task_id]
        row["samples"] += 1
        if outcome.is_infra:
            row["infra"] += 1
            continue
        row["n"] += 1
        row["c"] += outcome is Outcome.SUCCESS
    tasks = []
    for task_id, row in sorted(per_task.items()):
        n, c = row["n"], row["c"]
        tasks.append({"task_id": task_id, **row, "pass@1": c / n if n else None,
                      f"pass@{k}": pass_at_k(n, c, k) if n >= k else None, "informative": 0 < c < n})
    curriculum = [t["task_id"] for t in tasks if t["informative"]]
    scored = [t for t in tasks if t["pass@1"] is not None]
    at_k = [t[f"pass@{k}"] for t in tasks if t[f"pass@{k}"] is not None]
    return {
        "k": k, "tasks_profiled": len(tasks), "informative_tasks": len(curriculum),
        "all_fail_tasks": sum(1 for t in scored if t["c"] == 0),
        "all_pass_tasks": sum(1 for t in scored if t["c"] == t["n"]),
        "undetermined_tasks": sum(1 for t in tasks if t[f"pass@{k}"] is None),
        "mean_pass@1": sum(t["pass@1"] for t in scored) / len(scored) if scored else None,
        f"mean_pass@{k}": sum(at_k) / len(at_k) if at_k else None,
        "tasks": tasks, "curriculum": curriculum,
    }


def run_profile(env_id: str, policy: Any, *, out_dir: str | Path, k: int = 8, split: str = "train",
                limit: int = 0, seed: int = 0, concurrency: int = 4, env_kwargs: dict[str, Any] | None = None,
                on_episode: Any = None) -> dict[str, Any]:
    """Roll out ``k`` samples of each task (all of ``split``, or ``limit`` of them) into ``out_dir``;
    write ``profile.json`` and ``curriculum.json`` there and return the profile."""
    from envhub.registry import make
    from envhub.rollout.runner import run_rollouts

    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"--k must be a positive integer, got {k!r}")
    if limit < 0:
        raise ValueError(f"--limit must be 0 (all tasks) or positive, got {limit}")
    env = make(env_id, split=split, **(env_kwargs or {}))
    try:
        n_tasks = len(env.tasks.task_ids(env.split))
    finally:
        env.close()
    if n_tasks == 0:
        raise ValueError(f"{env_id} has no tasks in split {split!r}")
    tasks = min(limit, n_tasks) if limit else n_tasks
    out = Path(out_dir)
    result = run_rollouts(env_id, policy, out_dir=out, episodes=tasks * k, group_size=k, seed=seed,
                          concurrency=concurrency, split=split, env_kwargs=env_kwargs, on_episode=on_episode)
    profile = profile_records(Run.at(result.trajectories).records(), k)
    profile.update({"env_id": env_id, "split": split, "policy": policy.name, "seed": seed,
                    "estimator": "pass@k = 1 - C(n-c, k) / C(n, k); n excludes infra failures"})
    write_json_atomic(out / "profile.json", profile)
    write_json_atomic(out / "curriculum.json", {"env_id": env_id, "split": split, "k": k,
                                                "rule": "0 < successes < scored samples",
                                                "task_ids": profile["curriculum"]})
    return profile
