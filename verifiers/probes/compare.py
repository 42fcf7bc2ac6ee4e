"""The trusted half of probe grading: read what the runner reported and compare it with the gold.

Standard library only (Harbor exports copy this file). Nothing here imports, calls or even
decodes into a submitted object: the runner's output is JSON, decoded into builtin lists,
strings and numbers, and compared with the expected observations recorded from the gold sources.

A test passes iff the runner reported it exactly once, with status ``ok``, and its observation
list equals the expected one: same length, the same site at every position, and values equal as
the test's own ``==`` would find them (:func:`same_value`; at a ``pytest.approx`` site, pytest's own
rule against the test's own call: :func:`approx_holds`; at a ``pytest.raises`` site, pytest's own
rule: :func:`raised_as_expected`).
Anything else -- missing, duplicated, undecodable, extra or late output, a different status --
fails it, with the reason.
"""

from __future__ import annotations

import builtins
import datetime
import decimal
import fractions
import functools
import json
import math
import numbers
import re
import threading
from dataclasses import dataclass, field
from typing import Any

#: qualified class name -> the attributes its ``__eq__`` compares (``equality.eq_fields``, read from
#: the gold); a class not listed compares all of its state
Classes = dict[str, tuple[str, ...]]
#: the runtime's ``ObjectView`` as the sandbox (``envhub_probe``) and the host name it
VIEWS = ("envhub_probe.ObjectView", "envhub.verifiers.probes.runtime.ObjectView")
#: expectations that are a membership test recorded per case on the gold, not an observed value
MEMBERSHIP = (["contains"], ["member_of"])

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


def judge(reported: Reported, index: int, expected: dict[str, Any], rules: dict[str, dict[str, Any]],
          classes: Classes | None = None) -> TestVerdict:
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
        failure = _site_failure(rules.get(str(exp[0]), {}), obs[1], exp[1], classes)
        if failure is not None:
            return TestVerdict(False, f"observation {position} (site {exp[0]}){failure}")
    return TestVerdict(True, "observations equal the gold's")


def _site_failure(rule: dict[str, Any], got: Any, want: Any, classes: Classes | None) -> str | None:
    """Why the observation ``got`` fails the site whose rule is ``rule`` and expectation ``want``
    (None: it passes)."""
    kind = want[:1] if isinstance(want, list) else None
    if kind == ["approx"] or "approx" in rule:
        predicate = want if kind == ["approx"] else ["approx", want, *rule["approx"]]
        return None if approx_holds(got, predicate, classes) else ": not within the test's pytest.approx"
    if "member_of" in rule or "contains" in rule or kind in MEMBERSHIP:
        if holds(rule, got, classes, want) if kind not in MEMBERSHIP else holds_as_expected(got, want, classes):
            return None
        return ": the test's `in` does not hold"
    if kind == ["raises"]:
        return None if raised_as_expected(got, want) else ": not the exception the test expects"
    return None if same_value(got, want, classes) else " differs"


def holds(rule: dict[str, Any], got: Any, classes: Classes | None = None, gold: Any = None) -> bool:
    """A membership test decided here, on the decoded observation: ``member_of`` (the observed value
    is in the test's container, by the values' own ``==``) or ``contains`` (the test's value is in
    the observed builtin container or string); ``negate`` for ``not in``. An object (not a builtin
    value) is never *not* a member by that alone -- under pytest its own ``__eq__`` would decide,
    and one equal to everything would fail -- so it must then equal the ``gold``'s observation."""
    _spent.count = 0
    try:
        if "member_of" in rule:
            value, container = _decoded(got, classes or {}, True), _decoded(rule["member_of"], classes or {})
            if rule.get("negate") and isinstance(value, _Object | _Exact):
                return gold is not None and same_value(got, gold, classes)
        else:
            value, container = _decoded(rule["contains"], classes or {}), _decoded(got, classes or {})
        found = value in container
    except (TypeError, ValueError, ArithmeticError, RecursionError, IndexError, KeyError):
        return False
    return found != bool(rule.get("negate"))


