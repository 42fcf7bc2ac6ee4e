"""Helpers of the trainer tests (a module of its own name: several conftest.py files exist)."""

from pathlib import Path

TRAIN_SCRIPT = Path(__file__).resolve().parent / "train_script.py"


def letter_config(run_dir: Path, model: Path, **sections) -> dict:
    """A small GRPO config on ``test/FirstLetter-v0``; ``sections`` replace or extend its parts."""
    config = {
        "run_dir": str(run_dir), "model": str(model),
        "env": {"id": "test/FirstLetter-v0", "validation_split": None},
        "sampling": {"max_new_tokens": 2, "temperature": 1.0},
        "rollout": {"groups_per_step": 2, "group_size": 4, "concurrency": 1, "max_response_tokens": 4,
                    "max_context": 512},
        "optim": {"lr": 1e-3, "micro_batch_size": 3},
        "steps": 4, "checkpoint_every": 2, "seed": 0,
    }
    for key, value in sections.items():
        if isinstance(value, dict) and isinstance(config.get(key), dict):
            config[key] = {**config[key], **value}
        else:
            config[key] = value
    return config
