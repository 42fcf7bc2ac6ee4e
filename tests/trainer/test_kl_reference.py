"""The KL reference is the policy GRPO starts from: the policy after the SFT stage, not the base model,
and a resumed run gets it from the checkpoint (the reference the uninterrupted run used)."""

import json

import pytest
import torch
from safetensors.torch import load_file
from trainer_fixtures import letter_config

from envhub.policies import make_policy
from envhub.rollout.runner import run_rollouts
from envhub.trainer.config import parse_config
from envhub.trainer.loop import Trainer


def _state(module):
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


def _same(a, b):
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.slow
def test_kl_reference_is_the_post_sft_policy_also_after_resume(tmp_path, scratch_model, one_torch_thread):
    gold = tmp_path / "gold"
    run_rollouts("test/FirstLetter-v0", make_policy("gold"), out_dir=gold, episodes=8)
    run = tmp_path / "run"
    sections = {"sft": {"runs": [str(gold)], "epochs": 2, "lr": 0.01, "batch_size": 4},
                "algorithm": {"kl_coef": 0.1, "drop_zero_variance": False},
                "steps": 2, "checkpoint_every": 1, "keep_checkpoints": 3}
    lines = []
    trainer = Trainer(parse_config(letter_config(run, scratch_model, **sections)), log=lines.append)
    try:
        trainer.run()
        reference = _state(trainer.models.reference)
    finally:
        trainer.close()
    post_sft = torch.load(run / "checkpoints" / "step-000000" / "model.pt", weights_only=True)
    base = load_file(str(scratch_model / "model.safetensors"))
    assert any(not torch.equal(post_sft[k], base[k]) for k in base)  # SFT moved the policy
    assert _same(reference, post_sft)
    steps = [json.loads(line) for line in (run / "steps.jsonl").read_text().splitlines()]
    # step 1 scores every sample before its one update: the policy is still the reference
    assert steps[0]["optimizer_steps"] == 1 and steps[0]["kl"] < 1e-6
    assert steps[1]["kl"] > 0
    assert any("KL reference" in line and "after SFT" in line for line in lines), lines
    assert _same(torch.load(run / "checkpoints" / "step-000002" / "reference.pt", weights_only=True), post_sft)
    resumed = Trainer(parse_config(letter_config(run, scratch_model, **{**sections, "steps": 3})), resume=True,
                      log=lambda line: None)
    try:
        assert _same(_state(resumed.models.reference), post_sft)
    finally:
        resumed.close()
