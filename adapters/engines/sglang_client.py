"""A small client for SGLang's native HTTP API, and a launcher for ``sglang.launch_server``.

SGLang does not run on our CPU machines, so this client is kept small and its wire format is pinned
by JSON fixtures (``tests/fixtures/sglang_*.json``) that follow SGLang's documented and source
format (``GenerateReqInput`` in ``io_struct.py``, ``http_server.py``, ``tokenizer_manager.py``):

* ``POST /generate`` with ``{"input_ids": [...], "sampling_params": {...}, "return_logprob": true}``
  answers ``{"text", "output_ids", "meta_info": {"id", "finish_reason", "prompt_tokens",
  "completion_tokens", "weight_version", "output_token_logprobs": [[logprob, token_id, text|null],
  ...], ...}}``; ``finish_reason`` is ``{"type": "stop", "matched": <id or str>}``,
  ``{"type": "length", "length": n}`` or ``{"type": "abort", "message": ...}``; errors answer
  ``{"error": {"message": ...}}`` with status 400. A request that does not fit the model's
  context ("The input (N tokens) is longer than the model's context length (C tokens)." or
  "Requested token count exceeds the model's maximum context length of C tokens. ...") is a
  :class:`~envhub.errors.ContextOverflowError` (the episode ends as ``context_overflow``); every
  other failure is an :class:`~envhub.errors.EngineError` (infra).
* ``POST /update_weights_from_disk`` with ``{"model_path", "load_format", "abort_all_requests",
  "weight_version", "flush_cache"}`` answers ``{"success", "message", "num_paused_requests"}``.
* ``POST /flush_cache`` answers plain text, status 200 (flushed) or 400 (requests were running).
* ``GET /health`` answers 200 when the server can generate, 503 otherwise.

Sampled token ids are read from ``output_token_logprobs`` (as slime and Miles do), with
``skip_special_tokens: false`` and ``no_stop_trim: true`` so that the stop token is kept: token in,
token out. SGLang reports logprobs after *temperature scaling only* (``log_softmax(logits /
temperature)``, unless the server runs with ``SGLANG_RETURN_ORIGINAL_LOGPROB=1``, which gives the raw
model's; the launcher removes that variable). They are **not** renormalized over the top-k / top-p
set that the token was sampled from, so with ``top_p < 1`` or ``top_k > 0`` the recorded logprobs
are not those of the truncated distribution that
:class:`~envhub.adapters.engines.SamplingParams` describes (each is lower by the log of the kept
mass). :class:`SGLangEngine` warns once per engine when such a request is sent; for exact
importance ratios sample with ``top_p=1`` and ``top_k=0``.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from envhub.adapters.engines.base import GenerateResult, SamplingParams
from envhub.errors import ContextOverflowError, EngineError


def sglang_sampling_params(params: SamplingParams, *, forward_seed: bool = False) -> dict[str, Any]:
    """Our sampling params in SGLang's ``sampling_params`` form (``top_k`` -1 means no limit)."""
    out: dict[str, Any] = {
        "max_new_tokens": params.max_new_tokens,
        "temperature": params.temperature,
        "top_p": params.top_p,
        "top_k": params.top_k if params.top_k > 0 else -1,
        "skip_special_tokens": False,
        "no_stop_trim": True,
    }
    if params.stop:
        out["stop"] = list(params.stop)
    if params.stop_token_ids:
        out["stop_token_ids"] = list(params.stop_token_ids)
    if forward_seed and params.seed is not None:
        out["sampling_seed"] = params.seed
    return out


def generate_request(prompt_ids: Sequence[int], params: SamplingParams, *, forward_seed: bool = False,
                     rid: str | None = None) -> dict[str, Any]:
    """The JSON body of ``POST /generate`` for one prompt."""
    body: dict[str, Any] = {
        "input_ids": [int(t) for t in prompt_ids],
        "sampling_params": sglang_sampling_params(params, forward_seed=forward_seed),
        "return_logprob": True,
        "stream": False,
    }
    if rid is not None:
        body["rid"] = rid
    return body


#: What SGLang's messages say when a request does not fit the context (tokenizer_manager.py).
CONTEXT_OVERFLOW_PHRASES = (
    "is longer than the model's context length",
    "exceeds the model's maximum context length",
)


def error_message(body: Any) -> str:
    """The message of an SGLang error answer (``{"error": {"message": ...}}``), or the body as text."""
    if isinstance(body, dict):
        err = body.get("error", body)
        if isinstance(err, dict) and err.get("message") is not None:
            return str(err["message"])
        if isinstance(err, str):
            return err
    return str(body)


def is_context_overflow(message: str) -> bool:
    text = message.lower()
    return any(p in text for p in CONTEXT_OVERFLOW_PHRASES)


def raise_for_error(status: int, body: Any) -> None:
    """An error answer as :class:`ContextOverflowError` (the request did not fit the model's
    context: the model's doing, not infra) or :class:`EngineError` (everything else)."""
    message = error_message(body)
    if status in (200, 400) and is_context_overflow(message):
        raise ContextOverflowError(f"sglang: {message}")
    raise EngineError(f"sglang /generate answered {status}: {message[:500]}")


