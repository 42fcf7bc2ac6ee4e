"""Two families of correct fixes the probes once rejected (issue 37 item 3), decided as pytest does:

* numbers ``pytest.approx`` accepts that are not int or float -- an exact ``Fraction``, a ``Decimal``
  -- and numeric containers, against the test's own ``approx`` call (its expected value, ``rel``,
  ``abs`` and ``nan_ok``, recorded per case on the gold);
* containers equal to a builtin dict, list or set under the container protocol (a ``Mapping``, a
  ``Set``, ``UserList``, a ``mappingproxy``, a dict's keys view), rebuilt from builtins in the probe's
  own frame (``runtime.as_builtin``) -- never by the sealed runtime, never by the trusted side.

Every verdict is checked against real pytest: in-process against ``==`` and ``pytest.approx`` for
single values, and end to end (a recorded project, pytest on each variant) for whole tests."""

from __future__ import annotations

import collections
import math
import types
from collections.abc import Mapping, Sequence, Set
from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
from probe_projects import pytest_verdicts, recorded

from envhub.verifiers.probes.compare import approx_holds, same_value
from envhub.verifiers.probes.compiler import TEXT_NAMES
from envhub.verifiers.probes.record import judge_on_host
from envhub.verifiers.probes.runtime import as_builtin, encode
from envhub.verifiers.probes.seal import SEALED_NAMES


class Table(Mapping):
    def __init__(self, data: dict) -> None:
        self._data = data

    def __getitem__(self, key: Any) -> Any:
        return self._data[key]

    def __iter__(self) -> Any:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)


class Row(Sequence):
    def __init__(self, items: list) -> None:
        self._items = items

    def __getitem__(self, index: Any) -> Any:
        return self._items[index]

    def __len__(self) -> int:
        return len(self._items)


class Members(Set):
    def __init__(self, items: Any) -> None:
        self._items = frozenset(items)

    def __contains__(self, item: Any) -> bool:
        return item in self._items

    def __iter__(self) -> Any:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)


class Everything:
    def __eq__(self, other: object) -> bool:
        return True

    __hash__ = object.__hash__


def _pytest_says(check: Any) -> bool:
    try:
        return bool(check())
    except Exception:  # the assertion would raise: the test fails
        return False


EQUAL_CASES = [
    (Table({"a": 1, "b": [1, 2]}), {"a": 1, "b": [1, 2]}),
    (Table({"a": 1}), {"a": 2}),
    (Table({"a": 1}), [("a", 1)]),
    (collections.UserDict(a=1), {"a": 1}),
    (types.MappingProxyType({"a": 1}), {"a": 1}),
    ({"k": Table({"x": collections.UserList([1, 2])})}, {"k": {"x": [1, 2]}}),
    ([Table({"a": 1}), collections.UserList([3])], [{"a": 1}, [3]]),
    ((Table({"a": 1}),), ({"a": 1},)),
    (Row([1, 2]), [1, 2]),  # a Sequence has no list equality
    (Row([1, 2]), (1, 2)),
    (collections.UserList([1, 2]), [1, 2]),
    (collections.UserList([1, 2]), (1, 2)),
    (collections.UserString("ab"), "ab"),
    (Members({1, 2}), {1, 2}),
    (Members({1, 2}), frozenset({1, 2})),
    (Members({1, 2}), {1, 2, 3}),
    (Members({1, 2}), [1, 2]),
    ({1: "a", 2: "b"}.keys(), {1, 2}),
    ({1: "a"}.items(), {(1, "a")}),
    ({1: "a"}.values(), ["a"]),  # values views compare by identity
    (collections.OrderedDict(a=1), {"a": 1}),
    ((1, 2), [1, 2]),
]


@pytest.mark.parametrize(("actual", "expected"), EQUAL_CASES, ids=[f"{type(a).__name__}-{i}" for i, (a, _) in
                                                                   enumerate(EQUAL_CASES)])
def test_containers_compare_as_pytest_compares_them(actual: Any, expected: Any) -> None:
    """The probe's verdict (the gold's expected value and the submission's actual one, each rebuilt
    in the probe's frame, encoded, compared on the trusted side) is pytest's ``actual == expected``."""
    probe = same_value(encode(as_builtin(actual)), encode(as_builtin(expected)))
    assert probe == _pytest_says(lambda: actual == expected)


def test_an_object_equal_to_everything_is_still_what_it_is() -> None:
    for expected in ({"a": 1}, [1], {1}):
        assert Everything() == expected  # pytest would pass it
        assert not same_value(encode(as_builtin(Everything())), encode(expected))
        assert not same_value(encode(as_builtin([Everything()])), encode([expected]))


def test_rebuilding_leaves_builtin_values_alone() -> None:
    value = {"a": [1, (2, 3)], "b": {4}}
    assert as_builtin(value) is value and as_builtin(value, True) is value
    cycle: list = []
    cycle.append(cycle)
    assert as_builtin(cycle) is cycle  # bounded by the encoder's depth


