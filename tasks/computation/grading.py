"""How a computation answer is graded: by the task's answer type, with the tolerance its prompt promises."""

from __future__ import annotations

from typing import Any

from envhub.types import Task
from envhub.verifiers import ExactMatch, NumericMatch, SequenceMatch
from envhub.verifiers.layered import ScoreCheck


class AnswerTypeMatch:
    """Correctness by the task's answer type: exact integers and fractions, toleranced decimals.

    A decimal ("number") answer gets the tolerance its kind's prompt promises, measured from the
    unrounded value: a unit conversion asks for 6 significant figures, so whatever rounds to the
    result at 6 figures passes (a relative bound, no absolute floor: a tiny result is not "0");
    a statistic asks for 2 decimal places, so an answer within half a unit in the 2nd decimal of
    the exact value passes (both roundings of an exact tie, and the unrounded value, but not the
    neighbouring 2-decimal value).

    A linear system ("sequence") is compared by label: ``y=6, x=-4`` is right for x=-4, y=6, and
    ``y=-4, x=6`` is wrong. An unlabelled ``-4, 6`` is read in the order the prompt asks for
    (``Answer as x=<value>, y=<value>.``), which defines it, so it stays right.
    """

    name = "answer_match"

    def __init__(self) -> None:
        self.checks: dict[str, ScoreCheck] = {
            "integer": NumericMatch(),
            "fraction": NumericMatch(),
            "word": ExactMatch(),
            "sequence": SequenceMatch(labels_key="labels"),
        }
        #: "number" answers, by task kind (a number task of a kind not listed is a verifier error)
        self.number_checks: dict[str, NumericMatch] = {
            "unit": NumericMatch(reference_key="exact", sig_figs=6),  # "Round to 6 significant figures."
            "stats": NumericMatch(reference_key="exact", abs_tol=0.005),  # "Round to 2 decimal places."
        }

    def check_for(self, task: Task) -> ScoreCheck:
        answer_type = task.hidden["answer_type"]
        if answer_type == "number":
            return self.number_checks[task.metadata["kind"]]
        return self.checks[answer_type]

    def __call__(self, task: Task, submission: dict[str, Any], episode: Any) -> Any:
        return self.check_for(task)(task, submission, episode)


ANSWER_MATCH = AnswerTypeMatch()


def assignments(labels: list[str], values: list[str]) -> str:
    """A sequence answer as the prompt asks for it: ``x=3, y=-2``."""
    return ", ".join(f"{n}={v}" for n, v in zip(labels, values, strict=True))


def gold_text(task: Task) -> str:
    """The gold answer written the way the prompt asks for it."""
    gold = task.hidden["answer"]
    return assignments(task.hidden["labels"], gold) if isinstance(gold, list) else gold