def holds_as_expected(got: Any, want: list, classes: Classes | None = None) -> bool:
    """A membership the gold's recording evaluated for this case: ``["contains" | "member_of",
    encoded value, negate]`` (an operand the test computes from its parameters)."""
    return len(want) == 3 and holds({want[0]: want[1], "negate": want[2]}, got, classes)


@functools.lru_cache(maxsize=1)
def builtin_chains() -> dict[str, tuple[str, ...]]:
    """Every builtin exception class (and ``object``) -> the qualified names of its MRO."""
    classes = [c for c in vars(builtins).values() if isinstance(c, type) and issubclass(c, BaseException)]
    return {f"builtins.{c.__qualname__}": tuple(f"{k.__module__}.{k.__qualname__}" for k in c.__mro__)
            for c in [*classes, object]}


def raised_as_expected(got: Any, want: list) -> bool:
    """``pytest.raises``'s decision, on what the sandbox observed at its site.

    ``want`` is the test's own predicate, recorded from it on the gold: ``["raises", classes, pattern,
    flags, chains]`` -- the qualified names of the class (or classes of the tuple) it names, its
    ``match=`` pattern (None: no ``match=``), and ``chains``: the MRO, by qualified name, of every
    exception class the gold's project defines and of every class in an expected class's MRO (the
    builtins' come from :func:`builtin_chains`). Those are the *known* classes. ``got`` must be
    ``["raised", names, text]``: the raised exception's MRO by qualified name (unknown classes: ones
    the submission defined, or named ``?...`` because they are not what their name leads to) and the
    text ``match=`` searches.

    Like ``isinstance``, a subclass of an expected class passes, but only one of a single branch: the
    known classes observed must all lie in the gold MRO of the most derived of them. A subclass the
    fix adds (``class EmptyError(QueueError)``) passes where ``QueueError`` is expected; a class that
    also inherits a known class from another branch -- the "subclass of everything" that a forged or
    widened exception would need -- does not. Then ``re.search(pattern, text, flags)`` must find the
    pattern, here, where the submission never runs.
    """
    if not (isinstance(got, list) and len(got) == 3 and got[0] == "raised" and isinstance(got[1], list)):
        return False
    if not all(isinstance(name, str) for name in got[1]):
        return False
    chains = {**builtin_chains(), **(want[4] if len(want) > 4 and isinstance(want[4], dict) else {})}
    known = [name for name in got[1] if name in chains]
    if not known or not set(known) <= set(chains[known[0]]):
        return False
    if not any(name in want[1] for name in known):
        return False
    pattern, flags = want[2], want[3]
    return pattern is None or (isinstance(got[2], str) and re.search(pattern, got[2], flags) is not None)


def approx_holds(got: Any, want: list, classes: Classes | None = None) -> bool:
    """``got == pytest.approx(expected, rel, abs, nan_ok)``, decided on the decoded observation:
    ``want`` is ``["approx", expected, rel, abs, nan_ok]``, each value encoded (recorded per case from
    the test's own call, or the gold's observation with the call's literal tolerances). pytest's rules,
    with Python's arithmetic on the decoded values: a ``Decimal`` expectation compares as
    ``ApproxDecimal``; a dict expectation needs the same keys and each value within tolerance; a list
    or tuple one an actual of the same length (any sequence) element by element; any other number
    is a scalar -- ``Fraction``, ``Decimal``, ``int``, ``float``, ``complex`` alike. What would raise
    under pytest (``float - Decimal``, a negative tolerance) fails, as the test would."""
    if not (isinstance(want, list) and len(want) == 5 and want[0] == "approx"):
        return False
    _spent.count = 0
    try:
        actual = _decoded(got, classes or {}, True)
        expected, rel, abs_ = (_decoded(w, {}) for w in want[1:4])
        nan_ok = want[4] is True
        if isinstance(expected, decimal.Decimal):
            return _approx_scalar(actual, expected, rel, abs_, nan_ok)
        if isinstance(expected, dict):
            return isinstance(actual, dict) and set(actual) == set(expected) and \
                all(_approx_scalar(actual[k], expected[k], rel, abs_, nan_ok) for k in expected)
        if isinstance(expected, list | tuple | range):
            return len(actual) == len(expected) and \
                all(_approx_scalar(a, x, rel, abs_, nan_ok) for a, x in zip(actual, expected, strict=False))
        if isinstance(expected, set | frozenset):  # pytest.approx refuses unordered collections
            return False
        return _approx_scalar(actual, expected, rel, abs_, nan_ok)
    except (TypeError, ValueError, ArithmeticError, RecursionError, IndexError, KeyError, AttributeError):
        return False


