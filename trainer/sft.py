"""The supervised warm start: teach the model the tool-call syntax before GRPO needs it to sample one.

A small instruct model never emits a valid tool call on its own (SmolLM2-135M-Instruct: 8 of 8
episodes ``format_error``), so every GRPO group is all zeros and nothing is learned. The SFT stage
trains on accepted trajectories of run directories, with the loss on mask-1 tokens only:

* episodes of a model (``hf:``/``sglang:`` runs) keep their token view as sampled, after the same
  token audit the GRPO batches pass (rejection sampling on the model's own successes);
* episodes of a scripted policy (``gold``) have no tokens: their messages are re-encoded with the
  model's chat format through :class:`~envhub.adapters.token_record.TokenRecord`, exactly as the
  model policy would have recorded them had the model sampled those turns (the first prompt rendered
  once; each action's tokens and the end token with mask 1; each env reply as template text, mask 0),
  a turn of tool calls written in the model family's own call syntax.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import torch

from envhub.adapters.audit import check_record
from envhub.adapters.model_policy import ModelPolicy
from envhub.adapters.token_record import TokenRecord
from envhub.parsing import format_tool_call
from envhub.run_dir import Run
from envhub.trainer import fsdp
from envhub.trainer.activations import ActivationCheckpointing
from envhub.trainer.batch import TrainingSample, micro_batches, policy_logprobs
from envhub.trainer.config import OptimConfig, SFTConfig
from envhub.trainer.update import adamw, model_device, pad_to_same_count
from envhub.types import Observation, TokenView, TrajectoryRecord, Turn


def reencode(record: TrajectoryRecord, policy: ModelPolicy) -> TokenView:
    """The token view the model policy would have recorded for ``record``'s turns."""
    first = [m for m in record.messages[:2] if m.role in ("system", "user")]
    prompt = policy.encode(policy.render_prompt(Observation(messages=first, tools=record.tools)))
    tokens = TokenRecord(prompt)
    for i, turn in enumerate(record.turns):
        if i:
            previous = record.turns[i - 1]
            tokens.append_observation(policy.encode(policy.format.observation_text(previous.observation,
                                                                                    closed=True)))
        sampled = [*policy.encode(family_text(turn, policy)), policy.end_id]
        tokens.append_sampled(sampled, [0.0] * len(sampled))
    return tokens.token_view()


def family_text(turn: Turn, policy: ModelPolicy) -> str:
    """A scripted turn's text in the model's own tool-call syntax: a turn that is just its calls in the
    Hermes form scripted policies write becomes those calls as the model's family writes them (Llama 3's
    JSON, Mistral's ``[TOOL_CALLS]``); any other text is kept as it is."""
    calls = turn.tool_calls
    if calls and turn.action_text == "".join(format_tool_call(c.name, c.arguments) for c in calls):
        return policy.format.call_text(calls) or turn.action_text
    return turn.action_text


def sft_samples(runs: Sequence[Path], policy: ModelPolicy, *, outcomes: Iterable[str], max_context: int,
                max_examples: int | None = None) -> tuple[list[TrainingSample], dict[str, int]]:
    """Samples of the accepted episodes of ``runs`` (see the module docstring) and what was skipped."""
    wanted = set(outcomes)
    samples: list[TrainingSample] = []
    stats = {"episodes": 0, "accepted": 0, "reencoded": 0, "audit_failed": 0, "too_long": 0, "other_tokenizer": 0}
    template = policy.describe().get("chat_template_hash")
    for run in runs:
        try:
            source = Run(run).require()
        except FileNotFoundError as exc:
            raise ValueError(f"sft.runs: {exc}") from None
        for record in source.records():
            stats["episodes"] += 1
            if record.outcome.value not in wanted:
                continue
            if record.response_ids:
                if record.versions.chat_template_hash not in (None, template):
                    stats["other_tokenizer"] += 1  # another model's tokens would teach nonsense
                    continue
                if check_record(record, policy.tokenizer):
                    stats["audit_failed"] += 1
                    continue
                view = TokenView(prompt_ids=record.prompt_ids, response_ids=record.response_ids,
                                 response_mask=record.response_mask, response_logprobs=record.response_logprobs)
            else:
                view = reencode(record, policy)
                stats["reencoded"] += 1
            if len(view.prompt_ids) + len(view.response_ids) > max_context:
                stats["too_long"] += 1
                continue
            samples.append(TrainingSample(record.episode_id, view.prompt_ids, view.response_ids, view.response_mask,
                                  view.response_logprobs))
            stats["accepted"] += 1
            if max_examples is not None and len(samples) >= max_examples:
                return samples, stats
    return samples, stats