APPROX_CASES = [
    (Fraction(3, 4), 0.75, {}),
    (Fraction(1, 3), 1 / 3, {}),  # exact, not equal to the float, within its tolerance
    (Fraction(1, 3), 0.3333, {}),
    (Fraction(1, 3), 0.3333, {"rel": 1e-3}),
    (Decimal("0.75"), 0.75, {}),  # equal: no arithmetic
    (Decimal("0.7500001"), 0.75, {}),  # float - Decimal raises under pytest
    (Decimal("1.5000001"), Decimal("1.5"), {}),
    (1.5, Decimal("1.5"), {}),
    (1.5000001, Decimal("1.5"), {}),
    (10.4, 10.0, {"abs": 0.5}),  # abs alone: no relative tolerance
    (10.6, 10.0, {"abs": 0.5}),
    (10.6, 10.0, {"abs": 0.5, "rel": 0.1}),
    (0.1 + 0.2, 0.3, {}),
    (True, 1.0, {}),
    (1.0, True, {}),
    (math.nan, math.nan, {}),
    (math.nan, math.nan, {"nan_ok": True}),
    (math.inf, math.inf, {}),
    (1e300, math.inf, {}),
    (complex(1, 1e-9), complex(1, 0), {}),
    ((0.1, 0.2000000001), [0.1, 0.2], {}),  # any sequence of the same length
    (Row([Fraction(1, 10), 0.2]), [0.1, 0.2], {}),
    ([0.1], [0.1, 0.2], {}),
    ({"a": Fraction(1, 2), "b": 0.25000001}, {"a": 0.5, "b": 0.25}, {}),
    (Table({"a": 0.5, "b": 0.25}), {"a": 0.5, "b": 0.25}, {}),
    (collections.UserDict(a=0.5), {"a": 0.5, "b": 0.25}, {}),
    ({"a": 0.5}, [0.5], {}),
    ([0.5], {"a": 0.5}, {}),
    ("0.5", 0.5, {}),
    (Everything(), 0.5, {}),  # pytest passes the cheat; the probes do not
]


@pytest.mark.parametrize(("actual", "expected", "options"), APPROX_CASES,
                         ids=[f"{type(a).__name__}-{i}" for i, (a, _, _) in enumerate(APPROX_CASES)])
def test_approx_sites_decide_as_pytest_approx(actual: Any, expected: Any, options: dict[str, Any]) -> None:
    recorded = ["approx", encode(expected), encode(options.get("rel")), encode(options.get("abs")),
                bool(options.get("nan_ok", False))]
    probe = approx_holds(encode(as_builtin(actual, True)), recorded)
    says = _pytest_says(lambda: actual == pytest.approx(expected, **options))
    assert probe == (says and not isinstance(actual, Everything))


def test_the_rebuilding_runs_in_the_probes_frame_not_the_sealed_runtime() -> None:
    assert TEXT_NAMES["as_builtin"] not in SEALED_NAMES and "as_builtin" not in SEALED_NAMES.values()


# ---- end to end: a recorded project, pytest and the probes on each variant ---------------------------

TESTS = '''
from decimal import Decimal

import pytest
from fam import value


def test_mapping():
    assert value("mapping") == {"a": 1, "b": [1, 2]}


def test_nested():
    assert {"k": [1, 2], "n": 3} == value("nested")


def test_list():
    assert value("list") == [1, 2, 3]


def test_set():
    assert value("set") == {1, 2}


def test_ratio():
    assert value("ratio") == pytest.approx(0.75)


def test_third():
    assert value("third") == pytest.approx(1 / 3)


def test_near():
    assert value("near") == pytest.approx(10.0, abs=0.5)


def test_decimal():
    assert value("dec") == pytest.approx(Decimal("1.5"))


def test_series():
    assert value("series") == pytest.approx([0.1, 0.2])


def test_weights():
    assert pytest.approx({"a": 0.5, "b": 0.25}) == value("weights")


@pytest.mark.parametrize("name, want", [("p1", 0.5), ("p2", 0.25)])
def test_param(name, want):
    assert value(name) == pytest.approx(want, rel=1e-3)
'''

GOLD = '''
from decimal import Decimal

TABLE = {"mapping": {"a": 1, "b": [1, 2]}, "nested": {"k": [1, 2], "n": 3}, "list": [1, 2, 3], "set": {1, 2},
         "ratio": 3 / 4, "third": 1 / 3, "near": 10.0, "dec": Decimal("1.5"), "series": [0.1, 0.2],
         "weights": {"a": 0.5, "b": 0.25}, "p1": 0.5, "p2": 0.25}


def value(name):
    return TABLE[name]
'''