def _approx_scalar(actual: Any, expected: Any, rel: Any, abs_: Any, nan_ok: bool) -> bool:
    """``ApproxScalar.__eq__`` (``ApproxDecimal``'s for a ``Decimal`` expectation)."""
    if isinstance(expected, bool) and not isinstance(actual, bool):
        return False
    if actual == expected:
        return True
    if isinstance(expected, bool) or not (isinstance(expected, numbers.Complex | decimal.Decimal)
                                          and isinstance(actual, numbers.Complex | decimal.Decimal)):
        return False
    if math.isnan(abs(expected)):
        return nan_ok and math.isnan(abs(actual))
    if math.isinf(abs(expected)):
        return False
    return bool(abs(expected - actual) <= _tolerance(expected, rel, abs_))


def _tolerance(expected: Any, rel: Any, abs_: Any) -> Any:
    """``ApproxScalar.tolerance``: an absolute tolerance alone where only ``abs`` is given, else the
    larger of the two (``Decimal`` defaults for a ``Decimal`` expectation)."""
    default_abs, default_rel = (decimal.Decimal("1e-12"), decimal.Decimal("1e-6")) \
        if isinstance(expected, decimal.Decimal) else (1e-12, 1e-6)
    absolute = default_abs if abs_ is None else abs_
    if absolute < 0 or math.isnan(absolute):
        raise ValueError("a negative or NaN absolute tolerance")
    if rel is None and abs_ is not None:
        return absolute
    relative = (default_rel if rel is None else rel) * abs(expected)
    if relative < 0 or math.isnan(relative):
        raise ValueError("a negative or NaN relative tolerance")
    return max(relative, absolute)


def same_value(got: Any, want: Any, classes: Classes | None = None) -> bool:
    """Whether two encodings hold values the test's ``==`` finds equal: numbers by value (``1 ==
    1.0 == Decimal(1)``, ``True == 1``), containers element by element as Python compares them
    (a list never equals a tuple), a project object by the attributes its gold class's ``__eq__``
    compares (``classes``; every attribute where the class is not listed). The values are decoded
    into builtin ones here; nothing submitted is involved. Anything not decodable compares exactly."""
    if got == want:
        return True
    _spent.count = 0
    try:
        return bool(_decoded(got, classes or {}, True) == _decoded(want, classes or {}))
    except (TypeError, ValueError, ArithmeticError, RecursionError, IndexError, KeyError):
        return False


class _Exact:
    """An encoding compared as it is (enums, exceptions, classes, opaque and cut values)."""

    def __init__(self, encoding: Any) -> None:
        self.key = json.dumps(encoding, sort_keys=True)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Exact) and other.key == self.key

    def __hash__(self) -> int:
        return hash(self.key)


class _Object:
    """A project object: equal to another of the same class when the compared attributes are --
    those its gold class's ``__eq__`` reads, else every attribute the gold's object has (one the
    observed object has besides, such as a cache, is not the gold's business).

    Hashed by the compared attributes' values where the gold's ``__eq__`` names them, so a set or a
    dict of many objects of one class costs what its size does. Where it does not, the attributes
    compared depend on which side is the gold's, so only the class is hashed, and every comparison
    counts against :data:`EQ_BUDGET`: past it the observation is unequal (the submission's cost)."""

    def __init__(self, name: str, attrs: dict[str, Any], classes: Classes, observed: bool) -> None:
        self.name, self.attrs, self.fields, self.observed = name, attrs, classes.get(name), observed
        self._hash: int | None = None

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, _Object) or other.name != self.name:
            return False
        if self.fields is not None:
            return all(self.attrs.get(f, _MISSING) == other.attrs.get(f, _MISSING) for f in self.fields)
        _spend()
        got, want = (other, self) if other.observed and not self.observed else (self, other)
        return all(got.attrs.get(k, _MISSING) == v for k, v in want.attrs.items())

    def __hash__(self) -> int:
        if self._hash is None:
            state = () if self.fields is None else tuple(_state_hash(self.attrs.get(f, _MISSING)) for f in self.fields)
            self._hash = hash((self.name, state))
        return self._hash


