"""The layered verifier: gate, then correctness, then (optionally) quality.

Each layer is a small check object. The gate decides whether there is anything to grade at all
and whether grading can be trusted; only then does correctness score the submission; quality
adds a bounded bonus on top. Exactly one :class:`~envhub.types.Outcome` comes out, and a crash
of a check is the verifier's fault (``verifier_error``), never the policy's; a model a check
consults that cannot be reached (an LLM judge: :class:`~envhub.errors.EngineError`) is ``engine_error``.
"""

from __future__ import annotations

import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from envhub.errors import EngineError, InfraError
from envhub.types import LayerResult, Outcome, Task, Verdict

if TYPE_CHECKING:
    from envhub.episode import Episode


class GateFailure(Exception):
    """Raised by a gate check; carries the outcome it implies and the reason."""

    def __init__(self, outcome: Outcome, reason: str):
        if outcome not in (Outcome.FORMAT_ERROR, Outcome.ENV_ERROR, Outcome.VERIFIER_ERROR):
            raise ValueError(f"a gate cannot end an episode as {outcome}")
        super().__init__(reason)
        self.outcome = outcome
        self.reason = reason


@dataclass
class Graded:
    """What a correctness or quality check returns: a score in [0, 1] and whether it passed."""

    score: float
    passed: bool
    reason: str = ""
    details: dict[str, Any] | None = None


class GateCheck(Protocol):
    name: str

    def __call__(self, task: Task, submission: dict[str, Any], episode: Episode | None) -> str:
        """Return a short reason it passed, or raise :class:`GateFailure`."""
        ...


class ScoreCheck(Protocol):
    name: str

    def __call__(self, task: Task, submission: dict[str, Any], episode: Episode | None) -> Graded: ...


@dataclass
class LayeredVerifier:
    gate: Sequence[GateCheck]
    correctness: ScoreCheck
    quality: Sequence[tuple[ScoreCheck, float]] = ()
    partial_credit: bool = False

    def __post_init__(self) -> None:
        total = sum(w for _, w in self.quality)
        if not 0.0 <= total < 1.0:
            raise ValueError(f"quality weights must sum to less than 1, got {total}")

    def verify(self, task: Task, submission: dict[str, Any], episode: Episode | None = None) -> Verdict:
        layers: list[LayerResult] = []
        for check in self.gate:
            try:
                reason = check(task, submission, episode)
            except GateFailure as failure:
                layers.append(LayerResult(layer="gate", name=check.name, score=0.0, passed=False,
                                          reason=failure.reason))
                return Verdict(reward=0.0, outcome=failure.outcome, layers=layers, detail=failure.reason)
            except Exception as exc:
                return _crashed(layers, "gate", check.name, exc)
            layers.append(LayerResult(layer="gate", name=check.name, score=1.0, passed=True, reason=reason))

        try:
            graded = self.correctness(task, submission, episode)
        except GateFailure as failure:  # a correctness check may discover an integrity problem
            layers.append(LayerResult(layer="correctness", name=self.correctness.name, score=0.0,
                                      passed=False, reason=failure.reason))
            return Verdict(reward=0.0, outcome=failure.outcome, layers=layers, detail=failure.reason)
        except Exception as exc:
            return _crashed(layers, "correctness", self.correctness.name, exc)
        layers.append(_layer("correctness", self.correctness.name, graded))
        if not graded.passed:
            reward = graded.score if self.partial_credit else 0.0
            return Verdict(reward=reward, outcome=Outcome.WRONG_ANSWER, layers=layers, detail=graded.reason)

        quality_weight = sum(w for _, w in self.quality)
        reward = 1.0 - quality_weight
        for check, weight in self.quality:
            try:
                q = check(task, submission, episode)
            except Exception as exc:
                return _crashed(layers, "quality", check.name, exc)
            layers.append(_layer("quality", check.name, q))
            layers[-1].details["weight"] = weight
            reward += weight * min(max(q.score, 0.0), 1.0)
        return Verdict(reward=reward, outcome=Outcome.SUCCESS, layers=layers, detail=graded.reason)


def _layer(layer: str, name: str, graded: Graded) -> LayerResult:
    return LayerResult(layer=layer, name=name, score=graded.score, passed=graded.passed,  # type: ignore[arg-type]
                       reason=graded.reason, details=graded.details or {})


def _crashed(layers: list[LayerResult], layer: str, name: str, exc: Exception) -> Verdict:
    outcome = (Outcome.ENV_ERROR if isinstance(exc, InfraError) else
               Outcome.ENGINE_ERROR if isinstance(exc, EngineError) else Outcome.VERIFIER_ERROR)
    detail = f"{layer} check {name} crashed: {exc!r}\n{traceback.format_exc()}"
    layers.append(LayerResult(layer=layer, name=name, score=0.0, passed=False, reason=repr(exc)))  # type: ignore[arg-type]
    return Verdict(reward=0.0, outcome=outcome, layers=layers, detail=detail)
