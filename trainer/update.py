"""One training step's policy update: micro-batched loss on the mask-1 tokens, optimizer steps.

The step's samples are split into ``optim.updates_per_step`` mini-batches (one optimizer step each)
of micro-batches (one forward and backward each, gradients accumulated). Losses are normalized by
the mini-batch's totals over every rank (:func:`envhub.trainer.grpo.policy_loss`'s
``batch_sequences``/``batch_tokens``), so accumulated micro-batch gradients equal the mini-batch's
gradient exactly, on one process or sharded.

The old policy is fixed before the first optimizer step: the engine's sampled logprobs (``bypass``)
or the trainer's own recomputed ones with importance weights against the engine's (``decoupled``),
scored in eval mode (no dropout: the policy as the engine samples it).

The LR schedule is a function of the training step: the scheduler steps once per mini-batch of every
step, whether it updated or not (a zero-variance step trains nothing, but warm-up and decay move on).
Under FSDP every rank must run the same number of forward passes (each is a collective), so ranks
with fewer micro-batches run empty ones (mask 0: they change no gradient).
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import torch

from envhub.adapters.engines.precision import COMPUTE_DTYPES
from envhub.trainer import fsdp, grpo
from envhub.trainer.activations import ActivationCheckpointing
from envhub.trainer.batch import MicroBatch, TrainingSample, collate, micro_batches, policy_logprobs
from envhub.trainer.config import TrainConfig


def adamw(params: Any, *, fused: bool, **settings: Any) -> torch.optim.AdamW:
    """AdamW, with its fused kernel when ``fused`` and this torch supports it for these parameters
    (the same update as the for-each implementation, in one pass; sharded DTensors keep for-each).
    Frozen parameters (a LoRA adapter's base) are left out."""
    params = [p for p in params if p.requires_grad]
    if fused:
        try:
            return torch.optim.AdamW(params, fused=True, **settings)
        except (RuntimeError, TypeError):
            pass
    return torch.optim.AdamW(params, **settings)


def lr_factor(config: TrainConfig, update: int) -> float:
    """The learning-rate multiplier at schedule position ``update`` = (training step - 1) *
    ``updates_per_step`` + the mini-batch's index (every step's mini-batches count, updated or not):
    linear warm-up over ``optim.warmup_steps`` training steps, then the ``optim.schedule`` (cosine,
    linear or constant) over the rest of the run's ``steps * updates_per_step`` positions."""
    o, total = config.optim, max(config.steps * config.optim.updates_per_step, 1)
    warm = o.warmup_steps * o.updates_per_step
    if warm and update < warm:
        return (update + 1) / warm
    progress = min(max(update - warm, 0) / max(total - warm, 1), 1.0)
    if o.schedule == "cosine":
        return 0.5 * (1 + math.cos(math.pi * progress))
    if o.schedule == "linear":
        return 1.0 - progress
    return 1.0


def update_policy(model: torch.nn.Module, optimizer: torch.optim.Optimizer, scheduler: Any, samples: list[TrainingSample],
                  *, config: TrainConfig, dist: fsdp.DistInfo, reference: torch.nn.Module | None,
                  pad_id: int, checkpointing: ActivationCheckpointing | None = None) -> dict[str, Any]:
    """Train on ``samples`` (this rank's share); returns the step's statistics, summed over ranks.
    ``checkpointing`` decides per micro-batch whether activations are recomputed (None: as the model is)."""
    algo, optim = config.algorithm, config.optim
    temperature = algo.temperature if algo.temperature is not None else config.sampling.temperature
    minis = [samples[i::optim.updates_per_step] for i in range(optim.updates_per_step)]
    device = model_device(model)
    micro = [micro_batches(m, optim.micro_batch_size, pad_id, device) for m in minis]
    micro = [pad_to_same_count(m, dist, pad_id, device) for m in micro]
    model.train()
    try:
        return _update(model, optimizer, scheduler, samples, micro, config=config, dist=dist, reference=reference,
                       temperature=temperature, checkpointing=checkpointing)
    finally:
        model.eval()  # the in-process engine may sample from this very module


def _update(model: torch.nn.Module, optimizer: torch.optim.Optimizer, scheduler: Any, samples: list[TrainingSample],
            micro: list[list[MicroBatch]], *, config: TrainConfig, dist: fsdp.DistInfo,
            reference: torch.nn.Module | None, temperature: float,
            checkpointing: ActivationCheckpointing | None) -> dict[str, Any]:
    algo, optim, compute = config.algorithm, config.optim, COMPUTE_DTYPES[config.dtype]
    old = [[old_logprobs(model, mb, config, reference, temperature) for mb in m] for m in micro]
    stats = StepStats()
    if algo.mismatch.normalize == "group":
        old = normalize_within_groups(micro, old, stats)
    updates = 0
    for m, olds in zip(micro, old, strict=True):
        totals = fsdp.all_reduce_sum({"seq": float(sum(int((mb.mask > 0).any(dim=1).sum()) for mb in m)),
                                      "tok": float(sum(int((mb.mask > 0).sum()) for mb in m))}, dist)
        if totals["seq"] == 0:  # nothing informative on any rank: no optimizer step, but the schedule moves on
            advance_schedule(scheduler)
            continue
        for mb, (old_logp, is_weights, ref_logp, mismatch) in zip(m, olds, strict=True):
            if checkpointing is not None:
                checkpointing.prepare(mb.input_ids)
            logp, ent = policy_logprobs(model, mb, temperature=temperature, with_entropy=True, compute_dtype=compute)
            loss, loss_stats = grpo.policy_loss(
                logp, old_logp, mb.advantages, mb.mask, loss=algo.loss, clip_low=algo.clip_low,
                clip_high=algo.clip_high, is_weights=is_weights, ref_logp=ref_logp, kl_coef=algo.kl_coef,
                batch_sequences=int(totals["seq"]), batch_tokens=int(totals["tok"]),
                max_response_len=config.rollout.max_response_tokens, clip_ratio_c=algo.clip_ratio_c)
            loss.backward()
            on = mb.mask > 0
            tokens = float(on.sum())
            gap = float((logp.detach() - mb.engine_logp).abs()[on].sum() / tokens) if tokens else 0.0
            stats.add({**loss_stats, **mismatch, "entropy": float(ent) if tokens else 0.0,
                       "trainer_engine_gap": gap}, tokens)
            stats.loss += float(loss.detach())
        limit = optim.grad_clip if optim.grad_clip is not None else math.inf
        stats.add({"grad_norm": fsdp.clip_grad_norm(model, limit)}, 1.0)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        updates += 1
    return {"updated": updates > 0, "optimizer_steps": updates, "trained_samples": len(samples),
            **stats.result(dist)}


def old_logprobs(model: torch.nn.Module, mb: MicroBatch, config: TrainConfig, reference: torch.nn.Module | None,
                 temperature: float) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None,
                                              dict[str, float]]:
    """(old policy logprobs, mismatch importance weights or None, reference logprobs or None, the
    importance weights' statistics). The old policy is scored in eval mode, as the engine samples
    (a model with dropout would otherwise score it with a random mask); ``model``'s mode is kept."""
    algo, compute = config.algorithm, COMPUTE_DTYPES[config.dtype]
    old, weights, ref, stats = mb.engine_logp, None, None, {}
    if algo.mismatch.mode == "decoupled":
        training = model.training
        model.eval()
        try:
            with torch.no_grad():
                old, _ = policy_logprobs(model, mb, temperature=temperature, compute_dtype=compute)
        finally:
            model.train(training)
        fsdp.reshard_after_forward_only(model)
        weights, stats = grpo.mismatch_weights(old, mb.engine_logp, mb.mask, level=algo.mismatch.level,
                                           mode=algo.mismatch.weight, cap=algo.mismatch.cap)
    if reference is not None:
        with torch.no_grad():
            ref, _ = policy_logprobs(reference, mb, temperature=temperature, compute_dtype=compute)
    return old, weights, ref, stats