HELPERS = '''
import collections
import collections.abc
import types
from fractions import Fraction


class Table(collections.abc.Mapping):
    def __init__(self, data):
        self._data = dict(data)

    def __getitem__(self, key):
        return self._data[key]

    def __iter__(self):
        return iter(self._data)

    def __len__(self):
        return len(self._data)


class Row(collections.abc.Sequence):
    def __init__(self, items):
        self._items = list(items)

    def __getitem__(self, index):
        return self._items[index]

    def __len__(self):
        return len(self._items)


class Members(collections.abc.Set):
    def __init__(self, items):
        self._items = frozenset(items)

    def __contains__(self, item):
        return item in self._items

    def __iter__(self):
        return iter(self._items)

    def __len__(self):
        return len(self._items)
'''

#: each variant overrides some values of the gold's table; which tests pytest passes is found by running it
VARIANTS = {
    "protocol forms": {
        "mapping": 'Table({"a": 1, "b": collections.UserList([1, 2])})',
        "nested": 'types.MappingProxyType({"k": collections.UserList([1, 2]), "n": 3})',
        "list": "collections.UserList([1, 2, 3])",
        "set": "{1: None, 2: None}.keys()",
        "ratio": "Fraction(3, 4)",
        "third": "Fraction(1, 3)",
        "near": "10.4",
        "dec": 'Decimal("1.5000001")',
        "series": "Row([Fraction(1, 10), 0.2000000001])",
        "weights": 'Table({"a": Fraction(1, 2), "b": 0.25})',
        "p1": "Fraction(1, 2)",
        "p2": 'Decimal("0.25")',
    },
    "forms pytest rejects": {
        "mapping": 'Table({"a": 1, "b": Row([1, 2])})',
        "nested": '{"k": (1, 2), "n": 3}',
        "list": "Row([1, 2, 3])",
        "set": "Members({1, 2, 3})",
        "ratio": 'Decimal("0.7500001")',
        "third": "Fraction(1, 3) + Fraction(1, 1000)",
        "near": "10.6",
        "dec": "1.5000001",
        "series": "Row([0.1])",
        "weights": 'collections.UserDict(a=0.5)',
        "p1": "Fraction(2, 3)",
        "p2": '"0.25"',
    },
    "mixed": {
        "mapping": 'collections.UserDict({"a": 1, "b": [1, 2]})',
        "set": "Members({2, 1})",
        "list": "(1, 2, 3)",
        "ratio": 'Decimal("0.75")',
        "series": "(0.1, 0.2)",
        "weights": '{"b": 0.25, "a": Fraction(1, 2)}',
        "p2": "Fraction(1, 4)",
    },
}


def _variant(overrides: dict[str, str]) -> str:
    lines = "".join(f"TABLE[{key!r}] = {expr}\n" for key, expr in overrides.items())
    return GOLD + HELPERS + lines


def _pytest_verdicts(root: Path, source: str) -> dict[str, bool]:
    return pytest_verdicts(root, 'fam', source)


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    return recorded(tmp_path_factory.mktemp('fam'), 'fam', GOLD, TESTS)


def test_the_approx_call_is_recorded_per_case_and_never_reaches_the_probe(project: tuple[Path, Any]) -> None:
    _, suite = project
    probe = suite.probes["tests/test_fam.py"]
    assert probe.leaks == []
    assert "0.25" not in probe.modules["test_param"] and "want" not in probe.modules["test_param"]
    recorded = {test.split("::")[-1]: seg["observations"][0][1] for test, segs in suite.expected.items()
                for seg in segs}
    assert recorded["test_param[p2-0.25]"] == ["approx", encode(0.25), encode(1e-3), ["None"], False]
    assert recorded["test_near"] == ["approx", encode(10.0), ["None"], encode(0.5), False]


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_each_test_passes_the_probes_exactly_when_pytest_passes_it(project: tuple[Path, Any], name: str) -> None:
    root, suite = project
    source = _variant(VARIANTS[name])
    says = _pytest_verdicts(root, source)
    tests = sorted(suite.tests)
    assert sorted(says) == tests
    run = judge_on_host(suite, {"src/fam.py": source}, tests)
    probes = {t: run.verdicts[t].passed for t in tests}
    assert probes == says, {t: run.verdicts[t].reason for t in tests if probes[t] != says[t]}
    if name == "forms pytest rejects":
        assert not any(says.values())
    if name == "protocol forms":
        assert all(says.values())


def test_an_object_equal_to_everything_fails_where_pytest_would_pass_it(project: tuple[Path, Any]) -> None:
    root, suite = project
    cheat = GOLD + "\n\nclass Everything:\n    def __eq__(self, other):\n        return True\n\n\n" \
                   "def value(name):\n    return Everything()\n"
    says = _pytest_verdicts(root, cheat)  # only the approx that asks for keys() sees through it
    assert [t for t, passed in says.items() if not passed] == ["tests/test_fam.py::test_weights"]
    tests = sorted(suite.tests)
    assert judge_on_host(suite, {"src/fam.py": cheat}, tests).passed(tests) == []
