"""envhub's judge backends (:class:`envhub.judges.JudgeEngine`, found through the ``envhub.judges``
entry points): a token engine we drive (``hf:NAME_OR_PATH``, ``sglang:URL``) or any
OpenAI-compatible chat server (``openai:URL``: our TITO server, vLLM, SGLang's OpenAI API, a
hosted model).

* :class:`TokenJudgeEngine` renders the messages with the model's chat template, starts the
  judge's reply with the caller's prefix (``SCORE: ``) and samples exactly one token (rubric scales
  stop at 9, so one digit is the whole answer, and a model cannot trail off into text that would
  have to be guessed around). Requests from concurrent episodes are batched by the engine itself
  (the in-process engine's continuous batching; SGLang's scheduler).
* :class:`ChatJudgeEngine` sends the messages to ``/v1/chat/completions`` and returns the reply.

The engines return text; the judge parses it strictly (:mod:`envhub.verifiers.judge.quoting`).
A prompt the judge refuses (over its context: the quoted submission is capped in characters, not
tokens; an HTTP 400 or 413 of a chat server) comes back as a reply that is not the answer form --
scored 0 and counted, never infra, since the submission is in it. Only a judge that cannot be
reached -- a connection error, a timeout, a server error -- after ``retries`` tries, or one that
refuses every request (401, 403, 404: its configuration), raises :class:`~envhub.errors.EngineError`
(``engine_error``: infra).
"""

from __future__ import annotations

import time
from typing import Any

from envhub.errors import ContextOverflowError, EngineError
from envhub.judges import weights_sha256

CHAT_MAX_TOKENS = 16
#: How a reply reads when the judge refused the prompt itself (over its context, HTTP 400/413): not the
#: answer form, so it is unparseable -- scored 0 and counted, never infra: the submission is in the prompt.
REFUSED = "(the judge refused this prompt)"


class TokenJudgeEngine:
    """A judge on an envhub :class:`~envhub.adapters.engines.Engine` and its tokenizer (see the
    module docstring). ``model``: the spec, for the pin; ``weights``: the weights' hash."""

    def __init__(self, engine: Any, tokenizer: Any, *, model: str, weights: str | None) -> None:
        self.engine = engine
        self.tokenizer = tokenizer
        self.model = model
        self.weights_sha256 = weights
        self.answer_form = "the reply prefix forced, then one sampled token"

    def prompt_ids(self, messages: list[dict[str, str]], reply_prefix: str) -> list[int]:
        """The chat-templated messages with the generation prompt and ``reply_prefix`` appended."""
        text = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        return list(self.tokenizer.encode(text + reply_prefix, add_special_tokens=False))

    def complete(
        self, messages: list[dict[str, str]], *, reply_prefix: str, temperature: float, seed: int | None
    ) -> str:
        from envhub.adapters.engines.base import SamplingParams

        params = SamplingParams(max_new_tokens=1, temperature=temperature, seed=seed)
        try:
            result = self.engine.generate(self.prompt_ids(messages, reply_prefix), params)
        except ContextOverflowError as exc:  # the quoted text is capped in characters, not tokens
            return f"{REFUSED} {exc}"
        if result.finish_reason == "abort":
            raise EngineError("the judge's engine aborted the request")
        return reply_prefix + self.tokenizer.decode(result.token_ids, skip_special_tokens=False)

    def close(self) -> None:
        self.engine.close()


