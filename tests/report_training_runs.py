"""Training runs for the report tests: a tiny real one, a few GRPO steps of the bundled trainer
(seconds), and :func:`fixture_training_run`, a run directory written here, sync or async.

``FlakyLetterEnv`` is the learning test's first-letter env whose verifier service fails on the
tasks ending in ``-3`` (``env_error``, an infra outcome the agent cannot cause), so the run's
training episodes and its final eval both hold successes, policy failures and infra failures.
The config turns on the KL term and the decoupled mismatch mode, so every health statistic the
trainer logs is on record.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent / "trainer"))

from letter_env import FirstLetterEnv

from envhub.episode import Episode
from envhub.errors import InfraError
from envhub.registry import register
from envhub.run_dir import TrainingRun
from envhub.store import write_json_atomic, write_text_atomic
from envhub.trainer.bench_async_env import FirstLetter
from envhub.types import Outcome, Task, TrajectoryRecord, Turn, Verdict, Versions

ENV = "test/FlakyLetter-v0"


class _FlakyVerifier(FirstLetter):
    def verify(self, task: Task, submission: dict[str, Any], episode: Episode) -> Verdict:
        if task.task_id.endswith("-3"):
            raise InfraError("grading service unavailable (test)")
        return super().verify(task, submission, episode)


class FlakyLetterEnv(FirstLetterEnv):
    env_id = ENV

    def make_verifier(self) -> _FlakyVerifier:
        return _FlakyVerifier()


def tiny_training_run(run_dir: Path, steps: int = 3) -> dict[str, Any]:
    """Train ``steps`` steps into ``run_dir`` (validation evals before, at step 2 and final); the summary."""
    from envhub.adapters.engines.tiny import build_tiny_model
    from envhub.trainer.config import parse_config
    from envhub.trainer.loop import train

    register(ENV, FlakyLetterEnv, description="report-test env: first letter, infra failures on *-3 tasks")
    model = build_tiny_model(layers=1, hidden=64, init_std=0.02, seed=0)
    config = parse_config({
        "run_dir": str(run_dir), "model": str(model),
        "env": {"id": ENV, "validation_split": "validation"},
        "sampling": {"max_new_tokens": 2, "temperature": 1.0},
        "rollout": {"groups_per_step": 2, "group_size": 4, "concurrency": 1, "max_response_tokens": 4,
                    "max_context": 512},
        "algorithm": {"kl_coef": 0.01, "mismatch": {"mode": "decoupled"}},
        "optim": {"lr": 1e-3, "micro_batch_size": 4},
        "eval": {"episodes": 8, "every": 2, "temperature": 1.0},
        "steps": steps, "checkpoint_every": steps, "seed": 0,
    })
    return train(config, log=lambda line: None)


#: The lag of each episode of an async fixture step, by its index in the step (capped by the version).
ASYNC_LAGS = (0, 1, 2, 1)
#: The fixture's staleness bound: the episodes lagging 2 versions are dropped as stale.
MAX_STALENESS = 1


def _fixture_record(step: int, index: int, first: int, last: int, outcome: Outcome) -> TrajectoryRecord:
    turns = [Turn(index=0, action_text="cat", token_ids=[5], logprobs=[-0.5], weight_version=str(first)),
             Turn(index=1, action_text="pig", token_ids=[6], logprobs=[-0.4], weight_version=str(last))]
    return TrajectoryRecord(
        episode_id=f"s{step}-e{index}", task_id=f"train-{index}", env_id=ENV, group_id=f"s{step}-g{index // 2}",
        sample_index=index % 2, versions=Versions(envhub="test", env=f"{ENV}@1", weight_versions=[str(first),
                                                                                                  str(last)]),
        turns=turns, num_turns=2, prompt_ids=[1, 2], response_ids=[5, 6], response_mask=[1, 1],
        response_logprobs=[-0.5, -0.4], reward=float(outcome is Outcome.SUCCESS), outcome=outcome)


def fixture_training_run(run_dir: Path, *, asynchronous: bool, steps: int = 4) -> list[dict[str, Any]]:
    """A training run directory as the trainer lays it out, written here: ``config.json``,
    ``steps.jsonl`` and ``rollouts/step-N/trajectories.jsonl`` (4 episodes a step, each step one
    update). Async: ``rollout.mode: async``, each episode's first turn :data:`ASYNC_LAGS` versions
    behind the step's trainer (those over :data:`MAX_STALENESS` dropped), step 3's last episode an
    infra failure (untrained too), and the async keys on every step line, computed as the async loop
    does (lags over every episode). Sync: every episode sampled with the step's own weights, no
    async key. Returns the step lines."""
    run = TrainingRun(run_dir)
    rollout: dict[str, Any] = {"groups_per_step": 2, "group_size": 2}
    if asynchronous:
        rollout.update(mode="async", max_staleness=MAX_STALENESS, stale_samples="drop")
    write_json_atomic(run.config_path, {"model": "tiny", "env": {"id": ENV, "validation_split": None},
                                        "rollout": rollout, "steps": steps})
    lines = []
    for step in range(1, steps + 1):
        trainer = step - 1  # the version the step trains with; its update makes it ``step``
        records, lags, trained = [], [], []
        for i in range(4):
            lag = min(ASYNC_LAGS[i], trainer) if asynchronous else 0
            infra = asynchronous and step == 3 and i == 3
            outcome = Outcome.ENV_ERROR if infra else Outcome.SUCCESS if i % 2 == 0 else Outcome.WRONG_ANSWER
            records.append(_fixture_record(step, i, trainer - lag, trainer, outcome))
            lags.append(lag)
            if not infra and lag <= MAX_STALENESS:
                trained.append(records[-1].episode_id)
        write_text_atomic(run.step_dir(step) / "trajectories.jsonl",
                          "".join(json.dumps(r.model_dump(mode="json")) + "\n" for r in records))
        outcomes = {o.value: sum(r.outcome is o for r in records) for o in Outcome}
        line: dict[str, Any] = {
            "step": step, "weight_version": str(step), "reward_mean": 0.5, "strict_success": 0.5,
            "success_excluding_infra": 0.5, "outcomes": outcomes, "attempted": 4, "kept": len(trained),
            "updated": True, "optimizer_steps": 1, "trained_samples": len(trained), "loss": 0.1,
            "weight_version_lag": max(lags), "trained_episodes": sorted(trained),
            "untrained_episodes": sorted({r.episode_id for r in records} - set(trained)),
            "tokens_per_second": 50.0, "time": {"rollout_s": 1.0, "verify_s": 0.1, "train_s": 0.5,
                                                "weight_sync_s": 0.1}, "lr": 1e-3}
        if asynchronous:
            line.update(async_queue_groups=step % 3 + 1, async_buffer_wait_s_mean=0.25 * step,
                        async_buffer_wait_s_max=0.5 * step, async_version_lag_mean=sum(lags) / len(lags),
                        async_version_lag_max=max(lags), async_versions_spanned_mean=sum(lags) / len(lags),
                        async_trainer_idle_ratio=0.4 / step, async_rollout_idle_ratio=0.1 * step,
                        async_stale_dropped=sum(lag > MAX_STALENESS for lag in lags), async_stale_reweighted=0,
                        async_resume_dropped_groups=0, sglang_requests_reissued=step - 1)  # as with SGLang
        lines.append(line)
    write_text_atomic(run.steps_path, "".join(json.dumps(line) + "\n" for line in lines))
    return lines
