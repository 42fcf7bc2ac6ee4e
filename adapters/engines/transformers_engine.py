"""In-process transformers engine: one worker thread batches the requests of every episode.

Episode threads call :meth:`TransformersEngine.generate`, which queues the request and waits. The
worker owns the model: it prefills newly arrived prompts together (left padding), merges them into
the running batch at the next decode step (continuous batching over a shared KV cache), samples
each row with its own :class:`~envhub.adapters.engines.SamplingParams`, and drops finished rows.

Positions are explicit (``position_ids`` count only real tokens) and padded key slots are masked, so
a row's tokens and logprobs do not depend on which other rows shared its batch beyond float
rounding; ``tests/adapters/test_engine_transformers.py`` checks batched against unbatched greedy decoding.

Logprobs are of the distribution actually sampled from: :func:`.sampling.processed_logprobs` (temperature,
top-k, top-p; the raw ``log_softmax`` for greedy), from fp32 logits whatever ``compute_dtype`` the forward
passes use. :func:`score_tokens` recomputes them in one forward pass (the audit's train/inference mismatch).
"""

from __future__ import annotations

import contextlib
import copy
import os
import queue
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from envhub.adapters.engines.base import GenerateResult, SamplingParams
from envhub.adapters.engines.precision import forward_precision
from envhub.adapters.engines.sampling import processed_logprobs, sample, stop_string_hit
from envhub.errors import ContextOverflowError, EngineError

_HOST = torch.device("cpu")  # where request tensors are built before they go to the model's device


@dataclass
class _Request:
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
class _Running:
    """The rows being decoded: their KV cache, attention mask and next position ids."""

    reqs: list[_Request]
    cache: Any
    mask: torch.Tensor  # [rows, cached tokens], 0 for left padding
    next_pos: torch.Tensor  # [rows], the position of each row's pending (sampled, uncached) token


