"""Continuous batching over one shared KV cache: the model side of the in-process transformers engine.

:class:`Batcher` prefills newly arrived requests together (left padding), merges them into the running
batch (:class:`Running`) at the next decode step, samples each row with its own
:class:`~envhub.adapters.engines.SamplingParams`, and drops finished rows, resolving their futures.
The engine (:mod:`envhub.adapters.engines.transformers_engine`) owns the queue, the worker thread and
the lock; every call here runs on its worker with the lock held.

Positions are explicit (``position_ids`` count only real tokens) and padded key slots are masked, so
a row's tokens and logprobs do not depend on which other rows shared its batch beyond float
rounding. The cache surgery supports a ``DynamicCache`` of plain ``DynamicLayer`` layers only; with
any other cache rows are never merged into a running batch (:func:`joinable`).
"""

from __future__ import annotations

import inspect
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import torch

from envhub.adapters.engines.base import GenerateResult, SamplingParams
from envhub.adapters.engines.precision import forward_precision
from envhub.adapters.engines.sampling import processed_logprobs, sample, stop_string_hit
from envhub.errors import EngineError

_HOST = torch.device("cpu")  # where request tensors are built before they go to the model's device


@dataclass
class Request:
    prompt: list[int]
    params: SamplingParams
    max_new: int
    stop_ids: frozenset[int]
    generator: torch.Generator | None
    weight_version: str
    future: Future[GenerateResult] = field(default_factory=Future)
    out_ids: list[int] = field(default_factory=list)
    out_logprobs: list[float] = field(default_factory=list)
    submitted: float = field(default_factory=time.monotonic)


@dataclass
class Running:
    """The rows being decoded: their KV cache, attention mask and next position ids."""

    reqs: list[Request]
    cache: Any
    mask: torch.Tensor  # [rows, cached tokens], 0 for left padding
    next_pos: torch.Tensor  # [rows], the position of each row's pending (sampled, uncached) token


class Batcher:
    """Runs ``model`` for batches of requests: :meth:`step` prefills, merges, decodes one token per row.

    ``tokenizer`` decodes outputs for stop strings; ``rng`` samples every request without a seed of its
    own; ``stats`` counts decode steps, prefills, the most rows decoded at once, and sampled tokens.
    """

    def __init__(self, model: Any, tokenizer: Any, *, pad_id: int, compute_dtype: torch.dtype,
                 rng: torch.Generator) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.device = next(model.parameters()).device
        self.pad_id = pad_id
        self.compute_dtype = compute_dtype
        self.rng = rng
        self.cache_kw = cache_keyword(model)
        self.stats = {"steps": 0, "prefills": 0, "max_rows": 0, "tokens": 0}

    def step(self, running: Running | None, new: list[Request], weight_version: str) -> Running | None:
        """``new`` prefilled and merged into ``running``, then one decode step; the rows still running.
        Finished requests get their result, stamped with ``weight_version``."""
        if new:
            running = _merge(running, self._prefill(new, weight_version))
        if running is not None:
            running = self._decode(running, weight_version)
        return running

    def _prefill(self, reqs: list[Request], weight_version: str) -> Running | None:
        width = max(len(r.prompt) for r in reqs)
        ids = torch.full((len(reqs), width), self.pad_id, dtype=torch.long, device=_HOST)
        mask = torch.zeros((len(reqs), width), dtype=torch.long, device=_HOST)
        for i, r in enumerate(reqs):
            ids[i, width - len(r.prompt):] = torch.tensor(r.prompt, device=_HOST)
            mask[i, width - len(r.prompt):] = 1
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        with forward_precision(self.device, self.compute_dtype):
            out = self.model(input_ids=ids.to(self.device), attention_mask=mask.to(self.device),
                             position_ids=positions.to(self.device), use_cache=True, logits_to_keep=1)
        self.stats["prefills"] += 1
        running = Running(reqs=list(reqs), cache=output_cache(out), mask=mask,
                          next_pos=torch.tensor([len(r.prompt) for r in reqs], dtype=torch.long, device=_HOST))
        return self._sample_and_prune(running, out.logits[:, -1, :], weight_version)

    def _decode(self, running: Running, weight_version: str) -> Running | None:
        rows = len(running.reqs)
        ids = torch.tensor([[r.out_ids[-1]] for r in running.reqs], dtype=torch.long, device=_HOST)
        mask = torch.cat([running.mask, torch.ones((rows, 1), dtype=torch.long, device=_HOST)], dim=1)
        with forward_precision(self.device, self.compute_dtype):
            out = self.model(input_ids=ids.to(self.device), attention_mask=mask.to(self.device),
                             position_ids=running.next_pos[:, None].to(self.device),
                             use_cache=True, **{self.cache_kw: running.cache})
        self.stats["steps"] += 1
        self.stats["max_rows"] = max(self.stats["max_rows"], rows)
        running.cache, running.mask, running.next_pos = output_cache(out), mask, running.next_pos + 1
        return self._sample_and_prune(running, out.logits[:, -1, :], weight_version)

    def _sample_and_prune(self, running: Running, logits: torch.Tensor, weight_version: str) -> Running | None:
        groups: dict[tuple[float, int, float], list[int]] = {}
        for i, r in enumerate(running.reqs):
            groups.setdefault((r.params.temperature, r.params.top_k, r.params.top_p), []).append(i)
        for (temperature, top_k, top_p), rows in groups.items():
            logprobs = processed_logprobs(logits[rows].float(), temperature, top_k, top_p).cpu()
            for j, i in enumerate(rows):
                req = running.reqs[i]
                token = sample(logprobs[j], temperature == 0.0, req.generator or self.rng)
                req.out_ids.append(token)
                req.out_logprobs.append(float(logprobs[j, token]))
        self.stats["tokens"] += len(running.reqs)
        keep = [i for i, r in enumerate(running.reqs) if not self._finish_if_done(r, weight_version)]
        if not keep:
            return None
        if len(keep) < len(running.reqs):
            index = torch.tensor(keep, dtype=torch.long, device=_HOST)
            running.cache.batch_select_indices(index.to(self.device))
            running.reqs = [running.reqs[i] for i in keep]
            running.mask, running.next_pos = running.mask[index], running.next_pos[index]
            _trim_left(running)
        return running

    def _finish_if_done(self, req: Request, weight_version: str) -> bool:
        token = req.out_ids[-1]
        reason, matched = None, None
        if token in req.stop_ids:
            reason, matched = "stop", token
        elif req.params.stop:
            window = max(len(s) for s in req.params.stop) + 4
            hit = stop_string_hit(self.tokenizer.decode(req.out_ids[-window:]), req.params.stop)
            if hit is not None:
                reason, matched = "stop", hit
        if reason is None and len(req.out_ids) >= req.max_new:
            reason = "length"
        if reason is None:
            return False
        meta: dict[str, Any] = {"matched": matched, "prompt_tokens": len(req.prompt),
                                "queue_and_run_s": time.monotonic() - req.submitted}
        if req.weight_version != weight_version:
            meta["weight_version_start"] = req.weight_version
        req.future.set_result(GenerateResult(list(req.out_ids), list(req.out_logprobs), reason, weight_version, meta))
        return True


