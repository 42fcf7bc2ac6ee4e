"""The token record of one conversation: a prompt, then a response of sampled and observation tokens.

The response interleaves what the model sampled (mask 1, the sampled logprobs, kept verbatim) with
what the env or client said (mask 0, logprob 0.0). :class:`TokenRecord` is the one place that
appends to such a record, so its three response lists always have equal lengths, and the one place
that decides whether an engine's answer can be recorded at all (:meth:`TokenRecord.check_result`).
The model policy, the TITO session server and the audit all build and check records through it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from envhub.adapters.engines.base import GenerateResult
from envhub.errors import EngineError
from envhub.types import TokenView


def is_sampled_logprob(logprob: float) -> bool:
    """Whether ``logprob`` can be a sampled token's: finite and <= 0."""
    return math.isfinite(logprob) and logprob <= 0.0


@dataclass
class TokenRecord:
    """``prompt_ids`` and the masked response (see the module docstring)."""

    prompt_ids: list[int]
    response_ids: list[int] = field(default_factory=list)
    response_mask: list[int] = field(default_factory=list)
    response_logprobs: list[float] = field(default_factory=list)

    @staticmethod
    def check_result(result: GenerateResult) -> None:
        """Raise :class:`~envhub.errors.EngineError` for an engine answer that cannot be recorded
        faithfully (tokens and logprobs of different lengths, a logprob not finite or > 0, an
        aborted request): that is the engine's failure, not the model's."""
        if len(result.token_ids) != len(result.logprobs):
            raise EngineError(f"engine returned {len(result.token_ids)} tokens but {len(result.logprobs)} logprobs")
        if not all(map(is_sampled_logprob, result.logprobs)):
            raise EngineError("engine returned a logprob that is not finite or is > 0")
        if result.finish_reason == "abort":
            raise EngineError(f"engine aborted the request: {result.meta.get('message', '')}")

    @property
    def length(self) -> int:
        """Prompt and response tokens together: what the model's context holds."""
        return len(self.prompt_ids) + len(self.response_ids)

    def ids(self) -> list[int]:
        """The whole sequence, prompt then response (the next request's prompt)."""
        return self.prompt_ids + self.response_ids

    def room(self, max_context: int) -> int:
        """Tokens left before ``max_context`` (negative when already over)."""
        return max_context - self.length

    def append_sampled(self, ids: Sequence[int], logprobs: Sequence[float]) -> None:
        """Append tokens the model sampled, verbatim: mask 1, their sampled logprobs."""
        if len(ids) != len(logprobs):
            raise ValueError(f"{len(ids)} sampled tokens but {len(logprobs)} logprobs")
        self.response_ids.extend(int(t) for t in ids)
        self.response_mask.extend([1] * len(ids))
        self.response_logprobs.extend(float(x) for x in logprobs)

    def append_observation(self, ids: Sequence[int]) -> None:
        """Append tokens the model did not sample (env replies, template markers): mask 0, logprob 0.0."""
        self.response_ids.extend(int(t) for t in ids)
        self.response_mask.extend([0] * len(ids))
        self.response_logprobs.extend([0.0] * len(ids))

    def truncate(self, response_length: int) -> None:
        """Drop every response token from position ``response_length`` on (undo appends)."""
        for part in (self.response_ids, self.response_mask, self.response_logprobs):
            del part[response_length:]

    def token_view(self) -> TokenView:
        """A copy of the record as the trajectory's token view."""
        return TokenView(prompt_ids=list(self.prompt_ids), response_ids=list(self.response_ids),
                         response_mask=list(self.response_mask), response_logprobs=list(self.response_logprobs))
