"""The model policy: an engine drives an env, and the token record is kept token in, token out.

Per episode (:class:`ModelAgent`):

1. the first prompt is rendered **once** with the chat template (system and user messages, the
   tools, the generation prompt);
2. each turn appends the engine's sampled tokens verbatim (mask 1, their sampled logprobs);
3. each env reply is appended as tokens written with the template's own role markers by
   :class:`~envhub.adapters.chat_format.ChatFormat` (mask 0, logprob 0.0), including the end-of-turn
   token when the model stopped without sampling a stop token.

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

import threading
from typing import Any

from envhub.adapters.chat_format import ChatFormat, SegmentEncoder, chat_format_for, template_hash
from envhub.adapters.engines.base import Engine, SamplingParams
from envhub.adapters.token_record import TokenRecord
from envhub.episode import EpisodeEnv
from envhub.errors import ContextOverflowError, EngineError
from envhub.policies import PolicyOutput
from envhub.types import Observation, Sample, TokenView

DEFAULT_SAMPLING = SamplingParams(max_new_tokens=256, temperature=1.0)


class ModelAgent:
    """One episode's token record (see the module docstring)."""

    def __init__(self, policy: ModelPolicy, observation: Observation, seed: int) -> None:
        self.policy = policy
        self.seed = seed
        self.record = TokenRecord(policy.encode(policy.render_prompt(observation)))
        self._turns = 0
        self._closed = True  # nothing sampled yet: no end token owed

    @property
    def prompt_ids(self) -> list[int]:
        return self.record.prompt_ids

    @property
    def length(self) -> int:
        return self.record.length

    def act(self, observation: Observation) -> PolicyOutput:
        """The next turn; the ids appended for ``observation`` (the env's reply to the previous
        turn) come back as its ``observation_ids`` (see :class:`~envhub.policies.Agent`)."""
        policy, record = self.policy, self.record
        params = policy.params
        reply = policy.encode(policy.format.observation_text(observation.messages, closed=self._closed)) \
            if self._turns else []
        room = record.room(policy.max_context) - len(reply)
        limit = f"max_context {policy.max_context}"
        if policy.max_response_tokens is not None:
            left = policy.max_response_tokens - len(record.response_ids) - len(reply)
            if left < room:
                room, limit = left, f"the response budget of {policy.max_response_tokens} tokens"
        if policy.fit_turns and 0 < room < params.max_new_tokens:
            params = params.with_(max_new_tokens=room)
        if params.max_new_tokens > room:
            raise ContextOverflowError(
                f"turn {self._turns}: {record.length} tokens so far ({len(record.response_ids)} of them the response) + "
                f"{len(reply)} for the env's reply + {params.max_new_tokens} to generate do not fit {limit}")
        before_reply = len(record.response_ids)
        if self._turns:
            record.append_observation(reply)
        if params.seed is None and params.temperature > 0:
            params = params.with_(seed=(self.seed * 1_000_003 + self._turns) % (1 << 63))
        try:
            result = policy.engine.generate(record.ids(), params)
            record.check_result(result)
        except (EngineError, ContextOverflowError):
            record.truncate(before_reply)  # the record ends with the last sampled turn
            raise
        except Exception as exc:  # an engine that breaks in any other way is still the engine
            record.truncate(before_reply)
            raise EngineError(f"{policy.engine.name} engine failed: {exc!r}") from exc
        record.append_sampled(result.token_ids, result.logprobs)
        self._turns += 1
        self._closed = bool(result.token_ids) and result.token_ids[-1] in policy.stop_ids
        sample = Sample(token_ids=list(result.token_ids), logprobs=list(result.logprobs),
                        finish_reason=result.finish_reason,
                        weight_version=result.weight_version or policy.engine.weight_version)
        return PolicyOutput(text=policy.decode(result.token_ids), sample=sample, observation_ids=list(reply))

    def token_view(self) -> TokenView:
        return self.record.token_view()


class ModelPolicy:
    """A :class:`~envhub.policies.Policy` over an :class:`~envhub.adapters.engines.Engine`.

    Thread-safe: episodes share the engine (which batches them) and the tokenizer (guarded by a
    lock, since a Rust tokenizer must not be used from two threads at once). ``chat_format``: the
    family's name (checked against the tokenizer's template like a detected one) or a
    :class:`~envhub.adapters.chat_format.ChatFormat` to use as it is; by default the tokenizer's
    family is detected, and a template no family reproduces is refused here, before anything runs.
    """

    def __init__(self, engine: Engine, tokenizer: Any, *, params: SamplingParams = DEFAULT_SAMPLING,
                 max_context: int | None = None, name: str | None = None, model_id: str | None = None,
                 tokenizer_id: str | None = None, chat_format: ChatFormat | str | None = None,
                 fit_turns: bool = False, max_response_tokens: int | None = None) -> None:
        self.engine = engine
        self.tokenizer = tokenizer
        self.format = chat_format if isinstance(chat_format, ChatFormat) else chat_format_for(tokenizer, chat_format)
        #: the ids a sampled turn may end with (the end token first); generation stops on each
        self.stop_ids = self.format.stop_token_ids(tokenizer)
        self.end_id = self.format.end_token_id(tokenizer)
        self.params = params.with_(stop_token_ids=tuple(dict.fromkeys((*params.stop_token_ids, *self.stop_ids))))
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

    def start(self, env: EpisodeEnv, observation: Observation, *, seed: int) -> ModelAgent:
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
