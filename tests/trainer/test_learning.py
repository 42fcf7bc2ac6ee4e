"""Proof that the trainer learns: a model trained from scratch goes from <= 0.2 to >= 0.8 reward, with
every weight trained or with only a LoRA adapter."""

import json

import pytest
from trainer_fixtures import letter_config

from envhub.trainer.config import parse_config
from envhub.trainer.loop import train


@pytest.mark.slow
@pytest.mark.parametrize("lora, lr", [
    (None, 0.03),
    # the base frozen: an adapter on the (untied) output head moves a random model's tokens, the
    # attention adapters alone could not
    ({"r": 8, "alpha": 16.0, "target_modules": ["q_proj", "v_proj", "lm_head"]}, 0.05),
], ids=["full", "lora"])
def test_grpo_learns_the_first_letter_task_from_scratch(request, tmp_path, one_torch_thread, lora, lr):
    model = request.getfixturevalue("untied_scratch_model" if lora else "scratch_model")
    config = parse_config(letter_config(
        tmp_path / "run", model, lora=lora,
        env={"validation_split": "validation"},
        sampling={"max_new_tokens": 1, "temperature": 1.0},
        rollout={"groups_per_step": 4, "group_size": 8, "concurrency": 8, "max_response_tokens": 2},
        optim={"lr": lr, "micro_batch_size": 32, "grad_clip": 1.0},
        eval={"episodes": 128, "temperature": 1.0},
        steps=30, checkpoint_every=30))
    summary = train(config, log=lambda line: None)
    steps = [json.loads(line) for line in (tmp_path / "run" / "steps.jsonl").read_text().splitlines()]
    assert [s["step"] for s in steps] == list(range(1, 31))
    evals = {e["tag"]: e for e in summary["evals"]}
    assert evals["before"]["strict_success"] <= 0.2, evals
    assert evals["final"]["strict_success"] >= 0.8, evals
    assert sum(s["reward_mean"] for s in steps[:3]) / 3 <= 0.3
    assert sum(s["reward_mean"] for s in steps[-3:]) / 3 >= 0.8
    assert all(s["outcomes"]["env_error"] == 0 for s in steps)
    assert sum(s["optimizer_steps"] for s in steps) >= 5  # it learned by updating, not by luck of sampling
