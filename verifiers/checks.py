"""Reusable answer checks: normalization, exact, numeric, fraction, sequence and set matching, F1.

Task families compose these instead of writing their own comparisons. Every parser here is
strict on purpose: an answer that hedges ("12 or 13", "x = 3 maybe") does not parse, so it cannot
collect credit for a candidate it did not commit to.
"""

from __future__ import annotations

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
#: Bounds on a number's spelling: beyond them building the exact value would take minutes or
#: gigabytes (``1e100000000``), so such an answer is simply not a number.
MAX_EXPONENT = 1000
MAX_DIGITS = 2000
_FLOAT_SLACK = 1 + Fraction(1, 10**9)


def normalize_text(text: str) -> str:
    """Case-fold, NFKC, strip surrounding quotes/punctuation, collapse whitespace."""
    text = unicodedata.normalize("NFKC", text).casefold().strip()
    text = text.strip(" \t\n\"'`.")
    return _SPACES.sub(" ", text)


def parse_number(text: str) -> Fraction:
    """An exact number: integer, decimal, scientific or ``a/b``. Raises ValueError otherwise.

    A zero denominator, more than ``MAX_DIGITS`` digits or an exponent beyond ``MAX_EXPONENT``
    is not a number either (ValueError), never a crash or a hang.
    """
    s = text.strip().replace("_", "").replace(" ", "")
    if s.count("/") == 1:
        num, den = s.split("/")
        numerator, denominator = parse_number(num), parse_number(den)
        if denominator == 0:
            raise ValueError(f"not a number (division by zero): {text!r}")
        return numerator / denominator
    m = _NUMBER.match(s) if s and s not in {"+", "-", "."} else None
    if m is None:
        raise ValueError(f"not a number: {text!r}")
    mantissa, _, exponent = s.replace(",", "").lower().partition("e")
    if sum(c.isdigit() for c in mantissa) > MAX_DIGITS:
        raise ValueError(f"not a number (more than {MAX_DIGITS} digits): {text[:40]!r}...")
    if exponent and (len(exponent.lstrip("+-").lstrip("0")) > 6 or abs(int(exponent)) > MAX_EXPONENT):
        raise ValueError(f"not a number (exponent beyond ±{MAX_EXPONENT}): {text[:40]!r}")
    return Fraction(s.replace(",", ""))


def numbers_close(a: Fraction, b: Fraction, rel_tol: float, abs_tol: float) -> bool:
    """``math.isclose`` semantics, computed exactly: no float overflow, no rounding at the boundary."""
    diff = abs(a - b)
    return diff <= abs_tol or diff <= Fraction(rel_tol) * max(abs(a), abs(b))


def exponent10(x: Fraction) -> int:
    """``floor(log10(|x|))``, exactly (0 for 0): the position of the leading significant digit."""
    x = abs(Fraction(x))
    if x == 0:
        return 0
    e = len(str(x.numerator)) - len(str(x.denominator))  # within one of the answer
    while Fraction(10) ** e > x:
        e -= 1
    while Fraction(10) ** (e + 1) <= x:
        e += 1
    return e


def significant_figures_tolerance(reference: Fraction, sig_figs: int) -> Fraction:
    """Half a unit in the last of ``sig_figs`` significant figures of ``reference``: how far a correct
    rounding to that many figures can be from it."""
    if reference == 0:
        return Fraction(0)
    return Fraction(1, 2) * Fraction(10) ** (exponent10(reference) - sig_figs + 1)


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

    The tolerance is measured from ``task.hidden[reference_key]`` when that is set (the unrounded
    value, so that every correct rounding passes and nothing else does), else from the gold
    ``task.hidden[key]``. ``sig_figs`` accepts what rounds to the reference at that many
    significant figures (half a unit in the last one); ``rel_tol`` / ``abs_tol`` are
    ``math.isclose``'s, computed exactly. All zero: exact equality.

    A submission that does not parse as exactly one number is a format error (the gate's
    business), which also rejects hedged answers listing several candidates.
    """

    key: str = "answer"
    field: str = "answer"
    rel_tol: float = 0.0
    abs_tol: float = 0.0
    name: str = "numeric_match"
    reference_key: str | None = None
    sig_figs: int = 0

    def reference(self, task: Task) -> Fraction:
        return parse_number(str(task.hidden[self.reference_key or self.key]))

    def allowed_error(self, reference: Fraction) -> Fraction:
        """How far an answer near ``reference`` may be from it and still pass (0: exact)."""
        return max(Fraction(self.abs_tol), Fraction(self.rel_tol) * abs(reference), self._sig_error(reference))

    def _sig_error(self, reference: Fraction) -> Fraction:
        return significant_figures_tolerance(reference, self.sig_figs) if self.sig_figs > 0 else Fraction(0)

    def __call__(self, task: Task, submission: dict[str, Any], episode: Any) -> Graded:
        reference = self.reference(task)
        try:
            got = parse_number(_strip_label(submission[self.field]))
        except ValueError as exc:
            raise GateFailure(Outcome.FORMAT_ERROR, f"answer is not a single number: {exc}") from None
        # a float reference may sit a hair off an exact tie, where both roundings are correct
        ok = (numbers_close(got, reference, self.rel_tol, self.abs_tol)
              or abs(got - reference) <= self._sig_error(reference) * _FLOAT_SLACK)
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
