"""The model-engine interface: token ids in, sampled token ids and their logprobs out.

Engines never see chat messages. The caller owns the token record (see the model policy), so
whatever an engine returns is exactly what the model sampled, and what a trainer later scores.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass(frozen=True)
class SamplingParams:
    """Sampling settings. ``logprobs`` are of the distribution actually sampled from: after
    temperature and top-k/top-p are applied (what an importance ratio needs)."""

    max_new_tokens: int = 256
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    stop: tuple[str, ...] = ()
    stop_token_ids: tuple[int, ...] = ()
    seed: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in self.__dict__.items()}


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
    Failures raise :class:`envhub.errors.EngineError`.
    """

    name: str
    max_context: int

    def generate(self, prompt_ids: list[int], params: SamplingParams) -> GenerateResult: ...

    @property
    def weight_version(self) -> str | None: ...

    def close(self) -> None: ...
