"""The model policy: an engine drives an env, and the token record is kept token in, token out.

Per episode (:class:`ModelAgent`):

1. the first prompt is rendered **once** with the chat template (system and user messages, the
   tools, the generation prompt);
2. each turn appends the engine's sampled tokens verbatim (mask 1, their sampled logprobs);
3. each env reply is appended as tokens written with the template's own role markers by
   :class:`~envhub.adapters.chat_format.ChatFormat` (mask 0, logprob 0.0), including the end-of-turn
   token when the model stopped without sampling it.

The history is never re-templated, so a trainer scores exactly the tokens the model sampled. The
text handed to the env is ``tokenizer.decode(token_ids)`` of the sampled tokens, nothing removed;
the env parses tool calls from it.

``context_overflow``: before a turn, if the record plus the env's reply plus ``max_new_tokens``
would not fit ``max_context`` -- or the response so far plus the reply plus ``max_new_tokens`` would
not fit ``max_response_tokens``, a trainer's budget for the whole completion, env replies
included -- :class:`~envhub.errors.ContextOverflowError` is raised (and the reply is not appended),
so every recorded sequence fits the model and the trainer. With ``fit_turns`` a turn instead
samples at most what is left; only no room at all overflows.
"""

from __future__ import annotations

import math
import threading
from typing import Any

from envhub.adapters.chat_format import ChatFormat, SegmentEncoder, chat_format_for, template_hash
from envhub.adapters.engine import Engine, GenerateResult, SamplingParams
from envhub.env import Env
from envhub.errors import ContextOverflowError, EngineError
from envhub.policies import PolicyOutput
from envhub.types import Observation, TokenView

DEFAULT_SAMPLING = SamplingParams(max_new_tokens=256, temperature=1.0)


class ModelAgent:
    """One episode's token record (see the module docstring)."""

    def __init__(self, policy: ModelPolicy, observation: Observation, seed: int) -> None:
        self.policy = policy
        self.seed = seed
        self.prompt_ids = policy.encode(policy.render_prompt(observation))
        self.response_ids: list[int] = []
        self.response_mask: list[int] = []
        self.response_logprobs: list[float] = []
        self._observation_ids: list[list[int]] = []
        self._turns = 0
        self._closed = True  # nothing sampled yet: no end token owed

    @property
    def length(self) -> int:
        return len(self.prompt_ids) + len(self.response_ids)

    def act(self, observation: Observation) -> PolicyOutput:
        policy = self.policy
        params = policy.params
        reply = policy.encode(policy.format.observation_text(observation.messages, closed=self._closed)) \
            if self._turns else []
        room = policy.max_context - self.length - len(reply)
        limit = f"max_context {policy.max_context}"
        if policy.max_response_tokens is not None:
            left = policy.max_response_tokens - len(self.response_ids) - len(reply)
            if left < room:
                room, limit = left, f"the response budget of {policy.max_response_tokens} tokens"
        if policy.fit_turns and 0 < room < params.max_new_tokens:
            params = params.with_(max_new_tokens=room)
        if params.max_new_tokens > room:
            raise ContextOverflowError(
                f"turn {self._turns}: {self.length} tokens so far ({len(self.response_ids)} of them the response) + "
                f"{len(reply)} for the env's reply + {params.max_new_tokens} to generate do not fit {limit}")
        if self._turns:
            self._append(reply, mask=0)
            self._observation_ids[-1] = reply
        if params.seed is None and params.temperature > 0:
            params = params.with_(seed=(self.seed * 1_000_003 + self._turns) % (1 << 63))
        try:
            result = policy.engine.generate(self.prompt_ids + self.response_ids, params)
            _check_result(result)
        except (EngineError, ContextOverflowError):
            self._rollback_reply()  # the record ends with the last sampled turn
            raise
        except Exception as exc:  # an engine that breaks in any other way is still the engine
            self._rollback_reply()
            raise EngineError(f"{policy.engine.name} engine failed: {exc!r}") from exc
        self._append(result.token_ids, mask=1, logprobs=result.logprobs)
        self._observation_ids.append([])
        self._turns += 1
        self._closed = bool(result.token_ids) and result.token_ids[-1] == policy.end_id
        return PolicyOutput(
            text=policy.decode(result.token_ids), token_ids=list(result.token_ids),
            logprobs=list(result.logprobs), finish_reason=result.finish_reason,
            weight_version=result.weight_version or policy.engine.weight_version,
        )

    def _rollback_reply(self) -> None:
        if self._observation_ids and self._observation_ids[-1]:
            n = len(self._observation_ids[-1])
            del self.response_ids[-n:], self.response_mask[-n:], self.response_logprobs[-n:]
            self._observation_ids[-1] = []

    def _append(self, ids: list[int], *, mask: int, logprobs: list[float] | None = None) -> None:
        self.response_ids.extend(ids)
        self.response_mask.extend([mask] * len(ids))
        self.response_logprobs.extend(logprobs if logprobs is not None else [0.0] * len(ids))

    def token_view(self) -> TokenView:
        return TokenView(prompt_ids=list(self.prompt_ids), response_ids=list(self.response_ids),
                         response_mask=list(self.response_mask), response_logprobs=list(self.response_logprobs))

    def observation_ids(self) -> list[list[int]]:
        return [list(ids) for ids in self._observation_ids]


