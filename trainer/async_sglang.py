"""An SGLang engine for asynchronous training (``rollout.mode: async`` with ``engine: sglang:URL``):
generation is paused around each weight push, and every request the pause aborts is sent again.

SGLang's HTTP API, as read in SGLang's source (sgl-project/sglang ``python/sglang/srt/entrypoints/
http_server.py`` at 0025436eab0556737d615b36a4dd3e1e26e82f3d and ``python/sglang/srt/managers/
io_struct.py`` at 001067fffe33427bee0ed2f007fb7551a1d76b44; ``tokenizer_manager.py``'s
``pause_generation`` / ``continue_generation``):

* ``POST /pause_generation``, body ``PauseGenerationReqInput``: ``{"mode": "abort" | "retract" |
  "in_place"}`` (default ``"abort"``; the older route takes no body and always aborts, and ignores
  ours). Answer 200 ``{"message": "Generation paused successfully.", "status": "ok"}``. ``abort``:
  the server stops admitting (new ``/generate`` requests wait), aborts every request in flight and
  answers once none is left; each aborted ``/generate`` answers with ``meta_info.finish_reason``
  ``{"type": "abort", ...}``.
* ``POST /continue_generation``, body ``ContinueGenerationReqInput``: ``{"torch_empty_cache": bool}``
  (default true; we send ``{}``). Answer 200 ``{"message": "Generation continued successfully.",
  "status": "ok"}``; the waiting requests then run.
* ``POST /abort_request`` (``AbortReq``: ``rid``, ``abort_all``) is not needed: the pause aborts all.
* the weight update itself is :class:`~envhub.trainer.weight_sync.SGLangDiskSync`'s
  ``POST /update_weights_from_disk`` and ``GET /get_model_info``.

**Why ``abort``, not ``retract`` or ``in_place``.** Those two keep the tokens a request has sampled so
far and go on sampling it after the update, with the new weights: one turn would mix two weight
versions while recording one, and its logprobs would be neither version's. With ``abort`` a request
either finished before the pause (wholly on the old weights, recorded as the old version) or is
aborted and sent again here -- the same prompt ids, i.e. the same episode and turn prefix, from the
same episode thread -- and waits until the update is done: the turn is sampled wholly on the new
weights and records the new version. Nothing is lost silently: the aborted answer is never returned
to the episode, and a request that keeps failing ends its episode as an engine error (infra), as any
engine failure does.

:class:`PausingSGLangEngine` wraps the client (:class:`~envhub.adapters.engines.sglang_client.
SGLangEngine`); :meth:`PausingSGLangEngine.weight_update` is the push's window. Tested against a
stand-in server that follows the shapes above (``tests/trainer/test_async_sglang.py``), not a live
SGLang.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from typing import Any

from envhub.adapters.engines.base import GenerateResult, SamplingParams
from envhub.errors import ContextOverflowError, EngineError

#: the ``mode`` of ``PauseGenerationReqInput`` used at a push (see the module docstring)
PAUSE_MODE = "abort"
#: how many times one request is sent again after pushes aborted it, before it counts as failed
MAX_REISSUES = 8


class PausingSGLangEngine:
    """``engine`` (an SGLang client) whose requests a weight push may abort and that sends them again.

    :meth:`generate` waits while a push is in its window; a request that fails while a push's window
    overlapped it (SGLang aborted it) is sent again, unchanged, once the window closes. Counters:
    ``swap_wait_s`` (seconds generation was paused at pushes: the async figures' rollout idle time),
    ``aborted_requests`` (requests a pause aborted, each sent again). Everything else is the client's.
    """

    name = "sglang"

    def __init__(self, engine: Any) -> None:
        self.inner = engine
        self._cond = threading.Condition()
        self._window = False  # a push is pausing, updating or resuming
        self._epoch = 0  # windows opened so far
        self._in_flight = 0  # generate requests sent and not answered
        self._failed: str | None = None  # a push failed: no more requests
        self.swap_wait_s = 0.0
        self.aborted_requests = 0

    def __getattr__(self, name: str) -> Any:  # url, max_context, model_info, ...: the client's
        if name == "inner":  # not set yet (a copy being built): no recursion
            raise AttributeError(name)
        return getattr(self.inner, name)

    @property
    def weight_version(self) -> str | None:
        return self.inner.weight_version

    @property
    def sampler_rng(self) -> None:
        return None

    def generate(self, prompt_ids: list[int], params: SamplingParams) -> GenerateResult:
        for _ in range(MAX_REISSUES + 1):
            with self._cond:
                while self._window and self._failed is None:
                    self._cond.wait()
                if self._failed is not None:
                    raise EngineError(f"sglang: no requests after a failed weight push ({self._failed})")
                epoch = self._epoch
                self._in_flight += 1
            try:
                return self.inner.generate(prompt_ids, params)
            except ContextOverflowError:
                raise
            except EngineError:
                with self._cond:
                    if self._epoch == epoch and not self._window:
                        raise  # no push overlapped it: a failure of its own
                    self.aborted_requests += 1  # aborted by the pause: sent again after the update
            finally:
                with self._cond:
                    self._in_flight -= 1
                    self._cond.notify_all()
        raise EngineError(f"sglang: a request was aborted by {MAX_REISSUES + 1} weight pushes in a row")

    @contextlib.contextmanager
    def weight_update(self, timeout_s: float) -> Iterator[None]:
        """The window of one push: no request is sent, SGLang's generation is paused (``abort``) and
        every request sent before has answered (finished or aborted) when the block starts; generation
        continues after it. A pause or continue that fails, or requests still unanswered after
        ``timeout_s``, raise :class:`EngineError`; after any failure no more requests are sent."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            self._window, self._epoch = True, self._epoch + 1
        since = time.monotonic()
        try:
            self._control("/pause_generation", {"mode": PAUSE_MODE}, deadline)
            with self._cond:
                while self._in_flight and time.monotonic() < deadline:
                    self._cond.wait(max(0.0, min(0.5, deadline - time.monotonic())))
                if self._in_flight:
                    raise EngineError(f"sglang: {self._in_flight} requests still unanswered {timeout_s:g}s "
                                      "after /pause_generation")
            yield
            self._control("/continue_generation", {}, deadline)
        except BaseException as exc:
            with self._cond:
                self._failed = str(exc) or type(exc).__name__
            with contextlib.suppress(Exception):  # never leave a shared server paused; we send nothing more
                self._control("/continue_generation", {}, time.monotonic() + 30.0)
            raise
        finally:
            with self._cond:
                self._window = False
                self.swap_wait_s += time.monotonic() - since
                self._cond.notify_all()

    def _control(self, path: str, body: dict[str, Any], deadline: float) -> None:
        """``POST path`` with ``body``; :class:`EngineError` unless it answers 200."""
        # the client's transport (its error handling and URL); no other client method sends these routes
        status, answer = self.inner._request("POST", path, body, timeout=max(1.0, deadline - time.monotonic()))
        if status != 200:
            hint = " (an SGLang without this route: async training needs one with it)" if status == 404 else ""
            raise EngineError(f"sglang {path} answered {status}: {str(answer)[:300]}{hint}")

    def close(self) -> None:
        with self._cond:
            self._failed = self._failed or "the engine is closed"
            self._cond.notify_all()
        self.inner.close()
