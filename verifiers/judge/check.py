"""The judge as a quality check of :class:`~envhub.verifiers.layered.LayeredVerifier`.

Where it sits: correctness decides success; the judge only scores a submission the correctness
layer passed (the layered verifier never runs quality checks after a failed correctness layer), so
it cannot turn a wrong answer into reward. Its term is bounded by its weight ``w`` (at most
``max_weight``): with quality checks of weights ``w_i`` and scores ``q_i`` in [0, 1] a success earns

    reward = (1 - sum_i w_i) + sum_i w_i * q_i,      q = (majority score of k samples) / scale

so the judge moves a success's reward within ``[1 - w, 1]`` and nowhere else. The formula, the
samples, the pin and how much of the submission the judge saw are in the layer's details.

One verdict: ``k`` samples (``k == 1`` at temperature 0; ``k > 1`` needs a temperature above 0), an
unparseable sample counts as score 0 and is counted (``unparseable``), the majority with ties
broken toward the lower score (:func:`.stats.majority`). A judge that cannot be reached raises
:class:`~envhub.errors.EngineError`, which the layered verifier turns into ``engine_error``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from envhub.judges import JudgeEngine, JudgePin, shared_judge_engine
from envhub.types import Task

from ..layered import Graded
from .quoting import parse_score
from .rubric import REPLY_PREFIX, Rubric, prompt_sha256, render
from .stats import majority

if TYPE_CHECKING:
    from envhub.episode import Episode

FORMULA = "reward = (1 - sum_i w_i) + sum_i w_i * q_i; q = majority(k samples) / scale; only after correctness passed"
#: The largest weight a judge may have: the programmatic layers decide at least this much of a reward.
MAX_WEIGHT = 0.5

#: What the judge is shown of a task and a submission: the question, the submission's text, evidence.
Question = Callable[[Task], str]
Answer = Callable[[dict[str, Any]], str]
Evidence = Callable[[Task, dict[str, Any], "Episode | None"], Sequence[str]]


def answer_text(submission: dict[str, Any]) -> str:
    """The default submission text: its ``answer``, else the whole submission as ``key: value`` lines."""
    if isinstance(submission.get("answer"), str):
        return submission["answer"]
    return "\n".join(f"{k}: {v}" for k, v in sorted(submission.items()))


@dataclass(frozen=True)
class JudgeSettings:
    """How a judge samples: ``spec`` (see :func:`.engines.make_judge_engine`), ``k`` samples a
    verdict at ``temperature``, ``seed`` of the first sample (sample i uses ``seed + i``), and the
    engine's ``options``."""

    spec: str
    k: int = 1
    temperature: float = 0.0
    seed: int = 0
    options: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.k < 1:
            raise ValueError(f"judge k must be at least 1, got {self.k}")
        if self.k > 1 and self.temperature <= 0:
            raise ValueError(
                "a judge with k > 1 samples needs a temperature above 0 (at 0 they are all the same)"
            )
        if self.temperature < 0:
            raise ValueError(f"judge temperature must be >= 0, got {self.temperature}")

    def sampling(self) -> dict[str, Any]:
        return {"k": self.k, "temperature": self.temperature, "seed": self.seed}


class JudgeCheck:
    """A quality check scored by an LLM judge (see the module docstring). The engine (or the one
    passed in as ``engine``) is the process's shared one for the spec, made on first use
    (:func:`.engines.shared_judge_engine`)."""

    def __init__(
        self,
        rubric: Rubric,
        settings: JudgeSettings,
        *,
        engine: JudgeEngine | None = None,
        question: Question = lambda task: task.prompt,
        answer: Answer = answer_text,
        evidence: Evidence | None = None,
        name: str | None = None,
    ) -> None:
        self.rubric = rubric
        self.settings = settings
        self.name = name or f"judge:{rubric.name}"
        self.question = question
        self.answer = answer
        self.evidence = evidence
        self._engine = engine
        self._lock = threading.Lock()

    @property
    def engine(self) -> JudgeEngine:
        with self._lock:
            if self._engine is None:
                self._engine = shared_judge_engine(self.settings.spec, **self.settings.options)
            return self._engine

    def pin(self) -> JudgePin:
        """The judge's pin (loads the engine: the model and its weights are part of it)."""
        engine = self.engine
        return JudgePin(
            model=engine.model,
            weights_sha256=engine.weights_sha256,
            prompt_sha256=prompt_sha256(),
            rubric_sha256=self.rubric.sha256(),
            sampling={**self.settings.sampling(), "answer_form": engine.answer_form},
        )

    def score_text(self, question: str, submission: str, evidence: Sequence[str] = ()) -> Graded:
        """Judge one submission text (what :meth:`__call__` does after picking the texts out)."""
        prompt = render(self.rubric, question, submission, evidence)
        settings, scale = self.settings, self.rubric.scale

        def sample(i: int) -> str:
            return self.engine.complete(
                prompt.messages(),
                reply_prefix=REPLY_PREFIX,
                temperature=settings.temperature,
                seed=settings.seed + i,
            )

        if settings.k == 1:
            replies = [sample(0)]
        else:  # concurrent, so that an in-process engine batches them
            with ThreadPoolExecutor(max_workers=settings.k) as pool:
                replies = list(pool.map(sample, range(settings.k)))
        scores = [parse_score(reply, scale=scale) for reply in replies]
        chosen = majority([0 if s is None else s for s in scores])
        value = (chosen or 0) / scale
        unparseable = sum(s is None for s in scores)
        cut = prompt.submission
        details = {
            "formula": FORMULA,
            "pin": self.pin().to_dict(),
            "samples": scores,
            "scale": scale,
            "unparseable": unparseable,
            "replies": [reply[:200] for reply in replies],
            "submission_chars": cut.original_chars,
            "judged_chars": cut.kept_chars,
            "cut": cut.cut,
        }
        reason = f"judge {chosen}/{scale}" + (
            f" ({unparseable} of {len(scores)} replies unparseable)" if unparseable else ""
        )
        return Graded(score=value, passed=True, reason=reason, details=details)

    def __call__(self, task: Task, submission: dict[str, Any], episode: Episode | None) -> Graded:
        evidence = self.evidence(task, submission, episode) if self.evidence is not None else ()
        return self.score_text(self.question(task), self.answer(submission), evidence)


def checked_weight(weight: float) -> float:
    """``weight`` if it is a judge weight we allow (0 < w <= MAX_WEIGHT), else ValueError."""
    if not 0.0 < weight <= MAX_WEIGHT:
        raise ValueError(f"a judge's weight must be in (0, {MAX_WEIGHT}], got {weight}")
    return weight


__all__ = ["FORMULA", "MAX_WEIGHT", "JudgeCheck", "JudgeSettings", "answer_text", "checked_weight"]
