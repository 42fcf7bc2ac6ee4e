"""Compound assertions and the test's own ``==``: observed operand by operand with every expected
value deleted from the probe, decided on the trusted side as pytest would -- numbers by value, an
object by the attributes its gold class's ``__eq__`` compares, ``in`` on the decoded observation.

A small project is recorded on its gold, then graded in three forms: a correct fix written
differently (a float for an int, extra private state, another member of the expected set, a
longer message) passes; an object equal to everything and a wrong answer fail."""

from __future__ import annotations

import ast
import textwrap
from collections import Counter
from decimal import Decimal
from pathlib import Path

import pytest

from envhub.verifiers.probes.assertions import constants_of, leaked_constants
from envhub.verifiers.probes.compare import holds, same_value
from envhub.verifiers.probes.compiler import compile_tests
from envhub.verifiers.probes.equality import eq_fields
from envhub.verifiers.probes.record import judge_on_host, record_project
from envhub.verifiers.probes.runtime import encode

SOURCE = '''
import pytest
from geo import Bag, Point, distance, label, origin, scaled, status


def test_point_equals_under_its_own_eq():
    assert origin() == Point(0, 0)


def test_numbers_compare_by_value():
    assert distance(3, 4) == 5


def test_boolean_operators():
    p = scaled(2)
    assert p.x == 1400 and p.y == 1600
    assert not (p.x == 9901) or p.y == 9902


def test_quantifiers():
    assert all(scaled(k).x == v for k, v in [(1, 700), (3, 2100)])
    assert any([label(1) == "ONE-LABEL", label(2) == "TWO-LABEL"])


def test_chained_comparison():
    assert 0 < distance(6, 8) < 11


def test_membership():
    assert status() in ("READY-STATE", "DONE-STATE")
    assert "WORD-FRAG" in str(label(3))
    assert "z" not in Bag("ab")


@pytest.mark.parametrize("n, word", [(3, "WORD-FRAG"), (1, "ONE-LABEL")])
def test_computed_membership(n, word):
    assert f"{word}" in str(label(n))
'''

GOLD = '''
class Point:
    def __init__(self, x, y):
        self.x, self.y = x, y

    def __eq__(self, other):
        return isinstance(other, Point) and self.x == other.x and self.y == other.y


class Bag:
    def __init__(self, text):
        self.text = text

    def __contains__(self, item):
        return item in self.text


def origin():
    return Point(0, 0)


def distance(a, b):
    return int((a * a + b * b) ** 0.5)


def scaled(k):
    return Point(700 * k, 800 * k)


def label(n):
    return {1: "ONE-LABEL", 2: "TWO-LABEL", 3: "the WORD-FRAG here"}[n]


def status():
    return "READY-STATE"
'''

#: correct, in another form than the gold: pytest passes every test on it
VARIANT = (GOLD.replace("        self.x, self.y = x, y", "        self.x, self.y = x, y\n        self._seen = 0")
           .replace("return int((a * a + b * b) ** 0.5)", "return (a * a + b * b) ** 0.5")
           .replace('"the WORD-FRAG here"', '"a longer WORD-FRAG text"')
           .replace('return "READY-STATE"', 'return "DONE-STATE"'))
#: everything compares equal and contains everything
ALWAYS = '''
class Everything:
    def __eq__(self, other):
        return True

    def __lt__(self, other):
        return True

    def __gt__(self, other):
        return True

    def __contains__(self, item):
        return True

    def __str__(self):
        return "nothing"

    x = y = property(lambda self: Everything())


Point = Bag = lambda *a: Everything()
origin = distance = scaled = label = status = lambda *a: Everything()
'''
WRONG = GOLD.replace("return Point(700 * k, 800 * k)", "return Point(700 * k + 1, 800 * k)")
SECRETS = ("1400", "1600", "9901", "9902", "700", "2100", "ONE-LABEL", "TWO-LABEL", "READY-STATE", "DONE-STATE", "WORD-FRAG")


