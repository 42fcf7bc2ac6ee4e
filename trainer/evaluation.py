"""Validation evals of a training run: strict success on the validation split, never the training split.

An eval is a rollout (:func:`envhub.rollout.runner.run_rollouts`) into ``RUN/eval/TAG/``: the same
planned episodes for the same tag, the finished ones kept when an interrupted eval runs again, and
the directory's ``report.json`` stamped with the tag, the step and the weight version. Each eval's
headline numbers are one line of ``RUN/evals.jsonl`` (keyed by the tag: an eval run again replaces
its line).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from envhub.env import Env
from envhub.policies import Policy
from envhub.rollout.runner import run_rollouts
from envhub.run_dir import TrainingRun
from envhub.store import JsonlStore
from envhub.trainer.config import TrainConfig


def evaluate(files: TrainingRun, config: TrainConfig, policy: Policy, env_factory: Callable[[], Env], *,
             tag: str, step: int, weight_version: str) -> dict[str, Any]:
    """The eval ``tag`` of ``policy`` on ``config.env.validation_split`` (envs from ``env_factory``),
    run or resumed; returns its line of ``evals.jsonl``."""
    env, split = config.env, config.env.validation_split
    assert split is not None
    out = files.eval_run(tag)
    # env_kwargs only name the envs in run.json: env_factory makes them
    kwargs = dict(env.args) if env.budget is None else {**env.args, "budget": dataclasses.asdict(env.budget)}
    done = run_rollouts(env.id, policy, out_dir=out.path, episodes=config.eval.episodes, seed=config.seed,
                        concurrency=config.rollout.concurrency, split=split, env_kwargs=kwargs,
                        env_factory=env_factory)
    report = {**done.report, "split": split, "tag": tag, "step": step, "weight_version": weight_version}
    out.write_report(report)
    result = {"tag": tag, "step": step, "split": split, "episodes": report["attempted"],
              "strict_success": report.get("strict_success_rate", 0.0), "reward_mean": report.get("mean_reward")}
    with JsonlStore(files.evals_path, key="tag") as evals:
        evals.append(result)
    return result