def fail(reqs: list[Request], error: EngineError) -> None:
    for req in reqs:
        if not req.future.done():
            req.future.set_exception(error)


def cache_keyword(model: Any) -> str:
    """``cache`` in recent transformers, ``past_key_values`` before (still accepted, with a warning); a
    ``peft`` model (``**kwargs``) passes on what the model it wraps takes."""
    inner = model.get_base_model() if callable(getattr(model, "get_base_model", None)) else model
    return "cache" if "cache" in inspect.signature(inner.forward).parameters else "past_key_values"


def output_cache(out: Any) -> Any:
    cache = out.get("cache") if hasattr(out, "get") else None
    return cache if cache is not None else out.past_key_values


# ---- KV cache surgery (DynamicCache with plain DynamicLayer layers only) ---------------------------

def _layers(cache: Any) -> list[Any]:
    return list(getattr(cache, "layers", []))


def joinable(cache: Any) -> bool:
    """Whether rows can be merged into this cache (a sliding-window or quantized cache cannot)."""
    from transformers.cache_utils import DynamicLayer

    layers = _layers(cache)
    return bool(layers) and all(type(layer) is DynamicLayer for layer in layers)


def _trim_left(running: Running) -> None:
    """Drop leading key slots that no remaining row attends to (padding of departed rows)."""
    used = running.mask.any(dim=0).nonzero()
    first = int(used[0].item()) if len(used) else running.mask.shape[1]
    if first == 0 or not joinable(running.cache):
        return
    for layer in _layers(running.cache):
        layer.keys, layer.values = layer.keys[..., first:, :], layer.values[..., first:, :]
    running.mask = running.mask[:, first:]


def _left_pad(t: torch.Tensor, width: int, dim: int) -> torch.Tensor:
    extra = width - t.shape[dim]
    if extra == 0:
        return t
    shape = list(t.shape)
    shape[dim] = extra
    return torch.cat([t.new_zeros(shape), t], dim=dim)


def _merge(a: Running | None, b: Running | None) -> Running | None:
    """One running batch from two: the shorter cache is left-padded (masked) to the longer."""
    if a is None or b is None:
        return a or b
    width = max(a.mask.shape[1], b.mask.shape[1])
    for la, lb in zip(_layers(a.cache), _layers(b.cache), strict=True):
        la.keys = torch.cat([_left_pad(la.keys, width, -2), _left_pad(lb.keys, width, -2)], dim=0)
        la.values = torch.cat([_left_pad(la.values, width, -2), _left_pad(lb.values, width, -2)], dim=0)
    return Running(reqs=a.reqs + b.reqs, cache=a.cache,
                   mask=torch.cat([_left_pad(a.mask, width, 1), _left_pad(b.mask, width, 1)], dim=0),
                   next_pos=torch.cat([a.next_pos, b.next_pos]))
