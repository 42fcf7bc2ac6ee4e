"""A scripted engine: a test double of the *model*, with real tokens from the real tokenizer.

Small random models never call tools, and the 135M model rarely does, yet the tool loop (sampled
tool call, env reply as masked tokens, next turn, success) has to be exercised token for token.
:class:`ScriptedEngine` implements :class:`~envhub.adapters.engines.Engine`: for each request it
chooses a text (from a list, by the number of assistant turns in the prompt, or from a function
of the decoded prompt), tokenizes it with the model's tokenizer and returns those ids, optionally
followed by the end-of-turn token, with fixed logprobs. Everything after the engine -- the model
policy, the env, the record, the audit -- runs for real.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

from envhub.adapters.chat_format import ChatMLFormat
from envhub.adapters.engines.base import GenerateResult, SamplingParams
from envhub.errors import EngineError

Responder = Callable[[str], str]


class ScriptedEngine:
    name = "scripted"

    def __init__(self, tokenizer: Any, script: Sequence[str] | Responder, *,
                 end_token: str | None = ChatMLFormat.end_token, logprob: float = -0.5, max_context: int = 8192,
                 weight_version: str = "scripted-0", assistant_marker: str = f"{ChatMLFormat.start_token}assistant\n",
                 fail_with: Exception | None = None) -> None:
        self.tokenizer = tokenizer
        self.script = script
        self.end_id = tokenizer.convert_tokens_to_ids(end_token) if end_token else None
        self.logprob = logprob
        self.max_context = max_context
        self.assistant_marker = assistant_marker
        self.fail_with = fail_with
        self._version = weight_version
        self._lock = threading.Lock()
        self.calls = 0

    @property
    def weight_version(self) -> str | None:
        return self._version

    def generate(self, prompt_ids: list[int], params: SamplingParams) -> GenerateResult:
        with self._lock:
            self.calls += 1
            if self.fail_with is not None:
                raise self.fail_with
            prompt = self.tokenizer.decode(prompt_ids)
            if callable(self.script):
                text = self.script(prompt)
            else:
                turn = prompt.count(self.assistant_marker) - 1
                if not 0 <= turn < len(self.script):
                    raise EngineError(f"the script has no turn {turn}")
                text = self.script[turn]
            ids = list(self.tokenizer.encode(text, add_special_tokens=False))
        if self.end_id is not None:
            ids.append(self.end_id)
        reason = "stop"
        if len(ids) > params.max_new_tokens:
            ids, reason = ids[: params.max_new_tokens], "length"
        return GenerateResult(ids, [self.logprob] * len(ids), reason, self._version, {"scripted": True})

    def close(self) -> None:
        pass
