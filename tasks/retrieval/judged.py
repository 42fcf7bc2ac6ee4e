"""Retrieval's optional judged quality layer (off by default): is the answer supported by the
passages the agent opened?

Correctness (the exact answer) still decides success; the judge only scores a correct answer, on
a bounded weight (:mod:`envhub.verifiers.judge.check`), for whether the documents the agent
actually opened (the evidence the env logs, ``opened_docs``) state it -- a found answer over a
lucky guess. The judge sees the task's question, the answer (quoted) and an excerpt of each opened
document (quoted as evidence: corpus text, never the agent's): a window around the answer where the
document contains it, else its beginning.

Env args: ``judge`` (a judge spec, e.g. ``hf:smollm2-135m`` or ``openai:URL``, or a mapping of
:class:`~envhub.verifiers.judge.check.JudgeSettings` fields), ``judge_weight`` (default 0.2).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from envhub.types import Task
from envhub.verifiers.judge.check import JudgeCheck, JudgeSettings, checked_weight
from envhub.verifiers.judge.rubric import Rubric

from .evidence import OPENED_DOCS

if TYPE_CHECKING:
    from envhub.episode import Episode

    from .corpus import Corpus

SUPPORT = Rubric(
    name="evidence_support",
    criterion="Is the submitted answer to the question stated or directly implied by the evidence passages?",
    levels=(
        "the evidence does not mention the answer, or contradicts it",
        "the evidence mentions the answer but does not clearly support it as the answer to the question",
        "the evidence clearly states the answer to the question",
    ),
    max_submission_chars=1000,
    max_evidence_chars=2400,
)
#: At most this many opened documents are shown to the judge (in id order).
MAX_PASSAGES = 3


def settings_from(judge: str | Mapping[str, Any]) -> JudgeSettings:
    """JudgeSettings from the env arg ``judge``: a spec string or a mapping of its fields."""
    if isinstance(judge, str):
        return JudgeSettings(spec=judge)
    unknown = set(judge) - {"spec", "k", "temperature", "seed", "options"}
    if unknown or "spec" not in judge:
        raise ValueError(
            f"judge: a spec string or a mapping with spec (and k, temperature, seed, options); "
            f"got {dict(judge)!r}"
        )
    return JudgeSettings(**dict(judge))


def excerpt(text: str, answer: str, chars: int) -> str:
    """A window of ``chars`` around the first occurrence of ``answer`` in ``text`` (case-insensitive),
    else the beginning of ``text``."""
    at = text.lower().find(answer.strip().lower()) if answer.strip() else -1
    start = 0 if at < 0 else max(0, at - chars // 2)
    return text[start : start + chars]


def opened_passages(
    corpus: Callable[[], Corpus],
) -> Callable[[Task, dict[str, Any], Episode | None], list[str]]:
    """The evidence function of the judge: excerpts of the documents the episode opened."""

    def evidence(task: Task, submission: dict[str, Any], episode: Episode | None) -> list[str]:
        if episode is None:
            return []
        answer = str(submission.get("answer", ""))
        by_id = corpus().by_id
        opened = sorted(episode.scratch.get(OPENED_DOCS, set()))[:MAX_PASSAGES]
        per_doc = SUPPORT.max_evidence_chars // max(1, len(opened))
        return [
            f"[{doc_id}]\n{excerpt(by_id[doc_id].text, answer, per_doc)}"
            for doc_id in opened
            if doc_id in by_id
        ]

    return evidence


def support_judge(
    judge: str | Mapping[str, Any], weight: float, corpus: Callable[[], Corpus]
) -> tuple[JudgeCheck, float]:
    """The (check, weight) pair of the judged layer for :class:`~envhub.verifiers.LayeredVerifier`."""
    check = JudgeCheck(
        SUPPORT,
        settings_from(judge),
        evidence=opened_passages(corpus),
        answer=lambda submission: str(submission.get("answer", "")),
    )
    return check, checked_weight(weight)


__all__ = ["MAX_PASSAGES", "SUPPORT", "excerpt", "opened_passages", "settings_from", "support_judge"]