@pytest.fixture(scope="module")
def suite(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("geo")
    (root / "src").mkdir()
    (root / "tests").mkdir()
    (root / "src" / "geo.py").write_text(textwrap.dedent(GOLD))
    (root / "tests" / "test_geo.py").write_text(SOURCE)
    recorded = record_project(root, {"src/geo.py": GOLD}, {"tests/test_geo.py": SOURCE})
    recorded.classes = eq_fields({"src/geo.py": GOLD})
    return recorded


def test_no_expected_value_reaches_the_probe(suite) -> None:
    probe = suite.probes["tests/test_geo.py"]
    assert probe.leaks == []
    for function, text in probe.modules.items():
        body = text.split("\n", 2)[2]  # after the imports
        for secret in SECRETS:
            assert secret not in body, (function, secret, body)
    assert "for k in [1, 3]:" in probe.modules["test_quantifiers"]  # the expected column is gone
    rules = [r for r in probe.sites.values() if r]
    assert {"member_of": encode(("READY-STATE", "DONE-STATE")), "negate": False} in rules
    assert {"contains": encode("WORD-FRAG"), "negate": False} in rules
    assert "@cases('n', [3, 1])" in probe.modules["test_computed_membership"]  # the word column is gone
    computed = [e for segments in suite.expected.values() for seg in segments for _, e in seg["observations"]
                if e[0] == "contains"]
    assert sorted(computed) == [["contains", encode("ONE-LABEL"), False], ["contains", encode("WORD-FRAG"), False]]


def test_a_correct_fix_in_another_form_passes_and_cheats_and_bugs_fail(suite) -> None:
    tests = sorted(suite.tests)
    assert judge_on_host(suite, {"src/geo.py": GOLD}, tests).all_passed(tests)
    variant = judge_on_host(suite, {"src/geo.py": VARIANT}, tests)
    assert variant.all_passed(tests), {t: v.reason for t, v in variant.verdicts.items() if not v.passed}
    cheat = judge_on_host(suite, {"src/geo.py": ALWAYS}, tests)
    assert cheat.passed(tests) == [], {t: v.reason for t, v in cheat.verdicts.items() if v.passed}
    wrong = judge_on_host(suite, {"src/geo.py": WRONG}, tests)
    assert sorted(t.split("::")[-1] for t in wrong.failed()) == ["test_boolean_operators", "test_quantifiers"]


def test_values_compare_as_the_tests_own_equality() -> None:
    for a, b in ((3, 3.0), (3, Decimal("3.0")), (True, 1), ({"a": [1, 2]}, {"a": [1.0, 2]}), ({1, 2}, {2.0, 1})):
        assert same_value(encode(a), encode(b)), (a, b)
    for a, b in (([1, 2], (1, 2)), ("1", 1), (3, 3.5), ({"a": 1}, {"b": 1}), (None, 0)):
        assert not same_value(encode(a), encode(b)), (a, b)
    nan = float("nan")
    assert same_value(encode([nan]), encode([nan]))  # identical encodings: the gold's own value
    assert holds({"member_of": encode(["a", 2])}, encode(2.0))
    assert not holds({"member_of": encode(["a", 2]), "negate": True}, encode(2.0))
    assert holds({"contains": encode("frag")}, encode("a frag here"))
    assert not holds({"contains": encode("frag")}, encode(["opaque", "x.Y"]))

    class Everything:
        def __eq__(self, other: object) -> bool:
            return True

    # `x not in (...)`: an object is no non-member by itself (pytest would ask its __eq__), only as the gold's
    absent = {"member_of": encode(("FAILED",)), "negate": True}
    assert holds(absent, encode("OK")) and not holds(absent, encode("FAILED"))
    assert not holds(absent, encode(Everything()), gold=encode("OK"))
    assert holds(absent, encode(Everything()), gold=encode(Everything()))


def test_eq_fields_reads_what_each_class_compares() -> None:
    source = textwrap.dedent('''
        from dataclasses import dataclass, field

        @dataclass(frozen=True)
        class Row:
            key: str
            note: str = field(default="", compare=False)
            total: int = 0

        @dataclass
        class Wide(Row):
            extra: int = 0

        class Version:
            def __init__(self, major, minor):
                self.major, self.minor, self._cache = major, minor, None

            def _key(self):
                return (self.major, self.minor)

            def __eq__(self, other):
                return isinstance(other, Version) and self._key() == other._key()

        class Patch(Version):
            pass

        class Loose:
            def __eq__(self, other):
                return vars(self) == vars(other)
    ''')
    assert eq_fields({"src/pkg/model.py": source}) == {
        "pkg.model.Row": ("key", "total"), "pkg.model.Wide": ("key", "total", "extra"),
        "pkg.model.Version": ("major", "minor"), "pkg.model.Patch": ("major", "minor")}  # Loose: all its state


def test_a_constant_the_test_only_expected_is_found_if_a_probe_keeps_it() -> None:
    original = ast.parse("def test_a():\n    assert f(2) == 'SECRET-VALUE'\n").body[0]
    leaking = ast.parse("def test_a():\n    observe(f(2) == 'SECRET-VALUE', 0)\n").body[0]
    clean = ast.parse("def test_a():\n    observe(f(2), 7)\n").body[0]
    expected = Counter({("str", "SECRET-VALUE"): 1})
    everywhere = Counter(constants_of(original))
    assert leaked_constants(everywhere, expected, [leaking]) == ["SECRET-VALUE"]  # type: ignore[list-item]
    assert leaked_constants(everywhere, expected, [clean]) == []  # type: ignore[list-item]
    probe = compile_tests("t.py", "def test_a():\n    assert f(2) == 'SECRET-VALUE' and g() in ('A-1', 'B-2')\n")
    assert probe.leaks == [] and "SECRET" not in probe.modules["test_a"] and "A-1" not in probe.modules["test_a"]


def test_the_recorded_suite_of_every_project_keeps_no_expected_value(tmp_path: Path) -> None:
    """The CI scan: every project's compiled probes, against its tests' expected-only constants."""
    from envhub.tasks.code_repair.manifest import PROJECTS_DIR
    from envhub.tasks.code_repair.workspace import project_tests

    projects = sorted(p.name for p in PROJECTS_DIR.iterdir() if (p / "project.json").exists())
    assert len(projects) >= 20
    for name in projects:
        for path, text in project_tests(name).items():
            assert compile_tests(path, text).leaks == [], (name, path)
