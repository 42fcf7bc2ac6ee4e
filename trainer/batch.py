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

from envhub.trainer.grpo import entropy, token_logprobs


@dataclass(frozen=True)
class TrainingSample:
    episode_id: str
    prompt_ids: list[int]
    response_ids: list[int]
    response_mask: list[int]
    engine_logprobs: list[float]
    advantage: float = 0.0
    loss_weight: float = 1.0

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
    largest tensor of a small model's step)."""

    samples: list[TrainingSample]
    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    position_ids: torch.Tensor
    targets: torch.Tensor
    mask: torch.Tensor
    engine_logp: torch.Tensor
    advantages: torch.Tensor
    prompt_width: int


def micro_batches(samples: Sequence[TrainingSample], size: int, pad_id: int) -> list[MicroBatch]:
    return [collate(samples[i:i + size], pad_id) for i in range(0, len(samples), size)]


def collate(samples: Sequence[TrainingSample], pad_id: int) -> MicroBatch:
    rows = len(samples)
    width = max(len(s.prompt_ids) for s in samples)
    resp = max(len(s.response_ids) for s in samples)
    input_ids = torch.full((rows, width + resp), pad_id, dtype=torch.long)
    attention = torch.zeros((rows, width + resp), dtype=torch.long)
    targets = torch.zeros((rows, resp), dtype=torch.long)
    mask = torch.zeros((rows, resp), dtype=torch.float32)
    engine = torch.zeros((rows, resp), dtype=torch.float32)
    for i, s in enumerate(samples):
        p, n = len(s.prompt_ids), len(s.response_ids)
        input_ids[i, width - p:width] = torch.tensor(s.prompt_ids)
        input_ids[i, width:width + n] = torch.tensor(s.response_ids, dtype=torch.long)
        attention[i, width - p:width + n] = 1
        targets[i, :n] = torch.tensor(s.response_ids, dtype=torch.long)
        mask[i, :n] = torch.tensor(s.response_mask, dtype=torch.float32) * s.loss_weight
        engine[i, :n] = torch.tensor(s.engine_logprobs, dtype=torch.float32)
    positions = (attention.cumsum(-1) - 1).clamp(min=0)
    advantages = torch.tensor([s.advantage for s in samples], dtype=torch.float32)
    return MicroBatch(list(samples), input_ids, attention, positions, targets, mask, engine, advantages, width)


def response_logits(model: torch.nn.Module, batch: MicroBatch) -> torch.Tensor:
    """[B, T, V] logits predicting each response token (row-aligned with ``batch.targets``)."""
    resp = batch.targets.shape[1]
    out = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask, position_ids=batch.position_ids,
                use_cache=False, logits_to_keep=resp + 1)
    return out.logits[:, :-1]


def policy_logprobs(model: torch.nn.Module, batch: MicroBatch, *, temperature: float,
                    with_entropy: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Token logprobs of the response under ``model`` at ``temperature`` (0.0 on padding), and the
    mean entropy over the mask when asked."""
    logits = response_logits(model, batch)
    logp = token_logprobs(logits, batch.targets, temperature=temperature)
    ent = entropy(logits.detach(), batch.mask, temperature=temperature) if with_entropy else None
    return torch.where(batch.mask > 0, logp, torch.zeros_like(logp)), ent