def parse_generate_response(body: dict[str, Any]) -> GenerateResult:
    """A ``/generate`` answer as a :class:`GenerateResult`; raises :class:`EngineError` for an
    abort, an error object, or logprobs that cannot be recorded faithfully, and
    :class:`ContextOverflowError` for an error saying the request does not fit the context."""
    if "error" in body:
        raise_for_error(200, body)
    meta = body.get("meta_info")
    if not isinstance(meta, dict):
        raise EngineError("sglang answer without meta_info")
    finish = meta.get("finish_reason") or {}
    kind = finish.get("type") if isinstance(finish, dict) else str(finish)
    if kind == "abort":
        raise EngineError(f"sglang aborted the request: {finish.get('message', '')}")
    if kind not in ("stop", "length"):
        raise EngineError(f"sglang answer with unknown finish_reason {finish!r}")
    triples = meta.get("output_token_logprobs")
    if not isinstance(triples, list):
        raise EngineError("sglang answer without output_token_logprobs (was return_logprob sent?)")
    token_ids, logprobs = [], []
    for item in triples:
        if not isinstance(item, (list, tuple)) or len(item) < 2 or item[0] is None:
            raise EngineError(f"malformed output_token_logprobs entry {item!r}")
        logprob = float(item[0])
        if not math.isfinite(logprob):
            raise EngineError(f"non-finite logprob {item[0]!r} from sglang")
        token_ids.append(int(item[1]))
        logprobs.append(logprob)
    extra = {k: meta[k] for k in ("id", "prompt_tokens", "completion_tokens", "cached_tokens", "e2e_latency")
             if k in meta}
    extra["matched"] = finish.get("matched") if isinstance(finish, dict) else None
    output_ids = body.get("output_ids")
    if isinstance(output_ids, list) and [int(t) for t in output_ids] != token_ids:
        extra["output_ids_differ"] = True  # the logprob triples are authoritative (they carry the stop token)
    version = meta.get("weight_version")
    return GenerateResult(token_ids, logprobs, kind, str(version) if version is not None else None, extra)


