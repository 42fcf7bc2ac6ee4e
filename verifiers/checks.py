"""Reusable answer checks: normalization, exact, numeric, fraction, sequence and set matching, F1.

Task families compose these instead of writing their own comparisons. Every parser here is
strict on purpose: an answer that hedges ("12 or 13", "x = 3 maybe") does not parse, so it cannot
collect credit for a candidate it did not commit to. What is forgiven is only notation that
cannot change a value: quotes or backticks around it, and a sentence's full stop.
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
_LABEL = re.compile(r"^([A-Za-z_]\w{0,15})\s*=\s*(.+)$", re.DOTALL)
#: Quote pairs that may wrap a value: ``'42'``, ``"42"``, `` `42` ``, typographic quotes.
_QUOTES = {"'": "'", '"': '"', "`": "`", "\u2018": "\u2019", "\u201c": "\u201d"}
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
            got = parse_answer_number(submission[self.field])
        except ValueError as exc:
            raise GateFailure(Outcome.FORMAT_ERROR, f"answer is not a single number: {exc}") from None
        # a float reference may sit a hair off an exact tie, where both roundings are correct
        ok = (numbers_close(got, reference, self.rel_tol, self.abs_tol)
              or abs(got - reference) <= self._sig_error(reference) * _FLOAT_SLACK)
        return Graded(1.0 if ok else 0.0, ok, f"expected {task.hidden[self.key]}, got {submission[self.field]!r}")


@dataclass
class SequenceMatch:
    """Correctness: a list of numbers, each exact, named by label or given in order.

    ``task.hidden[labels_key]`` (optional) names the values in order, e.g. ``["x", "y"]``. An
    answer that labels its values (``"y=-2, x=3"``) is compared label by label, in any order, and
    must name every label exactly once and nothing else: a wrong, missing, duplicated or extra
    label, or a value left unlabelled among labelled ones, is a wrong answer. An answer without
    labels (``"3, -2"``) is compared by position, in the order of the labels (the order the prompt
    lists them). Values that do not parse, or an unlabelled list of the wrong length, are a
    format error.
    """

    key: str = "answer"
    field: str = "answer"
    name: str = "sequence_match"
    labels_key: str = "labels"

    def __call__(self, task: Task, submission: dict[str, Any], episode: Any) -> Graded:
        gold = [parse_number(str(v)) for v in task.hidden[self.key]]
        labels = [str(v) for v in task.hidden.get(self.labels_key) or ()]
        expected = ", ".join(f"{n}={v}" for n, v in zip(labels, gold, strict=True)) if labels else \
            ", ".join(map(str, gold))
        parts = [p for p in re.split(r"[,;]", unwrap_value(submission[self.field])) if p.strip()]
        try:
            named = [(label, parse_number(value)) for label, value in map(split_label, parts)]
        except ValueError as exc:
            raise GateFailure(Outcome.FORMAT_ERROR, f"answer is not a list of numbers: {exc}") from None
        given = [label for label, _ in named if label is not None]
        if not given:
            if len(named) != len(gold):
                raise GateFailure(Outcome.FORMAT_ERROR, f"expected {len(gold)} values, got {len(named)}")
            ok = [v for _, v in named] == gold
            return Graded(1.0 if ok else 0.0, ok, f"expected {expected}")
        problem = _label_problem(given, len(named), labels)
        if problem:
            return Graded(0.0, False, f"{problem}; expected {expected}")
        values = dict(named)
        ok = all(values[label] == v for label, v in zip(labels, gold, strict=True))
        return Graded(1.0 if ok else 0.0, ok, f"expected {expected}")


def _label_problem(given: list[str], n_values: int, labels: list[str]) -> str:
    """Why labelled values ``given`` (out of ``n_values``) do not name ``labels`` exactly once each."""
    if len(given) < n_values:
        return "some values are labelled and some are not"
    duplicated = sorted({g for g in given if given.count(g) > 1})
    if duplicated:
        return f"label {', '.join(duplicated)} given more than once"
    extra = [g for g in given if g not in labels]
    if extra:
        return f"unknown label {', '.join(extra)}"
    missing = [lb for lb in labels if lb not in given]
    return f"no value for {', '.join(missing)}" if missing else ""


@dataclass
class SetMatch:
    """Correctness: a set of names. Partial credit rewards precision first.

    The score is the fraction of the gold set named (recall) when every name given is in the gold
    set, and 0 as soon as one is not: adding a candidate one is unsure of can only lose. So an
    answer that stuffs in extra candidates scores no more than any answer that names only gold
    items (``tests/verifiers/test_set_scoring.py`` checks this over generated cases). It passes only when
    the sets are equal. F1 is reported in the details as a diagnostic.
    """

    key: str = "answer"
    field: str = "answer"
    name: str = "set_match"

    def __call__(self, task: Task, submission: dict[str, Any], episode: Any) -> Graded:
        gold = {normalize_text(str(v)) for v in task.hidden[self.key]}
        got = {normalize_text(p) for p in re.split(r"[,;\n]", submission[self.field]) if p.strip()}
        return Graded(set_score(got, gold), got == gold, f"expected {sorted(gold)}, got {sorted(got)}",
                      {"f1": f1_score(got, gold), "extra": len(got - gold), "missing": len(gold - got)})


def set_score(got: Iterable[str], gold: Iterable[str]) -> float:
    """Partial credit for a set answer: recall if nothing outside ``gold`` is named, else 0."""
    got_set, gold_set = set(got), set(gold)
    if not gold_set or not got_set or not got_set <= gold_set:
        return 1.0 if got_set == gold_set else 0.0
    return len(got_set) / len(gold_set)


def unwrap_value(text: str) -> str:
    """``"'42'"``, ``"`42`"``, ``'"42"'`` and ``"42."`` -> ``"42"``: what only dresses a value up.

    Whitespace, pairs of matching quotes or backticks around the whole text and one trailing full
    stop are removed, in any nesting (``"`42`."``). Nothing that could carry a second value is:
    ``"'4' or '2'"`` keeps its inner quotes, so it still fails to parse.
    """
    while True:
        stripped = text.strip()
        if len(stripped) >= 2 and _QUOTES.get(stripped[0]) == stripped[-1]:
            stripped = stripped[1:-1]
        elif stripped.endswith("."):
            stripped = stripped[:-1]
        if stripped == text:
            return text
        text = stripped


def split_label(text: str) -> tuple[str | None, str]:
    """``"x = 3"`` -> ``("x", "3")``, ``"3"`` -> ``(None, "3")``; both parts unwrapped.

    A label is a short identifier before ``=``; a sentence is not a label, so ``"x is 3"`` comes
    back whole (and then fails to parse as a number).
    """
    text = unwrap_value(text)
    m = _LABEL.match(text)
    return (m.group(1), unwrap_value(m.group(2))) if m else (None, text)


def parse_answer_number(text: str) -> Fraction:
    """One number as an answer writes it: an optional label, quotes, a full stop (ValueError if not)."""
    return parse_number(split_label(text)[1])
