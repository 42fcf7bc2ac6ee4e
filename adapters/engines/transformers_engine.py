"""In-process transformers engine: one worker thread batches the requests of every episode.

Episode threads call :meth:`TransformersEngine.generate`, which queues the request and waits. The
worker owns the model: each step it takes the requests that arrived and hands them, with the running
batch, to :class:`~envhub.adapters.engines.continuous_batching.Batcher` (continuous batching over a
shared KV cache: prefill, merge, one decode step, finished rows dropped). A row's tokens and logprobs
do not depend on which other rows shared its batch beyond float rounding;
``tests/adapters/test_engine_transformers.py`` checks batched against unbatched greedy decoding.

New weights either replace the model's between two decode steps (:meth:`TransformersEngine.update_weights`:
requests in flight go on with them) or wait until no request runs (:meth:`TransformersEngine.stage_weights`,
asynchronous training: every result is sampled under the one version it carries).

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
from pathlib import Path
from typing import Any

import torch

from envhub.adapters.engines.base import GenerateResult, SamplingParams
from envhub.adapters.engines.continuous_batching import Batcher, Request, Running, fail, joinable
from envhub.adapters.engines.precision import forward_precision
from envhub.adapters.engines.sampling import processed_logprobs
from envhub.errors import ContextOverflowError, EngineError


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
        self._weight_version = weight_version
        self._rng = torch.Generator().manual_seed(seed if seed is not None else int.from_bytes(os.urandom(7), "big"))
        self._batcher = Batcher(self.model, self.tokenizer, pad_id=self.pad_id, compute_dtype=compute_dtype,
                                rng=self._rng)
        self.stats = self._batcher.stats
        self._queue: queue.Queue[Request] = queue.Queue()
        self._lock = threading.Lock()  # held by whoever runs the model (worker step, score, update)
        self._swap = threading.Condition()  # guards the staged weights below
        self._staged: tuple[dict[str, torch.Tensor], str, float] | None = None  # state, version, since
        self._swap_error: EngineError | None = None
        #: seconds new requests were held back, waiting for the running ones to finish before a swap
        self.swap_wait_s = 0.0
        self._start_lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._closed = False

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
        req = Request(prompt=prompt, params=params, max_new=min(params.max_new_tokens, room),
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
        with self._swap:
            self._swap.notify_all()
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

    def stage_weights(self, state: dict[str, torch.Tensor], version: str) -> str:
        """Weights for the turns that start from now on, without waiting for them; returns ``version``.

        The state dict is checked now (:class:`EngineError` on a mismatch, as :meth:`update_weights`;
        nothing staged). The worker loads it into the engine's own model once no request is running:
        requests in flight finish on the weights they started with, and requests submitted meanwhile
        wait and start on the new ones, so every result is sampled under the one version it carries.
        The engine takes ``state`` over: the caller hands it a copy it never touches again (the
        trainer's :func:`envhub.trainer.fsdp.full_state_dict` clones). A later call before the swap
        replaces the staged weights.
        """
        with self._lock:
            _check_state_dict(self.model, state)
        with self._swap:
            if self._swap_error is not None:
                raise self._swap_error
            self._staged = (state, version, time.monotonic())
        self._ensure_worker()
        return version

    def wait_weights(self, timeout: float | None = None) -> str | None:
        """Until the staged weights (if any) are the model's; returns the version sampled with from now
        on. :class:`EngineError` when the swap failed or ``timeout`` seconds passed."""
        with self._swap:
            done = self._swap.wait_for(lambda: self._staged is None or self._swap_error is not None
                                       or self._closed, timeout)
            if not done or self._staged is not None:
                raise EngineError(f"the staged weights were not loaded (closed, or {timeout}s passed)")
            if self._swap_error is not None:
                raise self._swap_error
        return self._weight_version

    def _apply_staged(self) -> None:
        """(The worker, no request running.) The staged weights into the model, as their version."""
        with self._swap:
            staged = self._staged
        if staged is None:
            return
        state, version, since = staged
        error = None
        try:
            with self._lock:
                self.model.load_state_dict(state, strict=False)  # checked when staged
                self._weight_version = version
        except Exception as exc:
            error = EngineError(f"loading weight version {version} failed: {exc!r}")
        with self._swap:
            if self._staged is staged:  # not replaced meanwhile (a newer one is loaded next)
                self._staged = None
            self._swap_error = self._swap_error or error
            self.swap_wait_s += time.monotonic() - since
            self._swap.notify_all()

    # ---- the worker -------------------------------------------------------------------------------

    def _ensure_worker(self) -> None:
        with self._start_lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._loop, name="envhub-transformers-engine", daemon=True)
                self._thread.start()

    def _loop(self) -> None:
        running: Running | None = None
        try:
            while not (self._closed and running is None):
                capacity = self.max_batch_size - (len(running.reqs) if running else 0)
                # staged weights: no request joins until the running ones are done and the swap is made
                can_join = (running is None or joinable(running.cache)) and self._staged is None
                new = self._take(block=running is None, limit=capacity if can_join else 0)
                if running is None and self._staged is not None:
                    self._apply_staged()  # before the requests just taken: whatever came after the stage
                if not new and running is None:
                    continue
                try:
                    with self._lock, torch.inference_mode():
                        running = self._batcher.step(running, new, self._weight_version)
                except Exception as exc:  # a model failure fails the requests it touched, not the engine
                    error = exc if isinstance(exc, EngineError) else EngineError(f"generation failed: {exc!r}")
                    fail((running.reqs if running else []) + new, error)
                    running = None
        except BaseException as exc:  # never leave a caller waiting on a dead worker
            error = EngineError(f"the engine worker stopped: {exc!r}")
            fail(running.reqs if running else [], error)
            self._fail_queued(error)
            raise
        self._fail_queued(EngineError("the transformers engine was closed"))

    def _take(self, *, block: bool, limit: int) -> list[Request]:
        """New requests: when idle, wait for one and then ``batch_window_s`` for company."""
        items: list[Request] = []
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
            fail([req], error)

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
