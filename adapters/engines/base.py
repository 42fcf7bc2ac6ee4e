"""The model-engine interface: token ids in, sampled token ids and their logprobs out.

Engines never see chat messages. The caller owns the token record (see the model policy), so
whatever an engine returns is exactly what the model sampled, and what a trainer later scores.

Backends live in :mod:`envhub.adapters.engines`: the in-process transformers engine, the SGLang
``/generate`` client, and a scripted engine (a test double of a model).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields, replace
from typing import Any, Literal, Protocol

FinishReason = Literal["stop", "length", "abort"]


@dataclass(frozen=True)
class SamplingParams:
    """Sampling settings.

    ``logprobs`` are of the distribution actually sampled from: the logits divided by
    ``temperature``, restricted to the ``top_k`` most likely tokens (0 = no limit), then to the
    smallest nucleus whose mass reaches ``top_p``, renormalized (what an importance ratio needs).
    ``temperature == 0`` is greedy decoding; its logprobs are then the model's own
    (``log_softmax`` of the raw logits), as SGLang reports them for greedy requests.

    Generation stops after a token in ``stop_token_ids`` or once the decoded output contains a
    string of ``stop``; the stopping token is kept in the output (token in, token out).
    """

    max_new_tokens: int = 256
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    stop: tuple[str, ...] = ()
    stop_token_ids: tuple[int, ...] = ()
    seed: int | None = None

    def __post_init__(self) -> None:
        if self.max_new_tokens < 0:
            raise ValueError(f"max_new_tokens must be >= 0, got {self.max_new_tokens}")
        if not math.isfinite(self.temperature) or self.temperature < 0:
            raise ValueError(f"temperature must be a finite number >= 0, got {self.temperature}")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0 (0 = no limit), got {self.top_k}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    def to_dict(self) -> dict[str, Any]:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in self.__dict__.items()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SamplingParams:
        """The inverse of :meth:`to_dict`; unknown keys (e.g. from a newer record) are ignored."""
        known = {f.name for f in fields(cls)}
        kwargs = {k: tuple(v) if isinstance(v, list) else v for k, v in data.items() if k in known}
        return cls(**kwargs)

    def with_(self, **changes: Any) -> SamplingParams:
        return replace(self, **changes)


@dataclass
class GenerateResult:
    token_ids: list[int]
    logprobs: list[float]
    finish_reason: str  # "stop" | "length" | "abort"
    weight_version: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)


class Engine(Protocol):
    """Implementations: in-process transformers (CPU/GPU) and an SGLang ``/generate`` client.

    ``generate`` is thread-safe; concurrent calls from many episodes are batched by the engine.
    Failures raise :class:`envhub.errors.EngineError`; a prompt that leaves no room for a single
    new token raises :class:`envhub.errors.ContextOverflowError`.
    """

    name: str
    max_context: int

    def generate(self, prompt_ids: list[int], params: SamplingParams) -> GenerateResult: ...

    @property
    def weight_version(self) -> str | None: ...

    def close(self) -> None: ...
