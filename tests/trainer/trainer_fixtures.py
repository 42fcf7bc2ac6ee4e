"""Helpers of the trainer tests (a module of its own name: several conftest.py files exist)."""

import json
from pathlib import Path

import torch
from safetensors.torch import load_file

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


def steps_of(run):
    return [json.loads(line) for line in (run / "steps.jsonl").read_text().splitlines()]


def sampled_tokens(run, step):
    path = run / "rollouts" / f"step-{step:06d}" / "trajectories.jsonl"
    records = [json.loads(line) for line in path.read_text().splitlines()]
    return {r["episode_id"]: (r["response_ids"], r["response_logprobs"]) for r in records}


def final_weights(run):
    return load_file(str(run / "final" / "model.safetensors"))


def assert_same_run(a, b):
    for step in (1, 2, 3, 4):
        assert sampled_tokens(a, step) == sampled_tokens(b, step), f"step {step} sampled other tokens"
    sa, sb = steps_of(a), steps_of(b)
    assert [s["step"] for s in sb] == [1, 2, 3, 4]
    for x, y in zip(sa, sb, strict=True):
        assert x["trained_episodes"] == y["trained_episodes"]
        assert abs(x["loss"] - y["loss"]) <= 1e-6, (x["step"], x["loss"], y["loss"])
    wa, wb = final_weights(a), final_weights(b)
    assert wa.keys() == wb.keys()
    for key in wa:
        torch.testing.assert_close(wa[key], wb[key], rtol=0, atol=1e-6)
    trained = [e for s in sb for e in s["trained_episodes"]]
    assert len(trained) == len(set(trained)), "a sample was trained twice"