class TransformersEngine:
    """A thread-safe, batching engine over a Hugging Face causal LM (see the module docstring).

    ``num_threads`` sets torch's (process-wide) intra-op thread count. On a shared or
    oversubscribed CPU, 1 is often much faster for small models: OpenMP workers that spin at
    barriers while descheduled can slow every step by an order of magnitude.
    """

    name = "transformers"

    def __init__(
        self, model: Any, tokenizer: Any, *,
        max_batch_size: int = 16,
        max_context: int | None = None,
        batch_window_s: float = 0.005,
        weight_version: str = "0",
        eos_token_ids: Sequence[int] | None = None,
        seed: int | None = None,
        model_id: str | None = None,
        num_threads: int | None = None,
        compute_dtype: torch.dtype = torch.float32,
    ) -> None:
        if num_threads is not None:  # process-wide: torch has one intra-op pool
            torch.set_num_threads(num_threads)
        self.model = model.eval()
        self.tokenizer = copy.deepcopy(tokenizer)  # the worker decodes; never share a Rust tokenizer
        self.model_id = model_id or str(getattr(model.config, "_name_or_path", "") or type(model).__name__)
        self.device = next(model.parameters()).device
        self.compute_dtype = compute_dtype  # of the forward passes (precision.forward_precision)
        self.max_context = int(max_context or getattr(model.config, "max_position_embeddings", 0) or 4096)
        self.max_batch_size = max(1, max_batch_size)
        self.batch_window_s = batch_window_s
        self.pad_id = _pad_id(tokenizer)
        self.eos_token_ids = frozenset(eos_token_ids if eos_token_ids is not None else _eos_ids(model, tokenizer))
        self.vocab_size = int(model.get_output_embeddings().weight.shape[0])
        self._cache_kw = cache_keyword(model)
        self._weight_version = weight_version
        self._rng = torch.Generator().manual_seed(seed if seed is not None else int.from_bytes(os.urandom(7), "big"))
        self._queue: queue.Queue[_Request] = queue.Queue()
        self._lock = threading.Lock()  # held by whoever runs the model (worker step, score, update)
        self._start_lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._closed = False
        self.stats = {"steps": 0, "prefills": 0, "max_rows": 0, "tokens": 0}

    @classmethod
    def from_pretrained(cls, path: str | Path, *, device: str = "cpu", dtype: torch.dtype = torch.float32,
                        **kwargs: Any) -> TransformersEngine:
        """Load a local model dir (fp32 by default: CPUs without bf16 units run bf16 far slower)."""
        from transformers import AutoModelForCausalLM, AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(str(path))
        model = AutoModelForCausalLM.from_pretrained(str(path), dtype=dtype).to(device)
        kwargs.setdefault("model_id", str(path))
        return cls(model, tokenizer, **kwargs)

    # ---- the Engine protocol ----------------------------------------------------------------------

    @property
    def weight_version(self) -> str | None:
        return self._weight_version

    @property
    def sampler_rng(self) -> torch.Generator:
        """The generator that samples every request without a seed of its own; its state is part of
        a training checkpoint (:mod:`envhub.trainer.checkpoint`), so a resumed run samples the same."""
        return self._rng

    def generate(self, prompt_ids: list[int], params: SamplingParams) -> GenerateResult:
        """Sample a continuation of ``prompt_ids``; blocks until this request is done."""
        return self.submit(prompt_ids, params).result()

    def generate_many(self, prompts: Sequence[list[int]], params: SamplingParams) -> list[GenerateResult]:
        """Several prompts at once (they land in one batch when the engine is idle)."""
        futures = [self.submit(p, params) for p in prompts]
        return [f.result() for f in futures]

    def submit(self, prompt_ids: list[int], params: SamplingParams) -> Future[GenerateResult]:
        if self._closed:
            raise EngineError("the transformers engine is closed")
        prompt = [int(t) for t in prompt_ids]
        if not prompt:
            raise EngineError("empty prompt")
        if min(prompt) < 0 or max(prompt) >= self.vocab_size:
            raise EngineError(f"prompt token id out of range [0, {self.vocab_size})")
        room = self.max_context - len(prompt)
        if room <= 0:
            raise ContextOverflowError(f"prompt of {len(prompt)} tokens leaves no room in a context of "
                                       f"{self.max_context}")
        gen = torch.Generator().manual_seed(params.seed) if params.seed is not None else None
        req = _Request(prompt=prompt, params=params, max_new=min(params.max_new_tokens, room),
                       stop_ids=self.eos_token_ids | frozenset(params.stop_token_ids), generator=gen,
                       weight_version=self._weight_version or "")
        if req.max_new == 0:
            req.future.set_result(GenerateResult([], [], "length", self._weight_version))
            return req.future
        self._ensure_worker()
        self._queue.put(req)
        return req.future

    def close(self) -> None:
        self._closed = True
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=30)
        self._fail_queued(EngineError("the transformers engine was closed"))

    # ---- beyond the protocol --------------------------------------------------------------------

    def score(self, ids: Sequence[int], start: int, params: SamplingParams | None = None) -> list[float]:
        """Logprobs of ``ids[start:]`` under ``params``' distribution, from one full forward pass."""
        p = params or SamplingParams(temperature=0.0)
        with self._lock:
            return score_tokens(self.model, ids, start, temperature=p.temperature, top_k=p.top_k, top_p=p.top_p,
                                compute_dtype=self.compute_dtype)

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Hold the worker between decode steps: requests submitted meanwhile queue up and join the
        batch together when the block ends (weight swaps use the same lock)."""
        with self._lock:
            yield

    def mark_weights_updated(self, version: str) -> str:
        """For an engine that samples from a module its owner trains in place (one process): the new
        weights are already in the model; only the version changes, between decode steps."""
        with self._lock:
            self._weight_version = version
        return version

    def update_weights(self, source: str | Path | dict[str, torch.Tensor], version: str | None = None) -> str:
        """Load new weights (a state dict or a model dir) between decode steps; returns the version.

        Requests in flight continue with the new weights; their result carries the version they
        finished under and, in ``meta["weight_version_start"]``, the one they started under.

        The state dict must match the model exactly (every key, no extra one, the same shapes; a
        tied weight may be given under either of its names): otherwise :class:`EngineError`, and
        neither the weights nor the version change.
        """
        if isinstance(source, dict):
            state = source
        else:
            from transformers import AutoModelForCausalLM

            try:
                state = AutoModelForCausalLM.from_pretrained(
                    str(source), dtype=next(self.model.parameters()).dtype).state_dict()
            except Exception as exc:
                raise EngineError(f"cannot load weights from {source}: {exc!r}") from exc
        with self._lock:
            _check_state_dict(self.model, state)
            try:
                self.model.load_state_dict(state, strict=False)  # checked above: tied aliases may be absent
            except RuntimeError as exc:
                raise EngineError(f"weight update failed: {exc}") from exc
            prev = self._weight_version
            self._weight_version = version or (str(int(prev) + 1) if prev.isdigit() else f"{prev}+1")
        return self._weight_version

    # ---- the worker -------------------------------------------------------------------------------

    def _ensure_worker(self) -> None:
        with self._start_lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._loop, name="envhub-transformers-engine", daemon=True)
                self._thread.start()

    def _loop(self) -> None:
        running: _Running | None = None
        try:
            while not (self._closed and running is None):
                capacity = self.max_batch_size - (len(running.reqs) if running else 0)
                joinable = running is None or _joinable(running.cache)
                new = self._take(block=running is None, limit=capacity if joinable else 0)
                if not new and running is None:
                    continue
                try:
                    with self._lock, torch.inference_mode():
                        if new:
                            running = _merge(running, self._prefill(new))
                        if running is not None:
                            running = self._decode(running)
                except Exception as exc:  # a model failure fails the requests it touched, not the engine
                    error = exc if isinstance(exc, EngineError) else EngineError(f"generation failed: {exc!r}")
                    _fail((running.reqs if running else []) + new, error)
                    running = None
        except BaseException as exc:  # never leave a caller waiting on a dead worker
            error = EngineError(f"the engine worker stopped: {exc!r}")
            _fail(running.reqs if running else [], error)
            self._fail_queued(error)
            raise
        self._fail_queued(EngineError("the transformers engine was closed"))

    def _take(self, *, block: bool, limit: int) -> list[_Request]:
        """New requests: when idle, wait for one and then ``batch_window_s`` for company."""
        items: list[_Request] = []
        if limit <= 0:
            return items
        if block:
            try:
                items.append(self._queue.get(timeout=0.1))
            except queue.Empty:
                return items
            deadline = time.monotonic() + self.batch_window_s
            while len(items) < limit:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                try:
                    items.append(self._queue.get(timeout=left))
                except queue.Empty:
                    break
        while len(items) < limit:
            try:
                items.append(self._queue.get_nowait())
            except queue.Empty:
                break
        return items

    def _fail_queued(self, error: EngineError) -> None:
        while True:
            try:
                req = self._queue.get_nowait()
            except queue.Empty:
                return
            _fail([req], error)

    def _prefill(self, reqs: list[_Request]) -> _Running | None:
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
        running = _Running(reqs=list(reqs), cache=output_cache(out), mask=mask,
                           next_pos=torch.tensor([len(r.prompt) for r in reqs], dtype=torch.long, device=_HOST))
        return self._sample_and_prune(running, out.logits[:, -1, :])

    def _decode(self, running: _Running) -> _Running | None:
        rows = len(running.reqs)
        ids = torch.tensor([[r.out_ids[-1]] for r in running.reqs], dtype=torch.long, device=_HOST)
        mask = torch.cat([running.mask, torch.ones((rows, 1), dtype=torch.long, device=_HOST)], dim=1)
        with forward_precision(self.device, self.compute_dtype):
            out = self.model(input_ids=ids.to(self.device), attention_mask=mask.to(self.device),
                             position_ids=running.next_pos[:, None].to(self.device),
                             use_cache=True, **{self._cache_kw: running.cache})
        self.stats["steps"] += 1
        self.stats["max_rows"] = max(self.stats["max_rows"], rows)
        running.cache, running.mask, running.next_pos = output_cache(out), mask, running.next_pos + 1
        return self._sample_and_prune(running, out.logits[:, -1, :])

    def _sample_and_prune(self, running: _Running, logits: torch.Tensor) -> _Running | None:
        groups: dict[tuple[float, int, float], list[int]] = {}
        for i, r in enumerate(running.reqs):
            groups.setdefault((r.params.temperature, r.params.top_k, r.params.top_p), []).append(i)
        for (temperature, top_k, top_p), rows in groups.items():
            logprobs = processed_logprobs(logits[rows].float(), temperature, top_k, top_p).cpu()
            for j, i in enumerate(rows):
                req = running.reqs[i]
                token = sample(logprobs[j], temperature == 0.0, req.generator or self._rng)
                req.out_ids.append(token)
                req.out_logprobs.append(float(logprobs[j, token]))
        self.stats["tokens"] += len(running.reqs)
        keep = [i for i, r in enumerate(running.reqs) if not self._finish_if_done(r)]
        if not keep:
            return None
        if len(keep) < len(running.reqs):
            index = torch.tensor(keep, dtype=torch.long, device=_HOST)
            _select_rows(running.cache, index.to(self.device))
            running.reqs = [running.reqs[i] for i in keep]
            running.mask, running.next_pos = running.mask[index], running.next_pos[index]
            _trim_left(running)
        return running

    def _finish_if_done(self, req: _Request) -> bool:
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
        if req.weight_version != self._weight_version:
            meta["weight_version_start"] = req.weight_version
        req.future.set_result(GenerateResult(list(req.out_ids), list(req.out_logprobs), reason,
                                             self._weight_version, meta))
        return True


def cache_keyword(model: Any) -> str:
    """``cache`` in recent transformers, ``past_key_values`` before (still accepted, with a warning); a
    ``peft`` model (``**kwargs``) passes on what the model it wraps takes."""
    import inspect

    inner = model.get_base_model() if callable(getattr(model, "get_base_model", None)) else model
    return "cache" if "cache" in inspect.signature(inner.forward).parameters else "past_key_values"


def output_cache(out: Any) -> Any:
    cache = out.get("cache") if hasattr(out, "get") else None
    return cache if cache is not None else out.past_key_values


def _fail(reqs: list[_Request], error: EngineError) -> None:
    for req in reqs:
        if not req.future.done():
            req.future.set_exception(error)


# ---- KV cache surgery (DynamicCache with plain DynamicLayer layers only) ---------------------------

def _layers(cache: Any) -> list[Any]:
    return list(getattr(cache, "layers", []))


def _joinable(cache: Any) -> bool:
    """Whether rows can be merged into this cache (a sliding-window or quantized cache cannot)."""
    from transformers.cache_utils import DynamicLayer

    layers = _layers(cache)
    return bool(layers) and all(type(layer) is DynamicLayer for layer in layers)


def _select_rows(cache: Any, index: torch.Tensor) -> None:
    cache.batch_select_indices(index)


def _trim_left(running: _Running) -> None:
    """Drop leading key slots that no remaining row attends to (padding of departed rows)."""
    used = running.mask.any(dim=0).nonzero()
    first = int(used[0].item()) if len(used) else running.mask.shape[1]
    if first == 0 or not _joinable(running.cache):
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


def _merge(a: _Running | None, b: _Running | None) -> _Running | None:
    """One running batch from two: the shorter cache is left-padded (masked) to the longer."""
    if a is None or b is None:
        return a or b
    width = max(a.mask.shape[1], b.mask.shape[1])
    for la, lb in zip(_layers(a.cache), _layers(b.cache), strict=True):
        la.keys = torch.cat([_left_pad(la.keys, width, -2), _left_pad(lb.keys, width, -2)], dim=0)
        la.values = torch.cat([_left_pad(la.values, width, -2), _left_pad(lb.values, width, -2)], dim=0)
    return _Running(reqs=a.reqs + b.reqs, cache=a.cache,
                    mask=torch.cat([_left_pad(a.mask, width, 1), _left_pad(b.mask, width, 1)], dim=0),
                    next_pos=torch.cat([a.next_pos, b.next_pos]))


# ---- scoring ---------------------------------------------------------------------------------------

def score_tokens(model: Any, ids: Sequence[int], start: int, *, temperature: float = 0.0, top_k: int = 0,
                 top_p: float = 1.0, compute_dtype: torch.dtype = torch.float32) -> list[float]:
    """Logprobs of ``ids[start:]`` given everything before them, under the processed distribution
    of (``temperature``, ``top_k``, ``top_p``): one forward pass, no cache, no padding."""
    if not 0 < start <= len(ids):
        raise ValueError(f"start must be in (0, {len(ids)}], got {start}")
    if start == len(ids):
        return []
    device = next(model.parameters()).device
    ctx = torch.inference_mode() if not torch.is_inference_mode_enabled() else contextlib.nullcontext()
    with ctx:
        x = torch.tensor([list(ids)], dtype=torch.long, device=device)
        with forward_precision(device, compute_dtype):
            logits = model(input_ids=x, logits_to_keep=len(ids) - start + 1).logits[0, :-1]
        logprobs = processed_logprobs(logits.float(), temperature, top_k, top_p)
        target = torch.tensor(list(ids[start:]), dtype=torch.long, device=device)[:, None]
        return logprobs.gather(-1, target).squeeze(-1).float().cpu().tolist()


def _pad_id(tokenizer: Any) -> int:
    for attr in ("pad_token_id", "eos_token_id", "unk_token_id"):
        value = getattr(tokenizer, attr, None)
        if isinstance(value, int):
            return value
    return 0


def _eos_ids(model: Any, tokenizer: Any) -> list[int]:
    ids: set[int] = set()
    for source in (getattr(model, "generation_config", None), model.config, tokenizer):
        value = getattr(source, "eos_token_id", None)
        if isinstance(value, int):
            ids.add(value)
        elif isinstance(value, (list, tuple)):
            ids.update(int(v) for v in value)
    return sorted(ids)


def _check_state_dict(model: torch.nn.Module, state: dict[str, Any]) -> None:
    """Refuse a state dict that would not replace the model's weights exactly: missing keys (a
    tied weight counts as present under any of its names), unexpected keys, or other shapes."""
    own = model.state_dict()
    def storage(name: str) -> Any:
        tensor = own[name]
        return (tensor.data_ptr(), tensor.numel()) if tensor.numel() else name

    aliases: dict[Any, set[str]] = {}
    for name in own:
        aliases.setdefault(storage(name), set()).add(name)
    missing = sorted(k for k in own if k not in state and not any(a in state for a in aliases[storage(k)]))
    unexpected = sorted(k for k in state if k not in own)
    shapes = sorted(f"{k}: {tuple(state[k].shape)} != {tuple(own[k].shape)}" for k in state
                    if k in own and hasattr(state[k], "shape") and tuple(state[k].shape) != tuple(own[k].shape))
    if missing or unexpected or shapes:
        parts = []
        for label, items in (("missing", missing), ("unexpected", unexpected), ("wrong shape", shapes)):
            if items:
                parts.append(f"{len(items)} {label} ({', '.join(items[:5])}{', ...' if len(items) > 5 else ''})")
        raise EngineError("weight update refused, the state dict does not match the model: " + "; ".join(parts))