def _check_result(result: GenerateResult) -> None:
    """An engine answer that cannot be recorded faithfully is the engine's failure, not the model's."""
    if len(result.token_ids) != len(result.logprobs):
        raise EngineError(f"engine returned {len(result.token_ids)} tokens but {len(result.logprobs)} logprobs")
    if result.logprobs and (not all(map(math.isfinite, result.logprobs)) or max(result.logprobs) > 0.0):
        raise EngineError("engine returned a logprob that is not finite or is > 0")
    if result.finish_reason == "abort":
        raise EngineError(f"engine aborted the request: {result.meta.get('message', '')}")


class ModelPolicy:
    """A :class:`~envhub.policies.Policy` over an :class:`~envhub.adapters.engine.Engine`.

    Thread-safe: episodes share the engine (which batches them) and the tokenizer (guarded by a
    lock, since a Rust tokenizer must not be used from two threads at once).
    """

    def __init__(self, engine: Engine, tokenizer: Any, *, params: SamplingParams = DEFAULT_SAMPLING,
                 max_context: int | None = None, name: str | None = None, model_id: str | None = None,
                 tokenizer_id: str | None = None, chat_format: ChatFormat | None = None,
                 fit_turns: bool = False, max_response_tokens: int | None = None) -> None:
        self.engine = engine
        self.tokenizer = tokenizer
        self.format = chat_format or chat_format_for(tokenizer)
        self.end_id = self.format.end_token_id(tokenizer)
        self.params = params.with_(stop_token_ids=tuple(dict.fromkeys((*params.stop_token_ids, self.end_id))))
        self.max_context = min(max_context or engine.max_context, engine.max_context)
        #: shrink a turn's ``max_new_tokens`` to the room left instead of overflowing early
        self.fit_turns = fit_turns
        #: the most tokens one episode's whole response may hold (sampled and env replies); None: no cap
        if max_response_tokens is not None and max_response_tokens < 1:
            raise ValueError(f"max_response_tokens must be a positive integer, got {max_response_tokens!r}")
        self.max_response_tokens = max_response_tokens
        self.name = name or f"{engine.name}:{model_id or '?'}"
        self.model_id = model_id
        self.tokenizer_id = tokenizer_id
        self._tok_lock = threading.RLock()
        self._encoder = SegmentEncoder(tokenizer)

    def render_prompt(self, observation: Observation) -> str:
        with self._tok_lock:
            return self.format.render_prompt(self.tokenizer, observation.messages, observation.tools)

    def encode(self, text: str) -> list[int]:
        with self._tok_lock:
            return self._encoder.encode(text)

    def decode(self, ids: list[int]) -> str:
        with self._tok_lock:
            return str(self.tokenizer.decode(ids))

    def start(self, env: Env, observation: Observation, *, seed: int) -> ModelAgent:
        return ModelAgent(self, observation, seed)

    def describe(self) -> dict[str, Any]:
        return {
            "model": self.model_id, "tokenizer": self.tokenizer_id, "engine": self.engine.name,
            "chat_template_hash": template_hash(getattr(self.tokenizer, "chat_template", None)),
            "chat_format": self.format.name, "max_context": self.max_context,
            "sampling_params": self.params.to_dict(),
            **({"max_response_tokens": self.max_response_tokens} if self.max_response_tokens is not None else {}),
        }

    def close(self) -> None:
        self.engine.close()
