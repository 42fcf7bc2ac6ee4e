"""Validation evals of a training run: strict success on the validation split, never the training split.

An eval is a rollout (:func:`envhub.rollout.runner.run_rollouts`) into ``RUN/eval/TAG/``: the same
planned episodes for the same tag, the finished ones kept when an interrupted eval runs again with
the same weights, and the directory's ``report.json`` stamped with the tag, the step and the weight
version. An episode is kept only if every turn of it was sampled with the current weight version:
the final eval of a run resumed with more steps, say, samples every episode again with the new
weights. Each eval's headline numbers are one line of ``RUN/evals.jsonl`` (one per tag: an eval run
again replaces its line, moved to the end).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from typing import Any

from envhub.env import Env
from envhub.policies import Policy
from envhub.rollout.runner import run_rollouts
from envhub.run_dir import Run, TrainingRun
from envhub.store import write_text_atomic
from envhub.trainer.config import TrainConfig


def evaluate(files: TrainingRun, config: TrainConfig, policy: Policy, env_factory: Callable[[], Env], *,
             tag: str, step: int, weight_version: str) -> dict[str, Any]:
    """The eval ``tag`` of ``policy`` on ``config.env.validation_split`` (envs from ``env_factory``),
    run or resumed; returns its line of ``evals.jsonl``."""
    env, split = config.env, config.env.validation_split
    assert split is not None
    out = files.eval_run(tag)
    forget_other_weights(out, weight_version)
    # env_kwargs only name the envs in run.json: env_factory makes them
    kwargs = dict(env.args) if env.budget is None else {**env.args, "budget": dataclasses.asdict(env.budget)}
    done = run_rollouts(env.id, policy, out_dir=out.path, episodes=config.eval.episodes, seed=config.seed,
                        concurrency=config.rollout.concurrency, split=split, env_kwargs=kwargs,
                        env_factory=env_factory)
    report = {**done.report, "split": split, "tag": tag, "step": step, "weight_version": weight_version}
    out.write_report(report)
    result = {"tag": tag, "step": step, "weight_version": weight_version, "split": split,
              "episodes": report["attempted"],
              "strict_success": report.get("strict_success_rate", 0.0), "reward_mean": report.get("mean_reward")}
    rows = [r for r in files.evals() if r.get("tag") != tag]
    write_text_atomic(files.evals_path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in [*rows, result]))
    return result


def sampled_with(record: dict[str, Any], weight_version: str) -> bool:
    """Whether every turn of ``record`` was sampled with ``weight_version`` (a record without turns: no)."""
    versions = record.get("versions", {}).get("weight_versions") or []
    return bool(versions) and all(v is not None and str(v) == weight_version for v in versions)


def forget_other_weights(out: Run, weight_version: str) -> int:
    """Drop the records of ``out`` not sampled with ``weight_version`` (they are run again); returns how many."""
    if not out.trajectories_path.exists():
        return 0
    rows = list(out.rows())
    kept = [r for r in rows if sampled_with(r, weight_version)]
    if len(kept) < len(rows):
        write_text_atomic(out.trajectories_path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in kept))
    return len(rows) - len(kept)