#: comparisons of objects whose class has no ``__eq__`` of its own, per observation
EQ_BUDGET = 200_000
_spent = threading.local()


class _TooCostly(ValueError):
    """An observation that costs more comparisons than :data:`EQ_BUDGET` to decide."""


def _spend() -> None:
    _spent.count = getattr(_spent, "count", 0) + 1
    if _spent.count > EQ_BUDGET:
        raise _TooCostly(f"deciding this observation took over {EQ_BUDGET} object comparisons")


def _state_hash(value: Any) -> int:
    """A hash that values ``==`` finds equal share: containers by their members' (a set by its
    members, a list and a tuple apart, as ``==`` keeps them), numbers as Python hashes them."""
    if isinstance(value, set | frozenset):
        return hash(frozenset(value))
    if isinstance(value, list | tuple):
        return hash((type(value) is list, *(_state_hash(v) for v in value)))
    if isinstance(value, dict):
        return hash(frozenset((k, _state_hash(v)) for k, v in value.items()))
    try:
        return hash(value)
    except TypeError:
        return 0


_MISSING = _Exact(["missing"])
_SCALARS: dict[str, Any] = {
    "None": lambda e: None, "bool": lambda e: bool(e[1]), "int": lambda e: int(e[1]), "float": lambda e: float(e[1]),
    "complex": lambda e: complex(float(e[1]), float(e[2])), "str": lambda e: str(e[1]),
    "bytes": lambda e: bytes.fromhex(e[1]), "bytearray": lambda e: bytearray.fromhex(e[1]),
    "Decimal": lambda e: decimal.Decimal(e[1]), "Fraction": lambda e: fractions.Fraction(int(e[1]), int(e[2])),
    "date": lambda e: datetime.date.fromisoformat(e[1]),
    "timedelta": lambda e: datetime.timedelta(e[1], e[2], e[3]), "range": lambda e: range(e[1], e[2], e[3]),
}


def _decoded(enc: Any, classes: Classes, observed: bool = False) -> Any:
    """The builtin value an encoding stands for (``observed``: the submission's side)."""
    if not (isinstance(enc, list) and enc and isinstance(enc[0], str)):
        raise ValueError("not an encoding")
    kind = enc[0]
    if kind in _SCALARS:
        return _SCALARS[kind](enc)
    if kind in ("datetime", "time") and len(enc) == 2:
        return getattr(datetime, kind).fromisoformat(enc[1])
    if kind in ("list", "tuple"):
        items = [_decoded(v, classes, observed) for v in enc[1]]
        return items if kind == "list" else tuple(items)
    if kind in ("set", "frozenset"):
        members = (_decoded(v, classes, observed) for v in enc[1])
        return frozenset(members) if kind == "frozenset" else set(members)
    if kind == "dict":
        return {_decoded(k, classes, observed): _decoded(v, classes, observed) for k, v in enc[1]}
    if kind == "object" and len(enc) == 3:
        attrs = dict(enc[2])
        if enc[1] in VIEWS and set(attrs) == {"cls", "fields"}:  # runtime.ObjectView: a gold class's ``__eq__``
            name, fields = _decoded(attrs["cls"], {}), _decoded(attrs["fields"], classes, observed)  # fields
            if not (isinstance(name, str) and isinstance(fields, dict) and all(isinstance(f, str) for f in fields)):
                raise ValueError("not a view")
            return _Object(name, fields, classes, observed)
        base = [k for k in attrs if k.startswith("(") and k.endswith(")")]
        if base and enc[1] not in classes:  # a namedtuple, an OrderedDict: compared as the builtin's
            return _decoded(attrs[base[0]], classes, observed)  # own data (its methods never ran)
        return _Object(enc[1], {k: _decoded(v, classes, observed) for k, v in attrs.items()}, classes, observed)
    return _Exact(enc)
