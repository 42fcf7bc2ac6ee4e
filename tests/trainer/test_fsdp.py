"""FSDP2 with 2 real gloo processes equals one process on the whole batch.

``fsdp_worker.py`` runs under ``torchrun --standalone --nproc_per_node 2``: each rank trains the
tiny model on its half of a fixed batch; this test trains the same model in-process on the whole
batch and compares losses, gradient norms (which catch a gradient averaged instead of summed:
Adam's update barely depends on the gradient's scale) and weights, checks that the full state dict
is identical on both ranks, that the optimizer state round-trips into a fresh sharded model, and
that a forward without backward leaves the root unsharded until :func:`reshard_after_forward_only`.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType

import pytest
import torch
from torch import nn
from torch.distributed.tensor import DTensor

from envhub.adapters.engines.tiny import build_tiny_model
from envhub.trainer import fsdp

WORKER = Path(__file__).with_name("fsdp_worker.py")


def _worker_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("envhub_test_fsdp_worker", WORKER)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _assert_weights_close(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor]) -> None:
    assert sorted(got) == sorted(want)
    for name in want:
        assert not isinstance(got[name], DTensor), name
        torch.testing.assert_close(got[name], want[name], rtol=1e-5, atol=2e-6, msg=lambda m, n=name: f"{n}: {m}")


@pytest.fixture(scope="module")
def two_rank_run(tmp_path_factory: pytest.TempPathFactory, one_process_run: dict) -> tuple[dict, dict, float]:
    model_dir = build_tiny_model()
    out = tmp_path_factory.mktemp("fsdp")
    snapshot = {"weights": one_process_run["after2"], "optimizer": one_process_run["opt_state"]}
    torch.save(snapshot, out / _worker_module().ONE_PROCESS_SNAPSHOT)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(var, None)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
           str(WORKER), str(model_dir), str(out)]
    t0 = time.monotonic()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=180)
    elapsed = time.monotonic() - t0
    assert proc.returncode == 0, f"torchrun failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
    ranks = [torch.load(out / f"rank{r}.pt", weights_only=True) for r in range(2)]
    return ranks[0], ranks[1], elapsed


@pytest.fixture(scope="module")
def one_process_run(one_torch_thread: None) -> dict:
    """The same 3 steps in this process, the whole batch in one micro-batch."""
    w = _worker_module()
    info = fsdp.init_distributed()
    assert not info.distributed and info.backend is None and info.is_main
    model = w.load_model(str(build_tiny_model()))
    assert fsdp.shard_model(model, info) is model
    opt = w.make_optimizer(model)
    ids, mask = w.make_batch(model.config.vocab_size)
    out: dict = {"losses": [], "grad_norms": []}
    for step in range(3):
        loss, norm = w.train_step(model, opt, [list(range(w.BATCH))], ids, mask, info)
        out["losses"].append(loss)
        out["grad_norms"].append(norm)
        if step == 1:
            out["after2"] = fsdp.full_state_dict(model, info)
            out["model"], out["opt"], out["opt_state"] = model, opt, fsdp.optimizer_state(model, opt, info)
    out["after3"] = fsdp.full_state_dict(model, info)
    out["batch"] = (ids, mask)
    return out


@pytest.mark.slow
def test_two_gloo_ranks_equal_one_process(two_rank_run, one_process_run):
    r0, r1, elapsed = two_rank_run
    ref = one_process_run
    print(f"torchrun 2 ranks: {elapsed:.1f}s")
    # Gradients are summed over ranks: the full-batch gradient, so its norm is the one-process norm.
    torch.testing.assert_close(torch.tensor(r0["grad_norms"]), torch.tensor(ref["grad_norms"]), rtol=1e-5, atol=0)
    torch.testing.assert_close(torch.tensor(r0["losses"]), torch.tensor(ref["losses"]), rtol=1e-6, atol=0)
    assert r0["grad_norms"] == r1["grad_norms"] and r0["losses"] == r1["losses"]
    _assert_weights_close(r0["after2"], ref["after2"])
    _assert_weights_close(r0["after3"], ref["after3"])
    moved = max(float((ref["after3"][k] - ref["after2"][k]).abs().max()) for k in ref["after3"])
    assert moved > 1e-4  # the steps did change the weights, far beyond the tolerance


def test_full_state_dict_is_identical_on_every_rank(two_rank_run):
    r0, r1, _ = two_rank_run
    for snapshot in ("after2", "after3", "resumed3"):
        assert sorted(r0[snapshot]) == sorted(r1[snapshot])
        for name, tensor in r0[snapshot].items():
            assert tensor.device.type == "cpu" and torch.equal(tensor, r1[snapshot][name]), (snapshot, name)
    assert "lm_head.weight" in r0["after2"] and torch.equal(r0["after2"]["lm_head.weight"],
                                                            r0["after2"]["model.embed_tokens.weight"])


def test_optimizer_state_round_trips_into_a_fresh_sharded_model(two_rank_run):
    r0, r1, _ = two_rank_run
    assert "model.norm.weight" in r0["opt_state_keys"] and r1["opt_state_keys"] == []  # rank 0 holds it
    assert r0["resumed_loss"] == r0["losses"][2]
    for name, tensor in r0["after3"].items():
        assert torch.equal(r0["resumed3"][name], tensor), name  # bit for bit the unbroken third step


def test_a_snapshot_resumes_at_another_world_size(two_rank_run, one_process_run):
    r0, r1, _ = two_rank_run
    ref = one_process_run
    # 1 -> 2: the one-process snapshot, loaded into 2 sharded ranks, takes the one-process third step
    _assert_weights_close(r0["from_one_process3"], ref["after3"])
    assert all(torch.equal(t, r1["from_one_process3"][k]) for k, t in r0["from_one_process3"].items())
    # 2 -> 1: rank 0's snapshot, loaded into one process, takes the 2-rank third step
    w = _worker_module()
    info = fsdp.init_distributed()
    model = w.load_model(str(build_tiny_model()))
    opt = w.make_optimizer(model)
    fsdp.load_full_state_dict(model, r0["after2"], info)
    fsdp.load_optimizer_state(model, opt, r0["opt_state"], info)
    ids, mask = ref["batch"]
    w.train_step(model, opt, [list(range(w.BATCH))], ids, mask, info)
    _assert_weights_close(fsdp.full_state_dict(model, info), r0["after3"])


def test_forward_without_backward_then_reshard_leaves_parameters_sharded(two_rank_run):
    for rank in two_rank_run[:2]:
        assert rank["sharded_at_start"]
        assert not rank["sharded_after_forward"]  # FSDP keeps the root unsharded after forward
        assert rank["sharded_after_reshard"]
        assert rank["stats"] == {"one": 2.0, "rank": 1.0}


def test_one_process_optimizer_state_round_trips_and_is_a_copy(one_process_run):
    ref = one_process_run
    w = _worker_module()
    info = fsdp.init_distributed()
    state = ref["opt_state"]
    steps_before = {k: float(v["step"]) for k, v in state["state"].items()}
    assert steps_before and set(steps_before.values()) == {2.0}
    # the reference run took a third step after the snapshot: the snapshot must not have moved
    live = ref["opt"].state[ref["model"].model.norm.weight]
    assert float(live["step"]) == 3.0 and float(state["state"]["model.norm.weight"]["step"]) == 2.0
    fresh = w.load_model(str(build_tiny_model()))
    fresh_opt = w.make_optimizer(fresh)
    fsdp.load_full_state_dict(fresh, {k: v for k, v in ref["after2"].items() if k != "lm_head.weight"}, info)
    fsdp.load_optimizer_state(fresh, fresh_opt, state, info)
    ids, mask = ref["batch"]
    w.train_step(fresh, fresh_opt, [list(range(w.BATCH))], ids, mask, info)
    assert float(state["state"]["model.norm.weight"]["step"]) == 2.0  # loading did not alias it either
    for name, tensor in fsdp.full_state_dict(fresh, info).items():
        assert torch.equal(tensor, ref["after3"][name]), name


def test_single_process_helpers_are_no_ops():
    info = fsdp.init_distributed()
    assert fsdp.all_reduce_sum({"a": 1.5, "b": -2.0}, info) == {"a": 1.5, "b": -2.0}
    fsdp.barrier(info)
    model = nn.Sequential(nn.Linear(2, 2))
    fsdp.reshard_after_forward_only(model)
    assert not fsdp.is_sharded(model)


def test_decoder_layers_are_found_generically():
    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(4, 4)

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.small = nn.ModuleList([nn.Linear(1, 1)])
            self.blocks = nn.ModuleList([Block(), Block()])

    net = Net()
    assert fsdp.decoder_layers(net) is net.blocks
    with pytest.raises(ValueError, match="no decoder layers found"):
        fsdp.decoder_layers(nn.Sequential(nn.Linear(2, 2)))
    model = _worker_module().load_model(str(build_tiny_model()))
    assert fsdp.decoder_layers(model) is model.model.layers


def test_a_mismatched_state_dict_is_refused():
    info = fsdp.init_distributed()
    model = nn.Linear(2, 2)
    with pytest.raises(ValueError, match="missing"):
        fsdp.load_full_state_dict(model, {"weight": torch.zeros(2, 2)}, info)
    with pytest.raises(ValueError, match="unexpected"):
        fsdp.load_full_state_dict(model, {"weight": torch.zeros(2, 2), "bias": torch.zeros(2), "x": torch.ones(1)},
                                  info)
