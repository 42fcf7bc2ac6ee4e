"""Evidence recall: how much of a question's gold evidence the agent looked at (never a score).

The tools record, in the episode's scratch, the documents that appeared in search results or were
opened (*seen*) and those opened, and refresh both recall figures in the episode's metrics each
time (:func:`note_evidence`; the env calls it once at setup, so every episode has them).  The
figures are computed there only: :class:`EvidenceRecall` copies them into the correctness layer's
details, so a verdict shows them next to the score it leaves untouched.  They tell a lucky guess
from a found answer.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from envhub.episode import Episode
from envhub.types import Task
from envhub.verifiers.layered import Graded, ScoreCheck

#: Episode scratch sets the tools maintain, and the metric names (``metrics.extra``) of their recall.
OPENED_DOCS, SEEN_DOCS = "opened_docs", "seen_docs"
RECALL, SEEN_RECALL = "evidence_recall", "evidence_seen_recall"


def evidence_recall(gold: Iterable[str], found: Iterable[str]) -> float:
    """Fraction of the gold evidence among ``found`` (1.0 when there is no gold evidence)."""
    gold_set = set(gold)
    return len(gold_set & set(found)) / len(gold_set) if gold_set else 1.0


def note_evidence(episode: Episode, *, seen: Iterable[str] = (), opened: Iterable[str] = ()) -> None:
    """Add documents to the episode's seen and opened sets (creating them on the first call) and
    refresh the recall of both in ``episode.metrics.extra`` under ``RECALL`` and ``SEEN_RECALL``."""
    scratch = episode.scratch
    seen_docs = scratch.setdefault(SEEN_DOCS, set())
    opened_docs = scratch.setdefault(OPENED_DOCS, set())
    seen_docs.update(seen)
    opened_docs.update(opened)
    gold = episode.task.hidden.get("evidence", [])
    episode.metrics.extra[RECALL] = evidence_recall(gold, opened_docs)
    episode.metrics.extra[SEEN_RECALL] = evidence_recall(gold, seen_docs)


@dataclass
class EvidenceRecall:
    """Wraps a correctness check; adds the gold evidence and the episode's recall figures to its
    details. The score, pass flag and reason are the inner check's."""

    inner: ScoreCheck

    @property
    def name(self) -> str:
        return self.inner.name

    def __call__(self, task: Task, submission: dict[str, Any], episode: Any) -> Graded:
        graded = self.inner(task, submission, episode)
        extra = getattr(getattr(episode, "metrics", None), "extra", None) or {}
        details = dict(graded.details or {})
        details["evidence"] = list(task.hidden.get("evidence", []))
        details.update({key: extra[key] for key in (RECALL, SEEN_RECALL) if key in extra})
        return Graded(graded.score, graded.passed, graded.reason, details)
