"""Objects observed by what the test's assertion reads (issue 37 item 3, family c), decided as pytest does:

* ``x in project_object`` observes the bool alone -- all the test reads -- never the container;
* an object of a gold class with an ``__eq__`` is observed as that ``__eq__`` reads it: the compared
  attributes (``equality.eq_fields``, compiled into the probe as structure), read with ``getattr`` in
  the probe's own frame (``runtime.viewer``), so a property where the gold had an attribute, or a
  ``typing.NamedTuple`` where it had a dataclass, passes.

Every verdict is checked against real pytest, end to end on a recorded project."""

from __future__ import annotations

import ast
import json
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from probe_projects import pytest_verdicts, recorded

from envhub.verifiers.probes.compare import same_value
from envhub.verifiers.probes.compiler import compile_tests, with_views
from envhub.verifiers.probes.record import judge_on_host
from envhub.verifiers.probes.runtime import ObjectView, encode, viewer
from envhub.verifiers.probes.seal import SEALED_NAMES


def _observed(source: str) -> list[str]:
    probe = compile_tests("tests/test_m.py", textwrap.dedent(source))
    return [ast.unparse(call.args[0]) for text in probe.modules.values() for call in ast.walk(ast.parse(text))
            if isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "observe"]


def test_membership_in_a_project_object_observes_the_bool_alone() -> None:
    assert _observed('''
        from m import bag
        def test_a():
            b = bag()
            assert "k" in b
            assert 3 not in b.items()
            assert b.first() in b
    ''') == ["'k' in b", "3 not in b.items()", "b.first() in b"]


def test_the_gold_classes_are_compiled_in_only_where_as_builtin_runs() -> None:
    probe = with_views(compile_tests("tests/test_m.py", textwrap.dedent('''
        from m import Box, make
        def test_eq():
            assert make() == Box(2)
        def test_scalar():
            assert make().n == 2
    ''')), {"m.Box": ("n",)})
    assert "_envhub_viewer({'m.Box': ('n',)})" in probe.modules["test_eq"]
    assert "_envhub_viewer" not in probe.modules["test_scalar"]
    assert probe.leaks == []
    assert "viewer" not in SEALED_NAMES and "_envhub_viewer" not in SEALED_NAMES.values()


class Stored:
    def __init__(self, x: int, y: int) -> None:
        self.x, self.y, self.cache = x, y, {}


class Computed:
    def __init__(self, x: int, y: int) -> None:
        self._coords = (x, y)

    @property
    def x(self) -> int:
        return self._coords[0]

    @property
    def y(self) -> int:
        return self._coords[1]


@dataclass(frozen=True)
class Pair:
    x: int
    y: int


class Tuple2(NamedTuple):
    x: int
    y: int


def _view(value: Any, name: str) -> list:
    return encode(viewer({name: ("x", "y")})(value))


@pytest.mark.parametrize("kind", [Computed, Pair, Tuple2])
def test_a_view_reads_the_compared_fields_through_properties_and_tuples(kind: type) -> None:
    name = f"{__name__}.{{}}"
    want = _view(Stored(1, 2), name.format("Stored"))
    got = _view(kind(1, 2), name.format(kind.__qualname__))
    got[2][0][1][1] = "x.Stored"  # the same class name on both sides, as in a project
    want[2][0][1][1] = "x.Stored"
    classes = {"x.Stored": ("x", "y")}
    assert same_value(got, want, classes)
    assert not same_value(_view(kind(2, 1), name.format(kind.__qualname__)), want, classes)


def test_a_missing_field_and_a_forged_view_are_unequal() -> None:
    view = viewer({f"{__name__}.Stored": ("x", "y", "z")})(Stored(1, 2))
    assert isinstance(view, ObjectView) and set(view.fields) == {"x", "y"}
    classes = {f"{__name__}.Stored": ("x", "y", "z")}
    full = encode(ObjectView(f"{__name__}.Stored", {"x": 1, "y": 2, "z": 3}))
    assert not same_value(encode(view), full, classes)
    forged = encode(ObjectView(f"{__name__}.Stored", {1: 1}))
    assert not same_value(forged, full, classes)


# ---- end to end: a recorded project, pytest and the probes on each variant ---------------------------

GOLD = '''
from dataclasses import dataclass


class Point:
    def __init__(self, x, y):
        self.x = x
        self.y = y

    def __eq__(self, other):
        return isinstance(other, Point) and (self.x, self.y) == (other.x, other.y)

    def __hash__(self):
        return hash((self.x, self.y))


@dataclass(frozen=True)
class Span:
    start: int
    end: int


class Bag:
    def __init__(self, items):
        self.items = list(items)

    def __contains__(self, item):
        return item in self.items


def point(x, y):
    return Point(x, y)


def span(a, b):
    return Span(a, b)


def spans():
    return [Span(0, 1), Span(2, 3)]


def bag(*items):
    return Bag(items)
'''

TESTS = '''
from obj import Point, Span, bag, point, span, spans


def test_point():
    assert point(1, 2) == Point(1, 2)


def test_span():
    assert span(1, 3) == Span(1, 3)


def test_spans():
    assert spans() == [Span(0, 1), Span(2, 3)]


def test_in():
    assert 2 in bag(1, 2)


def test_not_in():
    assert 5 not in bag(1, 2)
'''

PROPERTY = '''
class Point:
    def __init__(self, x, y):
        self._xy = (x, y)

    @property
    def x(self):
        return self._xy[0]

    @property
    def y(self):
        return self._xy[1]

    def __eq__(self, other):
        return isinstance(other, Point) and (self.x, self.y) == (other.x, other.y)

    def __hash__(self):
        return hash(self._xy)
'''

NAMEDTUPLE = '''
import typing


class Span(typing.NamedTuple):
    start: int
    end: int
'''

RENAMED = '''
class Bag:
    def __init__(self, items):
        self._members = frozenset(items)

    def __contains__(self, item):
        return item in self._members
'''

VARIANTS = {
    "property": (PROPERTY, True),
    "namedtuple": (NAMEDTUPLE, True),
    "renamed private": (RENAMED, True),
    "wrong point": (PROPERTY + "\n\ndef point(x, y):\n    return Point(y, x)\n", False),
    "wrong membership": (RENAMED.replace("item in self._members", "item not in self._members"), False),
}


def _source(override: str) -> str:
    return GOLD + "\n" + override + "\n"


def _pytest_verdicts(root: Path, source: str) -> dict[str, bool]:
    return pytest_verdicts(root, 'obj', source)


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    return recorded(tmp_path_factory.mktemp('obj'), 'obj', GOLD, TESTS)


def test_the_recorded_views_hold_only_the_compared_fields(project: tuple[Path, Any]) -> None:
    _, suite = project
    assert suite.probes["tests/test_obj.py"].leaks == []
    recorded = json.dumps(suite.expected["tests/test_obj.py::test_point"])
    assert "ObjectView" in recorded and '"obj.Point"' in recorded
    assert "items" not in json.dumps(suite.expected["tests/test_obj.py::test_in"])


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_each_test_passes_the_probes_exactly_when_pytest_passes_it(project: tuple[Path, Any], name: str) -> None:
    root, suite = project
    override, correct = VARIANTS[name]
    source = _source(override)
    says = _pytest_verdicts(root, source)
    tests = sorted(suite.tests)
    assert sorted(says) == tests
    run = judge_on_host(suite, {"src/obj.py": source}, tests)
    probes = {t: run.verdicts[t].passed for t in tests}
    assert probes == says, {t: run.verdicts[t].reason for t in tests if probes[t] != says[t]}
    assert all(says.values()) == correct
