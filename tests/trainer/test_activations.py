"""Activation checkpointing only where memory needs it, and the fused AdamW: both change the cost of
an update, never its result."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch

from envhub.trainer.activations import ActivationCheckpointing, activation_bytes_per_token
from envhub.trainer.config import parse_config
from envhub.trainer.update import adamw


def _model(path: Path) -> torch.nn.Module:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32)
    model.config.use_cache = False
    return model


def _grads(model: torch.nn.Module, ids: torch.Tensor) -> dict[str, torch.Tensor]:
    model.train()
    model.zero_grad(set_to_none=True)
    model(input_ids=ids, use_cache=False).logits.logsumexp(-1).mean().backward()
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def test_auto_recomputes_only_micro_batches_whose_activations_exceed_the_budget(scratch_model: Path) -> None:
    model = _model(scratch_model)
    c = model.config
    per_token = activation_bytes_per_token(c)
    assert per_token == 4.0 * c.num_hidden_layers * (4 * c.hidden_size + 2 * c.intermediate_size)
    auto = ActivationCheckpointing(model, "auto", 0.25)
    params = sum(p.numel() for p in model.parameters())
    assert auto.max_tokens == int(0.25 * 16 * params / per_token) > 0
    assert not auto.recomputes(auto.max_tokens) and auto.recomputes(auto.max_tokens + 1)
    assert auto.layers and len(auto.layers) == c.num_hidden_layers

    short = torch.randint(0, 100, (1, 4))
    long = torch.randint(0, 100, (2, auto.max_tokens // 2 + 1))
    auto.prepare(short)
    assert not any(layer.gradient_checkpointing for layer in auto.layers)
    auto.prepare(long)
    assert all(layer.gradient_checkpointing for layer in auto.layers)
    assert ActivationCheckpointing(_model(scratch_model), True, 0.25).recomputes(1)
    assert not ActivationCheckpointing(_model(scratch_model), False, 0.25).recomputes(10**9)


def test_recomputing_gives_the_same_gradients(scratch_model: Path) -> None:
    model = _model(scratch_model)
    checkpointing = ActivationCheckpointing(model, True, 0.25)
    ids = torch.randint(0, 100, (2, 16))
    checkpointing.prepare(ids)
    recomputed = _grads(model, ids)
    checkpointing.setting = False
    checkpointing.prepare(ids)
    assert not any(layer.gradient_checkpointing for layer in checkpointing.layers)
    kept = _grads(model, ids)
    assert recomputed.keys() == kept.keys()
    for name in kept:
        torch.testing.assert_close(recomputed[name], kept[name], rtol=1e-5, atol=1e-6)


def test_fused_adamw_makes_the_same_update(scratch_model: Path) -> None:
    model = _model(scratch_model)
    twin = copy.deepcopy(model)
    fused = adamw(model.parameters(), fused=True, lr=1e-3, weight_decay=0.01)
    plain = adamw(twin.parameters(), fused=False, lr=1e-3, weight_decay=0.01)
    assert fused.defaults["fused"] is True and not plain.defaults["fused"]
    ids = torch.randint(0, 100, (2, 8))
    for _ in range(3):
        for m, opt in ((model, fused), (twin, plain)):
            _grads(m, ids)
            opt.step()
    for (name, a), (_, b) in zip(model.named_parameters(), twin.named_parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=name)


@pytest.mark.parametrize("value, parsed", [("auto", "auto"), (True, True), (False, False)])
def test_the_setting_parses_and_old_configs_keep_their_boolean(value: object, parsed: object) -> None:
    base = {"run_dir": "runs/x", "model": "m", "env": {"id": "e"}}
    config = parse_config({**base, "optim": {"activation_checkpointing": value}})
    assert config.optim.activation_checkpointing == parsed
    assert parse_config(base).optim.activation_checkpointing == "auto"
