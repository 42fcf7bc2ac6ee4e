"""Token trajectories as padded tensors, and the policy's logprobs of their response tokens.

A :class:`TrainingSample` is what the trainer learns from: one episode's token view (prompt ids, response
ids, response mask, the engine's sampled logprobs) with its advantage and loss weight. Samples are
cut into micro-batches of right-padded tensors; position ``t`` of the response tensors is response
token ``t``, whose logit comes from the sequence position before it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from envhub.adapters.engines.continuous_batching import cache_keyword, output_cache
from envhub.adapters.engines.precision import forward_precision
from envhub.trainer.grpo import entropy, token_logprobs

CPU = torch.device("cpu")


@dataclass(frozen=True)
class TrainingSample:
    episode_id: str
    prompt_ids: list[int]
    response_ids: list[int]
    response_mask: list[int]
    engine_logprobs: list[float]
    advantage: float = 0.0
    loss_weight: float = 1.0
    #: the GRPO group the sample was sampled in ("" where there is none, as in SFT)
    group_id: str = ""

    @property
    def sampled_tokens(self) -> int:
        return int(sum(self.response_mask))


@dataclass
class MicroBatch:
    """Tensors of some samples, every prompt left-padded to the longest and every response
    right-padded, so that all responses start at column ``prompt_width``: ``input_ids``,
    ``attention_mask`` and ``position_ids`` [B, prompt_width + T]; response-aligned [B, T]
    ``targets``, ``mask`` (response mask x loss weight, 0 on padding) and ``engine_logp``;
    ``advantages`` [B]. Only the last T + 1 positions need logits (the vocabulary projection is the
    largest tensor of a small model's step). ``shared``: rows whose prompts are the same ids (a GRPO
    group's), whose prompt is then run once (:func:`response_logits`)."""

    samples: list[TrainingSample]
    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    position_ids: torch.Tensor
    targets: torch.Tensor
    mask: torch.Tensor
    engine_logp: torch.Tensor
    advantages: torch.Tensor
    prompt_width: int
    shared: SharedPrompts | None = None


@dataclass(frozen=True)
class SharedPrompts:
    """``rows`` [G]: one row of the micro-batch per distinct prompt; ``index`` [B]: each row's distinct prompt."""

    rows: torch.Tensor
    index: torch.Tensor

    @staticmethod
    def of(samples: Sequence[TrainingSample], device: torch.device) -> SharedPrompts | None:
        """The distinct prompts of ``samples``; None when no two share one (nothing to save)."""
        first: dict[tuple[int, ...], int] = {}
        index = [first.setdefault(tuple(s.prompt_ids), len(first)) for s in samples]
        if len(first) == len(samples):
            return None
        rows = [index.index(i) for i in range(len(first))]
        return SharedPrompts(torch.tensor(rows, dtype=torch.long, device=CPU).to(device),
                             torch.tensor(index, dtype=torch.long, device=CPU).to(device))


def micro_batches(samples: Sequence[TrainingSample], size: int, pad_id: int,
                  device: torch.device = CPU) -> list[MicroBatch]:
    return [collate(samples[i:i + size], pad_id, device) for i in range(0, len(samples), size)]


def collate(samples: Sequence[TrainingSample], pad_id: int, device: torch.device = CPU) -> MicroBatch:
    """``samples`` as one micro-batch on ``device`` (built on the CPU, then moved in one copy per tensor)."""
    rows = len(samples)
    width = max(len(s.prompt_ids) for s in samples)
    resp = max(len(s.response_ids) for s in samples)
    input_ids = torch.full((rows, width + resp), pad_id, dtype=torch.long, device=CPU)
    attention = torch.zeros((rows, width + resp), dtype=torch.long, device=CPU)
    targets = torch.zeros((rows, resp), dtype=torch.long, device=CPU)
    mask = torch.zeros((rows, resp), dtype=torch.float32, device=CPU)
    engine = torch.zeros((rows, resp), dtype=torch.float32, device=CPU)
    for i, s in enumerate(samples):
        p, n = len(s.prompt_ids), len(s.response_ids)
        input_ids[i, width - p:width] = torch.tensor(s.prompt_ids, dtype=torch.long, device=CPU)
        input_ids[i, width:width + n] = torch.tensor(s.response_ids, dtype=torch.long, device=CPU)
        attention[i, width - p:width + n] = 1
        targets[i, :n] = torch.tensor(s.response_ids, dtype=torch.long, device=CPU)
        mask[i, :n] = torch.tensor(s.response_mask, dtype=torch.float32, device=CPU) * s.loss_weight
        engine[i, :n] = torch.tensor(s.engine_logprobs, dtype=torch.float32, device=CPU)
    positions = (attention.cumsum(-1) - 1).clamp(min=0)
    advantages = torch.tensor([s.advantage for s in samples], dtype=torch.float32, device=CPU)
    tensors = [t.to(device, non_blocking=True)
               for t in (input_ids, attention, positions, targets, mask, engine, advantages)]
    return MicroBatch(list(samples), *tensors, width, SharedPrompts.of(samples, device))


def response_logits(model: torch.nn.Module, batch: MicroBatch, compute_dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """[B, T, V] fp32 logits predicting each response token (row-aligned with ``batch.targets``), the
    forward pass computed in ``compute_dtype`` (:func:`~envhub.adapters.engines.precision.forward_precision`)."""
    resp = batch.targets.shape[1]
    with forward_precision(batch.input_ids.device, compute_dtype):
        if batch.shared is not None and not _recomputing(model):
            return _over_shared_prompts(model, batch, batch.shared).float()
        out = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask, position_ids=batch.position_ids,
                    use_cache=False, logits_to_keep=resp + 1)
    return out.logits[:, :-1].float()


def _over_shared_prompts(model: torch.nn.Module, batch: MicroBatch, shared: SharedPrompts) -> torch.Tensor:
    """The same logits with each distinct prompt run once: its keys and values (with their graph, so the
    gradient reaches the prompt's computation from every row) are repeated for the rows that share it,
    and the responses run on top. A group of 8 completions of a 300-token prompt runs 300 + 8 x T tokens
    instead of 8 x (300 + T)."""
    w, rows = batch.prompt_width, shared.rows
    head = model(input_ids=batch.input_ids[rows, :w], attention_mask=batch.attention_mask[rows, :w],
                 position_ids=batch.position_ids[rows, :w], use_cache=True, logits_to_keep=1)
    cache = output_cache(head)
    cache.batch_select_indices(shared.index)
    rest = model(input_ids=batch.input_ids[:, w:], attention_mask=batch.attention_mask,
                 position_ids=batch.position_ids[:, w:], use_cache=True, **{cache_keyword(model): cache})
    return torch.cat([head.logits[shared.index], rest.logits[:, :-1]], dim=1)


def _recomputing(model: torch.nn.Module) -> bool:
    """Whether activation checkpointing is on for this forward (it runs layers without a cache)."""
    return any(getattr(m, "gradient_checkpointing", False) for m in model.modules())


def policy_logprobs(model: torch.nn.Module, batch: MicroBatch, *, temperature: float, with_entropy: bool = False,
                    compute_dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Token logprobs of the response under ``model`` at ``temperature`` (0.0 on padding), and the
    mean entropy over the mask when asked."""
    logits = response_logits(model, batch, compute_dtype)
    logp = token_logprobs(logits, batch.targets, temperature=temperature)
    ent = entropy(logits.detach(), batch.mask, temperature=temperature) if with_entropy else None
    return torch.where(batch.mask > 0, logp, torch.zeros_like(logp)), ent