class ChatJudgeEngine:
    """A judge behind an OpenAI-compatible ``/v1/chat/completions`` (see the module docstring).
    ``model``: the request's model name (None: the server's first in ``/v1/models``)."""

    def __init__(
        self,
        base_url: str,
        *,
        model: str | None = None,
        retries: int = 3,
        timeout_s: float = 60.0,
        backoff_s: float = 0.5,
    ) -> None:
        import httpx

        self.base_url = base_url.rstrip("/").removesuffix("/v1")
        self.retries = max(1, retries)
        self.backoff_s = backoff_s
        self._client = httpx.Client(timeout=timeout_s)
        self.served_model = model or self._first_model()
        self.model = f"openai:{self.base_url}#{self.served_model}"
        self.weights_sha256 = None
        self.answer_form = f"the whole chat reply, max_tokens {CHAT_MAX_TOKENS}"

    def _first_model(self) -> str:
        body = self._request("GET", "/v1/models", None)
        try:
            return str(body["data"][0]["id"])
        except (KeyError, IndexError, TypeError):
            raise EngineError(
                f"the judge at {self.base_url} lists no model at /v1/models: {str(body)[:200]}"
            ) from None

    def _request(self, method: str, path: str, payload: dict[str, Any] | None) -> Any:
        import httpx

        last = ""
        for attempt in range(self.retries):
            if attempt:
                time.sleep(self.backoff_s * 2 ** (attempt - 1))
            try:
                response = self._client.request(method, self.base_url + path, json=payload)
            except httpx.HTTPError as exc:
                last = f"{type(exc).__name__}: {exc}"
                continue
            if response.status_code >= 500 or response.status_code == 429:
                last = f"HTTP {response.status_code}: {response.text[:200]}"
                continue
            if response.status_code in (400, 413) and path.endswith("/completions"):
                # this prompt refused (too long for the context, say): the quoted text may be why
                return {"choices": [{"message": {"content": f"{REFUSED} HTTP {response.status_code}: "
                                                            f"{response.text[:200]}"}}]}
            if response.status_code >= 400:  # our request is wrong: retrying will not help
                raise EngineError(
                    f"the judge at {self.base_url} refused the request: HTTP {response.status_code}: "
                    f"{response.text[:200]}"
                )
            try:
                return response.json()
            except ValueError:
                last = f"a reply that is no JSON: {response.text[:200]!r}"
        raise EngineError(
            f"the judge at {self.base_url} could not be reached in {self.retries} tries: {last}"
        )

    def complete(
        self, messages: list[dict[str, str]], *, reply_prefix: str, temperature: float, seed: int | None
    ) -> str:
        payload: dict[str, Any] = {
            "model": self.served_model,
            "messages": messages,
            "temperature": temperature,
            "max_tokens": CHAT_MAX_TOKENS,
        }
        if seed is not None:
            payload["seed"] = seed
        body = self._request("POST", "/v1/chat/completions", payload)
        try:
            return str(body["choices"][0]["message"]["content"] or "")
        except (KeyError, IndexError, TypeError):
            return f"(no message in the reply: {str(body)[:300]})"

    def close(self) -> None:
        self._client.close()


def openai_judge(target: str, **options: Any) -> ChatJudgeEngine:
    """``openai:URL`` (options ``model``, ``retries``, ``timeout_s``, ``backoff_s``)."""
    return ChatJudgeEngine(target, **options)


def hf_judge(target: str, **options: Any) -> TokenJudgeEngine:
    """``hf:NAME_OR_PATH`` in process (options ``threads``, ``max_batch_size``, ``device``)."""
    from envhub.adapters.engines.factory import make_engine
    from envhub.adapters.engines.models import resolve_model

    path = resolve_model(target)
    engine = make_engine("transformers", model=path, **options)
    return TokenJudgeEngine(engine, engine.tokenizer, model=f"hf:{target}", weights=weights_sha256(path))


def sglang_judge(target: str, **options: Any) -> TokenJudgeEngine:
    """``sglang:URL`` (options ``tokenizer``: a tokenizer dir or known model name, needed where the
    server's reported tokenizer path is not readable here; ``timeout``). The weights hash is taken
    from that dir when it holds weight files (the server's own copy cannot be read from here)."""
    from transformers import AutoTokenizer

    from envhub.adapters.engines.factory import make_engine
    from envhub.adapters.engines.models import resolve_tokenizer_dir

    tokenizer = options.pop("tokenizer", None)
    engine = make_engine(f"sglang:{target}", **options)
    if tokenizer is None:
        info = engine.model_info()
        tokenizer = info.get("tokenizer_path") or info.get("model_path")
        if not tokenizer:
            raise ValueError("sglang judge: the server does not report its tokenizer path; pass tokenizer=DIR")
    tokenizer_dir = resolve_tokenizer_dir(str(tokenizer))
    return TokenJudgeEngine(engine, AutoTokenizer.from_pretrained(str(tokenizer_dir)), model=f"sglang:{target}",
                            weights=weights_sha256(tokenizer_dir))


__all__ = ["ChatJudgeEngine", "TokenJudgeEngine", "hf_judge", "openai_judge", "sglang_judge"]
