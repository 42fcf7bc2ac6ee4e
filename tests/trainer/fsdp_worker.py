"""One rank of the FSDP2 equivalence test (``tests/trainer/test_fsdp.py``); also its shared helpers.

Run as ``torchrun --standalone --nproc_per_node 2 fsdp_worker.py MODEL_DIR OUT_DIR``. Each rank
trains the tiny model for 2 AdamW steps on its half of a fixed batch (two micro-batches of one
row each, losses normalized by the full batch's token count), snapshots the weights and the
optimizer, runs a forward without backward and reshards, takes a third step, then loads the
snapshot into a fresh sharded model and optimizer and takes the same third step, and the same
again from the snapshot one process took (``OUT_DIR/one_process_after2.pt``). It writes what it
saw to ``OUT_DIR/rank{R}.pt`` (atomically) for the test to compare with one process.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import torch

from envhub.trainer import fsdp

BATCH, SEQ, SEED = 4, 10, 1234
ONE_PROCESS_SNAPSHOT = "one_process_after2.pt"  # written by the test before torchrun starts
LR, EPS, WEIGHT_DECAY = 1e-3, 1e-6, 0.01  # eps 1e-6: sign(g) of near-zero gradients cannot flip updates


def make_batch(vocab: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Fixed token ids ``[BATCH, SEQ]`` and a loss mask over the predicted positions ``[BATCH, SEQ-1]``."""
    gen = torch.Generator().manual_seed(SEED)
    ids = torch.randint(0, vocab, (BATCH, SEQ), generator=gen)
    mask = (torch.rand((BATCH, SEQ - 1), generator=gen) < 0.7).float()
    mask[:, 0] = 1.0
    return ids, mask


def load_model(model_dir: str) -> torch.nn.Module:
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)


def make_optimizer(model: torch.nn.Module) -> torch.optim.Optimizer:
    return torch.optim.AdamW(model.parameters(), lr=LR, eps=EPS, weight_decay=WEIGHT_DECAY)


def micro_loss(model: torch.nn.Module, ids: torch.Tensor, mask: torch.Tensor, total_tokens: float) -> torch.Tensor:
    """Masked next-token NLL of these rows, divided by the FULL batch's mask count."""
    logits = model(input_ids=ids).logits[:, :-1].float()
    logprobs = torch.log_softmax(logits, dim=-1).gather(-1, ids[:, 1:, None]).squeeze(-1)
    return -(logprobs * mask).sum() / total_tokens


def train_step(model: torch.nn.Module, opt: torch.optim.Optimizer, rows: list[list[int]], ids: torch.Tensor,
               mask: torch.Tensor, dist_info: fsdp.DistInfo) -> tuple[float, float]:
    """One optimizer step over micro-batches ``rows`` (row indices); returns (loss, grad norm),
    the loss summed over ranks."""
    total = float(mask.sum())
    opt.zero_grad(set_to_none=True)
    loss = 0.0
    for micro in rows:
        value = micro_loss(model, ids[micro], mask[micro], total)
        value.backward()
        loss += float(value.detach())
    norm = fsdp.clip_grad_norm(model, 1e9)
    opt.step()
    return fsdp.all_reduce_sum({"loss": loss}, dist_info)["loss"], norm


def rank_rows(rank: int, world: int) -> list[list[int]]:
    """This rank's micro-batches: its contiguous share of the batch, one row each."""
    per = BATCH // world
    return [[r] for r in range(rank * per, (rank + 1) * per)]


def atomic_save(obj: Any, path: Path) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    torch.save(obj, tmp)
    os.replace(tmp, path)


def main(model_dir: str, out_dir: str) -> None:
    torch.set_num_threads(1)
    info = fsdp.init_distributed()
    assert info.distributed and info.backend == "gloo", info
    assert fsdp.init_distributed() == info  # idempotent
    model = fsdp.shard_model(load_model(model_dir), info)
    opt = make_optimizer(model)
    ids, mask = make_batch(model.config.vocab_size)
    rows = rank_rows(info.rank, info.world_size)
    out: dict[str, Any] = {"losses": [], "grad_norms": [], "sharded_at_start": fsdp.is_sharded(model)}
    for _ in range(2):
        loss, norm = train_step(model, opt, rows, ids, mask, info)
        out["losses"].append(loss)
        out["grad_norms"].append(norm)
    out["after2"] = fsdp.full_state_dict(model, info)
    opt_state = fsdp.optimizer_state(model, opt, info)
    out["opt_state_keys"] = sorted(opt_state.get("state", {}))

    with torch.no_grad():
        model(input_ids=ids[rows[0]])
    out["sharded_after_forward"] = fsdp.is_sharded(model)
    fsdp.reshard_after_forward_only(model)
    out["sharded_after_reshard"] = fsdp.is_sharded(model)

    loss, norm = train_step(model, opt, rows, ids, mask, info)
    out["losses"].append(loss)
    out["grad_norms"].append(norm)
    out["after3"] = fsdp.full_state_dict(model, info)

    fresh = fsdp.shard_model(load_model(model_dir), info)
    fresh_opt = make_optimizer(fresh)
    fsdp.load_full_state_dict(fresh, out["after2"], info)
    fsdp.load_optimizer_state(fresh, fresh_opt, opt_state, info)
    out["resumed_loss"], _ = train_step(fresh, fresh_opt, rows, ids, mask, info)
    out["resumed3"] = fsdp.full_state_dict(fresh, info)
    if info.is_main:
        out["opt_state"] = opt_state  # for the test to resume with one process (2 -> 1)

    # A snapshot that one process took (1 -> 2): same format, loads into the sharded model.
    one = torch.load(Path(out_dir) / ONE_PROCESS_SNAPSHOT, weights_only=True)
    other = fsdp.shard_model(load_model(model_dir), info)
    other_opt = make_optimizer(other)
    fsdp.load_full_state_dict(other, one["weights"], info)
    fsdp.load_optimizer_state(other, other_opt, one["optimizer"] if info.is_main else {}, info)
    train_step(other, other_opt, rows, ids, mask, info)
    out["from_one_process3"] = fsdp.full_state_dict(other, info)
    out["stats"] = fsdp.all_reduce_sum({"one": 1.0, "rank": float(info.rank)}, info)
    fsdp.barrier(info)
    atomic_save(out, Path(out_dir) / f"rank{info.rank}.pt")
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
