"""The old policy of decoupled mode is scored as the engine samples, without dropout (eval mode),
and the module is back in train mode for the update: a model with dropout shows the difference."""

import dataclasses

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from envhub.trainer import fsdp
from envhub.trainer.batch import TrainingSample, collate, policy_logprobs
from envhub.trainer.config import TrainConfig
from envhub.trainer.update import lr_factor, old_logprobs, update_policy

LOCAL = fsdp.DistInfo(0, 1, 0, torch.device("cpu"), None)


def _dropout_model():
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=32, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                         num_attention_heads=4, num_key_value_heads=2, attention_dropout=0.5, pad_token_id=0)
    return LlamaForCausalLM(config).to(torch.float32)


def _config():
    return TrainConfig.model_validate({"run_dir": "run", "model": "tiny", "env": {"id": "test/FirstLetter-v0"},
                                       "steps": 1, "algorithm": {"mismatch": {"mode": "decoupled"}},
                                       "optim": {"lr": 1e-3, "micro_batch_size": 4}})


def _samples(model):
    """Two samples whose engine logprobs are the model's own without dropout (what an engine samples)."""
    draft = [TrainingSample("a", [1, 2, 3, 4, 5], [6, 7, 8, 9, 10, 11], [1] * 6, [0.0] * 6, advantage=1.0),
             TrainingSample("b", [3, 1, 4], [1, 5, 9, 2, 6], [1] * 5, [0.0] * 5, advantage=-1.0)]
    model.eval()
    with torch.no_grad():
        logp, _ = policy_logprobs(model, collate(draft, 0), temperature=1.0)
    return [dataclasses.replace(s, engine_logprobs=logp[i, :len(s.response_ids)].tolist()) for i, s in enumerate(draft)]


def test_old_policy_is_scored_without_dropout_and_train_mode_is_restored():
    model = _dropout_model()
    batch = collate(_samples(model), 0)
    model.train()
    with torch.no_grad():
        a, _ = policy_logprobs(model, batch, temperature=1.0)
        b, _ = policy_logprobs(model, batch, temperature=1.0)
    assert not torch.allclose(a, b)  # in train mode dropout changes every call
    first, _, _, stats = old_logprobs(model, batch, _config(), None, 1.0)
    second, _, _, _ = old_logprobs(model, batch, _config(), None, 1.0)
    assert model.training
    torch.testing.assert_close(first, second, rtol=0, atol=0)
    torch.testing.assert_close(first, batch.engine_logp, rtol=0, atol=1e-6)
    assert stats["mismatch_abs_mean"] == pytest.approx(0.0, abs=1e-6)


def test_an_update_of_a_dropout_model_sees_no_engine_mismatch():
    model, config = _dropout_model(), _config()
    samples = _samples(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.optim.lr)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda u: lr_factor(config, u))
    stats = update_policy(model, optimizer, scheduler, samples, config=config, dist=LOCAL, reference=None, pad_id=0)
    assert stats["updated"] and not model.training
    assert stats["mismatch_abs_mean"] == pytest.approx(0.0, abs=1e-6)
    assert stats["is_weight_mean"] == pytest.approx(1.0, abs=1e-5)
