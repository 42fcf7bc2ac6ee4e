"""Reusable answer checks: normalization, exact, numeric, fraction, sequence and set matching, F1.

Task families compose these instead of writing their own comparisons. Every parser here is
strict on purpose: an answer that hedges ("12 or 13", "x = 3 maybe") does not parse, so it cannot
collect credit for a candidate it did not commit to.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from envhub.types import Outcome, Task
from envhub.verifiers.layered import GateFailure, Graded

_NUMBER = re.compile(r"^[+-]?(\d{1,3}(,\d{3})+|\d+)?(\.\d+)?([eE][+-]?\d+)?$")
_SPACES = re.compile(r"\s+")


def normalize_text(text: str) -> str:
    """Case-fold, NFKC, strip surrounding quotes/punctuation, collapse whitespace."""
    text = unicodedata.normalize("NFKC", text).casefold().strip()
    text = text.strip(" \t\n\"'`.")
    return _SPACES.sub(" ", text)


def parse_number(text: str) -> Fraction:
    """An exact number: integer, decimal, scientific or ``a/b``. Raises ValueError otherwise."""
    s = text.strip().replace("_", "").replace(" ", "")
    if s.count("/") == 1:
        num, den = s.split("/")
        value = parse_number(num) / parse_number(den)
        return value
    if not s or not _NUMBER.match(s) or s in {"+", "-", "."}:
        raise ValueError(f"not a number: {text!r}")
    return Fraction(s.replace(",", ""))


def numbers_close(a: Fraction, b: Fraction, rel_tol: float, abs_tol: float) -> bool:
    if rel_tol == 0 and abs_tol == 0:
        return a == b
    return math.isclose(float(a), float(b), rel_tol=rel_tol, abs_tol=abs_tol)


def f1_score(predicted: Iterable[str], gold: Iterable[str]) -> float:
    p, g = Counter(predicted), Counter(gold)
    common = sum((p & g).values())
    if common == 0:
        return 0.0
    precision, recall = common / sum(p.values()), common / sum(g.values())
    return 2 * precision * recall / (precision + recall)


@dataclass
class AnswerPresent:
    """Gate: the submission has a non-empty answer field of sensible length."""

    field: str = "answer"
    max_chars: int = 2_000
    name: str = "answer_present"

    def __call__(self, task: Task, submission: dict[str, Any], episode: Any) -> str:
        value = submission.get(self.field)
        if not isinstance(value, str) or not value.strip():
            raise GateFailure(Outcome.FORMAT_ERROR, f"no {self.field} was submitted")
        if len(value) > self.max_chars:
            raise GateFailure(Outcome.FORMAT_ERROR, f"{self.field} is {len(value)} chars; limit {self.max_chars}")
        return "answer present"


@dataclass
class ExactMatch:
    """Correctness: normalized text equality against ``task.hidden[key]`` (a string or list of aliases)."""

    key: str = "answer"
    field: str = "answer"
    name: str = "exact_match"

    def __call__(self, task: Task, submission: dict[str, Any], episode: Any) -> Graded:
        gold = task.hidden[self.key]
        aliases = gold if isinstance(gold, list) else [gold]
        got = normalize_text(submission[self.field])
        ok = any(got == normalize_text(str(a)) for a in aliases)
        return Graded(1.0 if ok else 0.0, ok, f"expected {aliases[0]!r}, got {submission[self.field]!r}")


@dataclass
class NumericMatch:
    """Correctness: one number, compared exactly or within a tolerance.

    A submission that does not parse as exactly one number is a format error (the gate's
    business), which also rejects hedged answers listing several candidates.
    """

    key: str = "answer"
    field: str = "answer"
    rel_tol: float = 0.0
    abs_tol: float = 0.0
    name: str = "numeric_match"

    def __call__(self, task: Task, submission: dict[str, Any], episode: Any) -> Graded:
        gold = parse_number(str(task.hidden[self.key]))
        try:
            got = parse_number(_strip_label(submission[self.field]))
        except ValueError as exc:
            raise GateFailure(Outcome.FORMAT_ERROR, f"answer is not a single number: {exc}") from None
        ok = numbers_close(got, gold, self.rel_tol, self.abs_tol)
        return Graded(1.0 if ok else 0.0, ok, f"expected {task.hidden[self.key]}, got {submission[self.field]!r}")


@dataclass
class SequenceMatch:
    """Correctness: an ordered list of numbers (``"3, -2"`` or ``"x=3, y=-2"``), element-wise exact."""

    key: str = "answer"
    field: str = "answer"
    name: str = "sequence_match"

    def __call__(self, task: Task, submission: dict[str, Any], episode: Any) -> Graded:
        gold = [parse_number(str(v)) for v in task.hidden[self.key]]
        parts = [p for p in re.split(r"[,;]", submission[self.field]) if p.strip()]
        try:
            got = [parse_number(_strip_label(p)) for p in parts]
        except ValueError as exc:
            raise GateFailure(Outcome.FORMAT_ERROR, f"answer is not a list of numbers: {exc}") from None
        if len(got) != len(gold):
            raise GateFailure(Outcome.FORMAT_ERROR, f"expected {len(gold)} values, got {len(got)}")
        ok = got == gold
        return Graded(1.0 if ok else 0.0, ok, f"expected {', '.join(map(str, gold))}")


@dataclass
class SetMatch:
    """Correctness: a set of names; partial credit is the F1 between the sets."""

    key: str = "answer"
    field: str = "answer"
    name: str = "set_match"

    def __call__(self, task: Task, submission: dict[str, Any], episode: Any) -> Graded:
        gold = {normalize_text(str(v)) for v in task.hidden[self.key]}
        got = {normalize_text(p) for p in re.split(r"[,;\n]", submission[self.field]) if p.strip()}
        score = f1_score(got, gold)
        return Graded(score, got == gold, f"expected {sorted(gold)}, got {sorted(got)}")


def _strip_label(text: str) -> str:
    """``"x = 3"`` -> ``"3"``; a label is allowed, a sentence is not."""
    text = text.strip()
    m = re.match(r"^[A-Za-z_]\w{0,15}\s*=\s*(.+)$", text)
    return m.group(1) if m else text
