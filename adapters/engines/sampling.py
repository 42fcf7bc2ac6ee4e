"""The sampling distribution of :class:`~envhub.adapters.engines.SamplingParams`, in one function.

The in-process engine samples from :func:`processed_logprobs`, and the audit recomputes logprobs
with the same function, so a mismatch the audit reports is numerical (batching, KV cache, kernels),
never a difference in what "the distribution" means.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

NEG_INF = float("-inf")


def processed_logprobs(logits: torch.Tensor, temperature: float, top_k: int = 0, top_p: float = 1.0) -> torch.Tensor:
    """Log-probabilities (float32, ``-inf`` outside the support) of the distribution sampled from.

    ``logits`` is ``[..., vocab]``. Order: temperature, then top-k (ties at the k-th value are
    kept), then top-p (the smallest prefix of the sorted distribution whose mass reaches
    ``top_p``; the token that crosses it is kept), then renormalization. ``temperature == 0``
    (greedy) returns the raw ``log_softmax``: the model's own probabilities.
    """
    logits = logits.float()
    if temperature <= 0.0:
        return torch.log_softmax(logits, dim=-1)
    z = logits / temperature
    vocab = z.shape[-1]
    if 0 < top_k < vocab:
        kth = torch.topk(z, top_k, dim=-1).values[..., -1:]
        z = z.masked_fill(z < kth, NEG_INF)
    if top_p < 1.0:
        sorted_z, order = torch.sort(z, dim=-1, descending=True)
        probs = torch.softmax(sorted_z, dim=-1)
        mass_before = torch.cumsum(probs, dim=-1) - probs
        sorted_z = sorted_z.masked_fill(mass_before >= top_p, NEG_INF)
        z = torch.full_like(z, NEG_INF).scatter(-1, order, sorted_z)
    return torch.log_softmax(z, dim=-1)


def sample(logprobs: torch.Tensor, greedy: bool, generator: torch.Generator | None = None) -> int:
    """One token from a ``[vocab]`` row of :func:`processed_logprobs`."""
    if greedy:
        return int(torch.argmax(logprobs).item())
    return int(torch.multinomial(logprobs.exp(), 1, generator=generator).item())


def stop_string_hit(text: str, stops: Sequence[str]) -> str | None:
    """The first stop string found in ``text`` (the decoded tail of an output), if any."""
    for s in stops:
        if s and s in text:
            return s
    return None