class SGLangEngine:
    """:class:`~envhub.adapters.engines.Engine` over a running SGLang server.

    Each episode thread sends its own request; SGLang batches them on the server (continuous
    batching), so no client-side batching is needed. HTTP and server failures raise
    :class:`EngineError`; a 400 saying the request exceeds the context raises
    :class:`ContextOverflowError`. ``max_context`` is asked from ``/get_server_info`` on first use
    when not given. ``forward_seed`` sends per-request seeds as ``sampling_seed`` (recent SGLang
    only). The first request with ``top_p < 1`` or ``top_k > 0`` warns (once per engine) that
    SGLang's logprobs are then not those of the truncated distribution (see the module docstring).
    """

    name = "sglang"

    def __init__(self, url: str, *, max_context: int | None = None, timeout: float = 600.0,
                 forward_seed: bool = False, weight_version: str | None = None) -> None:
        url = url.rstrip("/")
        self.url = url if url.startswith(("http://", "https://")) else "http://" + url
        self.timeout = timeout
        self.forward_seed = forward_seed
        self._max_context = max_context
        self._weight_version = weight_version
        self._warned_truncation = False

    @property
    def max_context(self) -> int:
        if self._max_context is None:
            self._max_context = self._discover_context()
        return self._max_context

    # ---- the Engine protocol ----------------------------------------------------------------------

    @property
    def weight_version(self) -> str | None:
        return self._weight_version

    @property
    def sampler_rng(self) -> None:
        """None: the server samples, so there is no sampler state here for a checkpoint to keep."""
        return None

    def generate(self, prompt_ids: list[int], params: SamplingParams) -> GenerateResult:
        if len(prompt_ids) >= self.max_context:
            raise ContextOverflowError(f"prompt of {len(prompt_ids)} tokens leaves no room in {self.max_context}")
        if (params.top_p < 1.0 or params.top_k > 0) and not params.greedy and not self._warned_truncation:
            self._warned_truncation = True
            warnings.warn(
                f"sglang: sampling with top_p={params.top_p}, top_k={params.top_k}: SGLang returns logprobs "
                "after temperature scaling only, not renormalized over the top-k/top-p set, so the recorded "
                "logprobs are not those of the distribution sampled from (use top_p=1, top_k=0 for exact "
                "importance ratios)", RuntimeWarning, stacklevel=2)
        status, body = self._request("POST", "/generate", generate_request(prompt_ids, params,
                                                                           forward_seed=self.forward_seed))
        if status != 200:
            raise_for_error(status, body)
        if not isinstance(body, dict):
            raise EngineError(f"sglang /generate answered a non-object: {str(body)[:200]}")
        result = parse_generate_response(body)
        if result.weight_version is not None:
            self._weight_version = result.weight_version
        return result

    def close(self) -> None:
        pass

    # ---- server management ------------------------------------------------------------------------

    def health(self) -> bool:
        try:
            status, _ = self._request("GET", "/health", None, timeout=30.0)
        except EngineError:
            return False
        return status == 200

    def wait_healthy(self, timeout: float = 600.0, interval: float = 2.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.health():
                return
            time.sleep(interval)
        raise EngineError(f"sglang at {self.url} not healthy after {timeout:.0f}s")

    def flush_cache(self) -> bool:
        """Flush the prefix cache; False when SGLang refused because requests were running."""
        status, _ = self._request("POST", "/flush_cache", None)
        return status == 200

    def update_weights_from_disk(self, model_path: str, *, weight_version: str | None = None,
                                 load_format: str | None = None, abort_all_requests: bool = False,
                                 flush_cache: bool = True) -> dict[str, Any]:
        """Load new weights from ``model_path`` (a dir the *server* can read) in place."""
        body: dict[str, Any] = {"model_path": model_path, "abort_all_requests": abort_all_requests,
                                "flush_cache": flush_cache}
        if weight_version is not None:
            body["weight_version"] = weight_version
        if load_format is not None:
            body["load_format"] = load_format
        status, answer = self._request("POST", "/update_weights_from_disk", body)
        if status != 200 or not isinstance(answer, dict) or not answer.get("success"):
            raise EngineError(f"sglang weight update failed ({status}): {answer}")
        if weight_version is not None:
            self._weight_version = weight_version
        return answer

    def model_info(self) -> dict[str, Any]:
        status, body = self._request("GET", "/get_model_info", None)
        if status != 200 or not isinstance(body, dict):
            raise EngineError(f"sglang /get_model_info answered {status}")
        if body.get("weight_version") is not None:
            self._weight_version = str(body["weight_version"])
        return body

    def _discover_context(self) -> int:
        try:
            status, info = self._request("GET", "/get_server_info", None, timeout=30.0)
        except EngineError:
            return 32768
        if status == 200 and isinstance(info, dict):
            for key in ("context_length", "max_req_input_len"):
                if isinstance(info.get(key), int) and info[key] > 0:
                    return int(info[key])
        return 32768

    def _request(self, method: str, path: str, body: dict[str, Any] | None,
                 timeout: float | None = None) -> tuple[int, Any]:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"} if data else {})
        try:
            with urllib.request.urlopen(req, timeout=timeout or self.timeout) as resp:
                return resp.status, _decode(resp.read())
        except urllib.error.HTTPError as exc:
            return exc.code, _decode(exc.read())
        except (urllib.error.URLError, OSError, TimeoutError) as exc:
            raise EngineError(f"sglang at {self.url} unreachable: {exc}") from exc


def _decode(raw: bytes) -> Any:
    text = raw.decode("utf-8", "replace")
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


# ---- launcher ---------------------------------------------------------------------------------------

@dataclass
class SGLangLaunchConfig:
    """Arguments of ``python -m sglang.launch_server`` that envhub sets."""

    model_path: str
    host: str = "127.0.0.1"
    port: int = 30000
    tp_size: int = 1
    dtype: str | None = None
    context_length: int | None = None
    mem_fraction_static: float | None = None
    weight_version: str | None = None
    random_seed: int | None = None
    extra_args: tuple[str, ...] = ()

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"


def build_launch_command(config: SGLangLaunchConfig, python: str = sys.executable) -> list[str]:
    cmd = [python, "-m", "sglang.launch_server", "--model-path", config.model_path, "--host", config.host,
           "--port", str(config.port), "--tp-size", str(config.tp_size)]
    optional = [("--dtype", config.dtype), ("--context-length", config.context_length),
                ("--mem-fraction-static", config.mem_fraction_static), ("--weight-version", config.weight_version),
                ("--random-seed", config.random_seed)]
    for flag, value in optional:
        if value is not None:
            cmd += [flag, str(value)]
    return cmd + list(config.extra_args)


def launch_server(config: SGLangLaunchConfig, *, wait: bool = True, timeout: float = 900.0,
                  log_path: str | None = None) -> tuple[subprocess.Popen[bytes], SGLangEngine]:
    """Start SGLang and (by default) wait until ``/health`` answers 200; returns the process and a
    client. The caller terminates the process (``proc.terminate()``)."""
    env = dict(os.environ)
    env.pop("SGLANG_RETURN_ORIGINAL_LOGPROB", None)  # logprobs of the temperature-scaled distribution
    log = open(log_path, "ab") if log_path else subprocess.DEVNULL  # noqa: SIM115 - handed to the child
    proc = subprocess.Popen(build_launch_command(config), env=env, stdout=log, stderr=subprocess.STDOUT)
    client = SGLangEngine(config.url, max_context=config.context_length, weight_version=config.weight_version)
    if wait:
        deadline = time.monotonic() + timeout
        while not client.health():
            if proc.poll() is not None:
                raise EngineError(f"sglang exited with code {proc.returncode} while starting")
            if time.monotonic() > deadline:
                proc.terminate()
                raise EngineError(f"sglang did not become healthy within {timeout:.0f}s")
            time.sleep(2.0)
    return proc, client