def sft_loss(model: torch.nn.Module, batch: Any, *, batch_tokens: float,
             compute_dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    """Negative log-likelihood of the mask-1 tokens, summed and divided by the batch's mask-1 count, and
    the micro-batch's mean token entropy over them (temperature 1, no gradient)."""
    logp, ent = policy_logprobs(model, batch, temperature=1.0, with_entropy=True, compute_dtype=compute_dtype)
    assert ent is not None
    return -(logp * batch.mask).sum() / batch_tokens, ent


def sft_epoch_batches(samples: Sequence[TrainingSample], *, epoch: int, seed: int, batch_size: int) -> list[list[TrainingSample]]:
    """The epoch's shuffled optimizer batches (deterministic in ``seed`` and ``epoch``)."""
    order = list(samples)
    generator = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
    perm = torch.randperm(len(order), generator=generator, device="cpu").tolist()
    order = [order[i] for i in perm]
    return [order[i:i + batch_size] for i in range(0, len(order), batch_size)]


def longest_turn(sample: TrainingSample) -> int:
    """The most tokens one turn of ``sample`` has the model sample (the longest run of mask 1)."""
    longest = run = 0
    for m in sample.response_mask:
        run = run + 1 if m else 0
        longest = max(longest, run)
    return longest


def run_sft(model: torch.nn.Module, samples: Sequence[TrainingSample], config: SFTConfig, *, seed: int,
            optim: OptimConfig, dist: fsdp.DistInfo, pad_id: int, log: Callable[[str], None],
            checkpointing: ActivationCheckpointing | None = None,
            compute_dtype: torch.dtype = torch.float32) -> list[dict[str, float]]:
    """The SFT stage on ``samples`` (from :func:`sft_samples`): ``config.epochs`` passes, ``config.batch_size``
    examples per optimizer step (each rank takes every ``world_size``-th one), stopped early once a step's
    mean token entropy is below ``config.min_entropy``; returns each step's ``{step, epoch, loss, entropy}``
    (loss: the token NLL). ``optim`` gives the gradient clip and whether AdamW is fused; ``checkpointing``
    decides per micro-batch whether activations are recomputed; forward passes compute in ``compute_dtype``."""
    optimizer = adamw(model.parameters(), fused=optim.fused_optimizer and not dist.distributed, lr=config.lr,
                      weight_decay=0.0)
    model.train()
    try:
        return _steps(model, samples, config, optimizer, seed=seed, grad_clip=optim.grad_clip, dist=dist,
                      pad_id=pad_id, log=log, checkpointing=checkpointing, compute_dtype=compute_dtype)
    finally:
        model.eval()  # the in-process engine may sample from this very module


def _steps(model: torch.nn.Module, samples: Sequence[TrainingSample], config: SFTConfig,
           optimizer: torch.optim.Optimizer, *, seed: int, grad_clip: float | None, dist: fsdp.DistInfo,
           pad_id: int, log: Callable[[str], None], checkpointing: ActivationCheckpointing | None,
           compute_dtype: torch.dtype) -> list[dict[str, float]]:
    curve: list[dict[str, float]] = []
    per_epoch = -(-len(samples) // config.batch_size)
    total, started = config.epochs * per_epoch, time.monotonic()
    for epoch in range(config.epochs):
        for batch in sft_epoch_batches(samples, epoch=epoch, seed=seed, batch_size=config.batch_size):
            share = batch[dist.rank::dist.world_size]
            device = model_device(model)
            micro = pad_to_same_count(micro_batches(share, config.micro_batch_size, pad_id, device), dist, pad_id, device)
            tokens = float(sum(s.sampled_tokens for s in batch)) or 1.0
            loss = ent_sum = ent_tokens = 0.0
            for mb in micro:
                if checkpointing is not None:
                    checkpointing.prepare(mb.input_ids)
                part, ent = sft_loss(model, mb, batch_tokens=tokens, compute_dtype=compute_dtype)
                part.backward()
                loss += float(part.detach())
                on = float((mb.mask > 0).sum())
                ent_sum, ent_tokens = ent_sum + float(ent) * on, ent_tokens + on
            fsdp.clip_grad_norm(model, grad_clip if grad_clip is not None else math.inf)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            sums = fsdp.all_reduce_sum({"loss": loss, "ent": ent_sum, "tok": ent_tokens}, dist)
            # the entropy of the weights before this step's update (the forward pass it came from)
            curve.append({"step": len(curve) + 1, "epoch": epoch + 1, "loss": sums["loss"],
                          "entropy": sums["ent"] / max(sums["tok"], 1.0)})
            done = len(curve)
            eta = (time.monotonic() - started) / done * (total - done)
            log(f"sft step {done}/{total}  token NLL {sums['loss']:.4f}  entropy {curve[-1]['entropy']:.3f}  "
                f"ETA {eta:.0f}s")
            if config.min_entropy is not None and curve[-1]["entropy"] < config.min_entropy:
                log(f"sft: stopped at step {done}/{total}: token entropy {curve[-1]['entropy']:.4f} is below "
                    f"sft.min_entropy {config.min_entropy} (the policy must still explore for GRPO)")
                return curve
        epoch_losses = [c["loss"] for c in curve if c["epoch"] == epoch + 1]
        log(f"sft epoch {epoch + 1}/{config.epochs}: mean token NLL {sum(epoch_losses) / len(epoch_losses):.4f}")
    return curve
