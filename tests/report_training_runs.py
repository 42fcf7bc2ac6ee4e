"""A tiny real training run for the report tests: a few GRPO steps of the bundled trainer (seconds).

``FlakyLetterEnv`` is the learning test's first-letter env whose verifier service fails on the
tasks ending in ``-3`` (``env_error``, an infra outcome the agent cannot cause), so the run's
training episodes and its final eval both hold successes, policy failures and infra failures.
The config turns on the KL term and the decoupled mismatch mode, so every health statistic the
trainer logs is on record.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent / "trainer"))

from letter_env import FirstLetterEnv, _FirstLetter

from envhub.episode import Episode
from envhub.errors import InfraError
from envhub.registry import register
from envhub.types import Task, Verdict

ENV = "test/FlakyLetter-v0"


class _FlakyVerifier(_FirstLetter):
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
