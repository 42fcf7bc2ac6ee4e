"""The run's device and dtype reach every tensor: nothing is built on an implicit device, and bf16
computes the forward passes while weights and AdamW state stay fp32.

On a CPU-only machine the configured device and torch's default device are the same, so a tensor
built without a device would go unnoticed; here the default device is ``meta`` (in the training
thread and in the engine's worker thread) while the run's device is the CPU: any such tensor is a
meta tensor, and the step fails as soon as it meets a real one.
"""

import contextlib
import threading

import pytest
import torch
from safetensors.torch import load_file
from trainer_fixtures import letter_config

from envhub.policies import make_policy
from envhub.rollout.runner import run_rollouts
from envhub.trainer import fsdp
from envhub.trainer.config import parse_config
from envhub.trainer.loop import Trainer


def _params(module):
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


def _on_meta(target):
    def run(*args, **kwargs):
        with torch.device("meta"):
            return target(*args, **kwargs)
    return run


def _sft_then_step(run_dir, model, gold, *, trapped):
    """The SFT stage and one GRPO step (decoupled old policy, a KL reference), with the default device
    set to meta in this thread and in the engine's worker when ``trapped``; the weights and the step."""
    sections = {"sft": {"runs": [str(gold)], "epochs": 1, "lr": 0.01, "batch_size": 4},
                "algorithm": {"drop_zero_variance": False, "kl_coef": 0.1, "mismatch": {"mode": "decoupled"}}}
    trainer = Trainer(parse_config(letter_config(run_dir, model, device="cpu", **sections)), log=lambda line: None)
    try:
        engine = trainer.models.engine
        assert engine._thread is None  # its worker starts with the first request: wrap it before
        trap = torch.device("meta") if trapped else contextlib.nullcontext()
        if trapped:
            engine._loop = _on_meta(engine._loop)
        with trap:
            assert (torch.empty(1).device.type == "meta") == trapped
            trainer.sft_stage()
            record = trainer.train_step()
        assert engine._thread is not None and engine._thread is not threading.current_thread()
        return _params(trainer.models.model), record
    finally:
        trainer.close()


def test_sft_and_a_grpo_step_build_no_tensor_on_an_implicit_device(tmp_path, scratch_model, one_torch_thread):
    gold = tmp_path / "gold"
    run_rollouts("test/FirstLetter-v0", make_policy("gold"), out_dir=gold, episodes=8)
    base = load_file(str(scratch_model / "model.safetensors"))
    trapped, record = _sft_then_step(tmp_path / "trapped", scratch_model, gold, trapped=True)
    plain, plain_record = _sft_then_step(tmp_path / "plain", scratch_model, gold, trapped=False)
    assert all(t.device.type == "cpu" for t in trapped.values())
    assert any(not torch.equal(trapped[k], base[k]) for k in base)  # SFT trained
    assert trapped.keys() == plain.keys() and all(torch.equal(trapped[k], plain[k]) for k in plain)
    assert record["optimizer_steps"] == plain_record["optimizer_steps"] == 1
    for key in ("loss", "kl", "trained_samples", "reward_mean"):
        assert record[key] == plain_record[key], key


def test_bfloat16_computes_in_bf16_and_keeps_fp32_master_weights(tmp_path, scratch_model, one_torch_thread):
    def step(dtype):
        config = parse_config(letter_config(tmp_path / dtype, scratch_model, device="cpu", dtype=dtype, steps=1,
                                            algorithm={"drop_zero_variance": False}))
        trainer = Trainer(config, log=lambda line: None)
        try:
            record = trainer.train_step()
            optimizer = trainer.models.optimizer
            states = [t for s in optimizer.state.values() for t in s.values() if t.is_floating_point() and t.dim()]
            dtypes = {p.dtype for p in trainer.models.model.parameters()} | {t.dtype for t in states}
            rows = list(trainer.files.step_rollouts(1).rows())
            return record, dtypes, {r["episode_id"]: (r["response_ids"][0], r["response_logprobs"][0]) for r in rows}
        finally:
            trainer.close()

    _, fp32_dtypes, fp32_logprobs = step("float32")
    bf16, bf16_dtypes, bf16_logprobs = step("bfloat16")
    assert fp32_dtypes == bf16_dtypes == {torch.float32}  # weights and AdamW moments stay fp32
    assert bf16["optimizer_steps"] == 1
    # the same episodes' first tokens come from nearly the same distribution, but not bit for bit (bf16 products)
    same = [(fp32_logprobs[e][1], lp) for e, (token, lp) in bf16_logprobs.items() if fp32_logprobs[e][0] == token]
    assert same
    assert all(abs(a - b) < 0.1 for a, b in same) and any(a != b for a, b in same)


def test_device_cuda_without_cuda_is_refused_with_what_to_use(tmp_path, scratch_model):
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: device: cuda is valid here")
    config = parse_config(letter_config(tmp_path / "run", scratch_model, device="cuda"))
    with pytest.raises(RuntimeError, match="device: cpu or auto"):
        Trainer(config, log=lambda line: None)


def test_auto_is_the_cpu_without_cuda_and_cpu_stays_the_cpu():
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert fsdp.init_distributed(device="auto").device.type == expected
    assert fsdp.init_distributed(device="cpu").device.type == "cpu"
