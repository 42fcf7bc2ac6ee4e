"""``algorithm.mismatch.normalize: group`` in a real update: the weights of a group are normalized over
the whole step, whichever micro-batches its members sit in, and change nothing where engine and trainer
agree."""

import dataclasses

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from envhub.trainer import fsdp
from envhub.trainer.batch import TrainingSample, collate, policy_logprobs
from envhub.trainer.config import TrainConfig
from envhub.trainer.update import lr_factor, update_policy

LOCAL = fsdp.DistInfo(0, 1, 0, torch.device("cpu"), None)


def _model():
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=32, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                         num_attention_heads=4, num_key_value_heads=2, pad_token_id=0)
    return LlamaForCausalLM(config).to(torch.float32)


def _config(normalize: str, micro_batch_size: int) -> TrainConfig:
    return TrainConfig.model_validate({
        "run_dir": "run", "model": "tiny", "env": {"id": "test/FirstLetter-v0"}, "steps": 1,
        "algorithm": {"mismatch": {"mode": "decoupled", "normalize": normalize, "cap": 10.0}},
        "optim": {"lr": 1e-2, "micro_batch_size": micro_batch_size, "grad_clip": None}})


def _samples(model, engine_offset: float):
    """Two groups of four; the engine's logprobs are the model's own, lowered by ``engine_offset`` on the
    wrong answers (A < 0): their weights exceed the right answers', as in a run whose samples are stale."""
    prompts = ([1, 2, 3, 4], [5, 6, 7])
    draft = [TrainingSample(f"g{g}-{i}", prompts[g], [8 + i + g, 12 + i, 20 + g], [1, 1, 1], [0.0] * 3,
                            advantage=(1.0 if i < 2 else -1.0) * (g + 1), group_id=f"g{g}")
             for g in range(2) for i in range(4)]
    # members of a group interleaved, so that small micro-batches split every group
    draft = [draft[k] for k in (0, 4, 1, 5, 2, 6, 3, 7)]
    model.eval()
    with torch.no_grad():
        logp, _ = policy_logprobs(model, collate(draft, 0), temperature=1.0)
    return [dataclasses.replace(s, engine_logprobs=[v - (engine_offset if s.advantage < 0 else 0.0)
                                                    for v in logp[i, :3].tolist()]) for i, s in enumerate(draft)]


def _train(normalize: str, micro_batch_size: int, engine_offset: float):
    model = _model()
    config = _config(normalize, micro_batch_size)
    samples = _samples(model, engine_offset)
    optimizer = torch.optim.SGD(model.parameters(), lr=config.optim.lr)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda u: lr_factor(config, u))
    stats = update_policy(model, optimizer, scheduler, samples, config=config, dist=LOCAL, reference=None, pad_id=0)
    return torch.cat([p.detach().flatten() for p in model.parameters()]), stats


def test_agreeing_engine_and_trainer_train_the_same_with_or_without_it():
    plain, plain_stats = _train("none", 8, 0.0)
    normalized, stats = _train("group", 8, 0.0)
    torch.testing.assert_close(normalized, plain, rtol=0, atol=1e-6)
    assert stats["is_group_tilt"] == pytest.approx(0.0, abs=1e-6) and "is_group_tilt" not in plain_stats


def test_a_tilt_is_removed_over_the_whole_step_whatever_the_micro_batches():
    untilted = _train("none", 8, 0.0)[0]
    tilted, _ = _train("none", 8, 0.5)
    whole, stats = _train("group", 8, 0.5)
    split, split_stats = _train("group", 1, 0.5)
    # weights e^0.5 on the wrong answers: a tilt of mean(w A) / mean(w) per group, as group_normalized_weights says
    w = torch.tensor([1.0, 1.0, 2.718281828 ** 0.5, 2.718281828 ** 0.5])
    tilt = [float((w / w.mean() * torch.tensor([1.0, 1, -1, -1]) * scale).mean()) for scale in (1, 2)]
    assert stats["is_group_tilt"] == pytest.approx(sum(abs(x) for x in tilt) / 2, rel=1e-4)
    assert split_stats["is_group_tilt"] == pytest.approx(stats["is_group_tilt"], rel=1e-5)
    torch.testing.assert_close(split, whole, rtol=0, atol=1e-6)
    assert (whole - tilted).abs().max() > 1e-4 and (whole - untilted).abs().max() > 1e-4