#: What :func:`old_logprobs` gives a micro-batch: old policy logprobs, mismatch weights, reference logprobs, stats.
OldPolicy = tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None, dict[str, float]]


def normalize_within_groups(micro: list[list[MicroBatch]], old: list[list[OldPolicy]],
                            stats: StepStats) -> list[list[OldPolicy]]:
    """The step's decoupled weights self-normalized per GRPO group, over all its micro-batches (a group's
    members may sit in several; every rank holds whole groups): each row's token weights times its
    group's factor, and ``mb.advantages`` re-centred in place (:func:`grpo.group_normalized_weights`)."""
    rows = [(mb, i) for m in micro for mb in m for i, s in enumerate(mb.samples) if s.group_id]
    weights = {id(mb): entry[1] for m, olds in zip(micro, old, strict=True)
               for mb, entry in zip(m, olds, strict=True)}
    if not rows or any(weights[id(mb)] is None for mb, _ in rows):
        return old
    on = {id(mb): mb.mask > 0 for m in micro for mb in m}
    sequence = torch.stack([(weights[id(mb)][i] * on[id(mb)][i]).sum() / on[id(mb)][i].sum().clamp(min=1)
                            for mb, i in rows]).cpu()
    advantages = torch.stack([mb.advantages[i] for mb, i in rows]).cpu()
    groups = {g: n for n, g in enumerate(dict.fromkeys(mb.samples[i].group_id for mb, i in rows))}
    index = torch.tensor([groups[mb.samples[i].group_id] for mb, i in rows])
    scale, centred, tilt = grpo.group_normalized_weights(sequence, advantages, index)
    stats.add(tilt, float(len(groups)))
    factors: dict[int, torch.Tensor] = {}
    for (mb, i), factor, advantage in zip(rows, scale.tolist(), centred.tolist(), strict=True):
        factors.setdefault(id(mb), torch.ones(len(mb.samples)))[i] = factor
        mb.advantages[i] = advantage
    return [[(o, w * factors[id(mb)].to(w)[:, None] if id(mb) in factors else w, r, st)
             for mb, (o, w, r, st) in zip(m, olds, strict=True)] for m, olds in zip(micro, old, strict=True)]


