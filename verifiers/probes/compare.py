"""The trusted half of probe grading: read what the runner reported and compare it with the gold.

Standard library only (Harbor exports copy this file). Nothing here imports, calls or even
decodes into a submitted object: the runner's output is JSON, decoded into builtin lists,
strings and numbers, and compared with the expected observations recorded from the gold sources.

A test passes iff the runner reported it exactly once, with status ``ok``, and its observation
list equals the expected one: same length, the same site at every position, equal encodings
(within the recorded tolerance at an approx site; at a ``pytest.raises`` site, pytest's own rule:
:func:`raised_as_expected`). Anything else -- missing, duplicated, undecodable, extra or late
output, a different status -- fails it, with the reason.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import Any

#: longest runner output line that is decoded at all (a line past this is dropped as undecodable)
MAX_LINE_CHARS = 8 * 1024 * 1024


@dataclass
class TestVerdict:
    passed: bool
    reason: str


@dataclass
class Reported:
    """The runner's lines, indexed by test; evidence of tampering kept for the verdict's details."""

    results: dict[int, dict[str, Any]] = field(default_factory=dict)
    duplicated: set[int] = field(default_factory=set)
    undecodable: int = 0
    unknown: int = 0
    done: bool = False


def read_report(stdout: str, indices: set[int]) -> Reported:
    """Parse the runner's stdout: one JSON object per line, ``{"done": true}`` last."""
    out = Reported()
    for line in stdout.splitlines():
        if not line.strip():
            continue
        try:
            item = json.loads(line) if len(line) <= MAX_LINE_CHARS else None
        except ValueError:
            item = None
        if not isinstance(item, dict):
            out.undecodable += 1
            continue
        if item.get("done") is True and len(item) == 1:
            out.done = True
            continue
        index = item.get("index")
        if type(index) is not int or index not in indices:
            out.unknown += 1
            continue
        if index in out.results:
            out.duplicated.add(index)
        out.results[index] = item
    return out


def judge(reported: Reported, index: int, expected: dict[str, Any], rules: dict[str, dict[str, Any]]) -> TestVerdict:
    """The verdict on one test: ``expected`` is ``{"status", "observations"}`` recorded from the gold."""
    if index in reported.duplicated:
        return TestVerdict(False, "reported more than once")
    got = reported.results.get(index)
    if got is None:
        return TestVerdict(False, "no result (the run ended early or was cut)")
    status = got.get("status")
    if status != expected["status"]:
        return TestVerdict(False, f"status {str(status)[:40]}: {str(got.get('detail', ''))[:200]}")
    observed = got.get("observations")
    want = expected["observations"]
    if not isinstance(observed, list):
        return TestVerdict(False, "undecodable observations")
    if len(observed) != len(want):
        return TestVerdict(False, f"{len(observed)} observations, expected {len(want)}")
    for position, (obs, exp) in enumerate(zip(observed, want, strict=True)):
        if not (isinstance(obs, list) and len(obs) == 2 and obs[0] == exp[0]):
            return TestVerdict(False, f"observation {position} is not from the expected site")
        rule = rules.get(str(exp[0]), {})
        if isinstance(exp[1], list) and exp[1][:1] == ["raises"]:
            if not raised_as_expected(obs[1], exp[1]):
                return TestVerdict(False, f"observation {position} (site {exp[0]}): not the exception the test expects")
        elif not (_close(obs[1], exp[1], *rule["approx"]) if "approx" in rule else obs[1] == exp[1]):
            return TestVerdict(False, f"observation {position} (site {exp[0]}) differs")
    return TestVerdict(True, "observations equal the gold's")


def raised_as_expected(got: Any, want: list) -> bool:
    """``pytest.raises``'s decision, on what the sandbox observed at its site.

    ``want`` is the test's own predicate, recorded from it on the gold: ``["raises", classes, pattern,
    flags]`` -- the qualified names of the class (or classes of the tuple) it names, and its ``match=``
    pattern (None: no ``match=``). ``got`` must be ``["raised", names, text]``: the qualified names of
    the raised exception's classes, by the interpreter's MRO, and the text ``match=`` searches. Like
    ``isinstance``, any subclass of an expected class passes; then ``re.search(pattern, text, flags)``
    must find the pattern, here, where the submission never runs.
    """
    if not (isinstance(got, list) and len(got) == 3 and got[0] == "raised" and isinstance(got[1], list)):
        return False
    if not any(isinstance(name, str) and name in want[1] for name in got[1]):
        return False
    pattern, flags = want[2], want[3]
    return pattern is None or (isinstance(got[2], str) and re.search(pattern, got[2], flags) is not None)


def _close(got: Any, want: Any, rel: float, abs_: float) -> bool:
    """pytest.approx's rule on encoded values: numbers within max(rel * |want|, abs), structure equal."""
    if isinstance(want, list) and want and want[0] in ("int", "float") and len(want) == 2:
        if not (isinstance(got, list) and len(got) == 2 and got[0] in ("int", "float") and isinstance(got[1], str)):
            return False
        try:
            a, b = float(got[1]), float(want[1])
        except (OverflowError, ValueError):
            return False
        if math.isnan(a) or math.isnan(b):
            return False
        return a == b or abs(a - b) <= max(rel * abs(b), abs_)
    if isinstance(want, list):
        return isinstance(got, list) and len(got) == len(want) and \
            all(_close(g, w, rel, abs_) for g, w in zip(got, want, strict=True))
    return got == want
