"""A check for answers that are Python literals (``None``, ``0o666``, ``'utf-8'``), as read out of docs.

It complements :mod:`envhub.verifiers.checks`. Like those, its parser is strict: an answer that
hedges ("None or 0") or pastes a paragraph is simply not equal to any literal, so answer stuffing
cannot collect credit. (Retrieval's evidence recall, a metric only that family has, lives with it:
:mod:`envhub.tasks.retrieval.evidence`.)
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from envhub import safe_ast
from envhub.types import Task
from envhub.verifiers.checks import numbers_close
from envhub.verifiers.layered import Graded

_MISSING = object()
_KEYWORDS = {"none": None, "true": True, "false": False}
_DECIMAL_POINT_END = re.compile(r"^[+-]?\d+\.$")


def parse_literal(text: str) -> Any:
    """What an answer means as a Python value.

    ``None``/``True``/``False`` (any case), numbers in any Python spelling (``438``, ``0o666``,
    ``1e-9``) and quoted strings are parsed as literals; any other text stands for itself as a
    bare string (so ``utf-8`` and ``'utf-8'`` are the same answer). Surrounding backticks and a
    trailing full stop are dropped; nothing else is forgiven.
    """
    s = text.strip()
    if s.endswith(".") and not _DECIMAL_POINT_END.match(s):  # "None." is a sentence; "1." a float
        s = s[:-1].rstrip()
    s = s.strip("`").strip()
    if s.casefold() in _KEYWORDS:
        return _KEYWORDS[s.casefold()]
    try:
        value = safe_ast.literal_eval(s)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return s
    return value if value is None or isinstance(value, bool | int | float | str) else s


def literals_equal(got: Any, gold: Any) -> bool:
    """Type-aware equality: ``True`` is not ``1``, ``1`` equals ``1.0``, strings compare exactly."""
    if gold is None or isinstance(gold, bool):
        return got is gold
    if isinstance(gold, int | float):
        return isinstance(got, int | float) and not isinstance(got, bool) and _numbers_close(got, gold)
    return isinstance(got, str) and got == gold


def _numbers_close(got: int | float, gold: int | float) -> bool:
    """Equal to a relative 1e-12, exactly: an integer too large for a float is fine."""
    if any(isinstance(v, float) and not math.isfinite(v) for v in (got, gold)):
        return got == gold  # inf equals only itself; nan nothing
    return numbers_close(Fraction(got), Fraction(gold), 1e-12, 0.0)


@dataclass
class LiteralMatch:
    """Correctness: the answer denotes the same Python literal as ``task.hidden[key]`` (its repr)."""

    key: str = "answer"
    field: str = "answer"
    name: str = "literal_match"

    def __call__(self, task: Task, submission: dict[str, Any], episode: Any) -> Graded:
        gold = safe_ast.literal_eval(str(task.hidden[self.key]))
        got = parse_literal(submission[self.field])
        ok = literals_equal(got, gold)
        return Graded(1.0 if ok else 0.0, ok, f"expected {task.hidden[self.key]}, got {submission[self.field]!r}")