def advance_schedule(scheduler: Any) -> None:
    """One schedule position without an optimizer step (torch warns about that order; here it is meant)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"Detected call of `lr_scheduler\.step\(\)` before")
        scheduler.step()


def model_device(model: torch.nn.Module) -> torch.device:
    """The device ``model``'s parameters (this rank's shards) are on: where its batches go."""
    return next(model.parameters()).device


def empty_batch(pad_id: int, device: torch.device) -> MicroBatch:
    """A one-token micro-batch with mask 0: a forward pass that changes no gradient."""
    return collate([TrainingSample("padding", [pad_id], [pad_id], [0], [0.0])], pad_id, device)


def pad_to_same_count(batches: list[MicroBatch], dist: fsdp.DistInfo, pad_id: int,
                      device: torch.device) -> list[MicroBatch]:
    """``batches`` plus empty ones on ``device``, to the largest count of any rank."""
    wanted = int(fsdp.all_reduce_max({"n": float(len(batches))}, dist)["n"])
    return batches + [empty_batch(pad_id, device) for _ in range(wanted - len(batches))]


#: Statistics every rank reports (a collective needs the same keys everywhere).
STAT_KEYS = ("clip_fraction", "dual_clip_fraction", "ratio_mean", "kl", "entropy", "trainer_engine_gap",
             "is_weight_mean", "is_capped_fraction", "mismatch_abs_mean", "is_group_tilt", "grad_norm")
MAX_KEYS = ("ratio_max", "is_weight_max")


class StepStats:
    """Token-weighted means of per-micro-batch statistics and maxima of ``*_max`` ones, over ranks."""

    def __init__(self) -> None:
        self.sums = dict.fromkeys(STAT_KEYS, 0.0)
        self.weights = dict.fromkeys(STAT_KEYS, 0.0)
        self.maxima = dict.fromkeys(MAX_KEYS, -math.inf)
        self.loss = 0.0

    def add(self, stats: dict[str, float], weight: float) -> None:
        if not weight:
            return
        for key, value in stats.items():
            if key in self.maxima:
                self.maxima[key] = max(self.maxima[key], float(value))
            elif key in self.sums:
                self.sums[key] += float(value) * weight
                self.weights[key] += weight

    def result(self, dist: fsdp.DistInfo) -> dict[str, float]:
        sums = fsdp.all_reduce_sum({**{f"s:{k}": v for k, v in self.sums.items()},
                                    **{f"w:{k}": v for k, v in self.weights.items()}, "loss": self.loss}, dist)
        maxima = fsdp.all_reduce_max(self.maxima, dist)
        out: dict[str, float] = {k: sums[f"s:{k}"] / sums[f"w:{k}"] for k in STAT_KEYS if sums[f"w:{k}"]}
        out.update({k: v for k, v in maxima.items() if v > -math.inf})
        out["loss"] = sums["loss"]
        return out
