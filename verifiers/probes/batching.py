"""Which probe functions may share one child: none may hold a value that another one expects.

A child imports the probe modules of its batch, so everything in them -- rows, constants,
helpers -- is in reach of the submission while any test of the batch runs. One test's inputs can
be another test's expected values (``to_roman(14)`` and ``from_roman("XIV")`` share a table), so
functions go into one batch only when no constant of one's module equals a value that the gold
observed for the other, or that one of its ``pytest.raises`` expects (a class name, a ``match=``
pattern; checked both ways, on the recorded observations), unless the other's own module holds that
constant too (a child adds nothing to what is in reach of a test already), and the segments of one
test never share a batch (they were split to keep each other's data apart). Values anyone could
guess -- booleans, None, the integers -1..10, strings of at most one character -- do not count.

Trusted side only; deterministic, so a plan is the same wherever it is made.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from typing import Any

from envhub import safe_ast

from .compare import VIEWS

TRIVIAL = frozenset({"True", "False", "None", *(str(n) for n in range(-1, 11))})


def _meaningful(text: str) -> bool:
    return len(text) > 1 and text not in TRIVIAL


def constants(source: str) -> set[str]:
    """Every literal of a probe module, as text (numbers as ``str``/``repr``, as observations write them)."""
    out: set[str] = set()
    for node in ast.walk(safe_ast.parse(source)):
        if isinstance(node, ast.Constant) and not isinstance(node.value, bytes | bool) and node.value is not None:
            value = node.value
            out.add(repr(value) if isinstance(value, float) else str(value))
    return {c for c in out if _meaningful(c)}


def _leaves(encoded: Any) -> Iterator[str]:
    if isinstance(encoded, str):
        yield encoded
    elif isinstance(encoded, list) and encoded[:1] == ["raises"]:  # a pytest.raises predicate: classes, pattern
        yield from (v for v in [*encoded[1], encoded[2]] if isinstance(v, str))
    elif isinstance(encoded, list) and len(encoded) == 3 and encoded[:1] == ["object"] and encoded[1] in VIEWS:
        # an ObjectView: its class and field names are compiled into every probe (structure, not values)
        for name, value in encoded[2] if isinstance(encoded[2], list) else []:
            if name == "fields" and isinstance(value, list) and value[:1] == ["dict"] and len(value) == 2:
                for _, field_value in value[1]:
                    yield from _leaves(field_value)
    elif isinstance(encoded, list):
        rest = encoded[1:] if encoded and isinstance(encoded[0], str) else encoded  # skip the type tag
        for item in rest:
            yield from _leaves(item)


def expected_values(observations: Iterable[list[Any]]) -> set[str]:
    """The values in a list of ``[site, encoded]`` observations (type tags and sites left out)."""
    return {leaf for _, encoded in observations for leaf in _leaves(encoded) if _meaningful(leaf)}


def group(functions: list[str], sources: dict[str, str], expected: dict[str, set[str]],
          test_of: dict[str, str]) -> list[list[str]]:
    """Greedy batches of ``functions`` (in order): a function joins the first batch where it conflicts
    with no member -- neither side's constants meet the other's expected values, beyond the constants
    the other's own module holds (the field table of object views is in every probe, for one), and
    they are not segments of one test (``test_of``)."""
    consts = {f: constants(sources[f]) for f in functions}

    def reveals(giver: str, taker: str) -> bool:  # what the taker's own module holds is in its reach already
        return bool((consts[giver] - consts[taker]) & expected[taker])

    batches: list[list[str]] = []
    for function in functions:
        for batch in batches:
            if all(test_of[m] != test_of[function] and not reveals(m, function) and not reveals(function, m)
                   for m in batch):
                batch.append(function)
                break
        else:
            batches.append([function])
    return batches
