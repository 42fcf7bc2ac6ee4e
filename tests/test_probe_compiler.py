"""The probe compiler: hidden pytest tests become probes that hold inputs and calls, never expected values."""

from __future__ import annotations

import ast

import pytest

from envhub.tasks.code_repair.manifest import PROJECTS_DIR
from envhub.tasks.code_repair.workspace import project_tests
from envhub.verifiers.probes.compiler import ProbeCompileError, compile_tests

SAMPLE = '''
import pytest
from decimal import Decimal
from shop import price, Basket, parse

TAX = Decimal("0.19")
EXPECTED_TOTALS = {"a": "SECRET-TOTAL-A"}
KNOWN = [(1, "SECRET-ONE"), (2, "SECRET-TWO")]


def reference(x):
    return "SECRET-REFERENCE"


@pytest.fixture
def basket():
    return Basket(["apple"])


@pytest.mark.parametrize("code, expected", [("a", "SECRET-PARAM-A"), pytest.param("b", "SECRET-PARAM-B", id="b")])
def test_price(code, expected):
    assert price(code) == expected


@pytest.mark.parametrize(("number", "name"), KNOWN)
def test_name(number, name):
    assert parse(number) == name


@pytest.mark.parametrize(("number", "name"), KNOWN)
def test_number(number, name):
    assert name == parse(number, reverse=True)


def test_totals(basket):
    want = ["SECRET-LOCAL"]
    assert basket.totals() == want
    assert basket.total("a") == EXPECTED_TOTALS["a"]
    assert basket.total("b") == reference("b"), "SECRET-MESSAGE"
    assert 0 < basket.weight() <= 10
    assert basket.first() < basket.last()
    assert not basket.empty()
    assert basket.ratio() == pytest.approx(0.25, rel=1e-3)


def test_errors():
    with pytest.raises(ValueError, match="SECRET-PATTERN"):
        price("zz")
    with pytest.raises(KeyError):
        price("")
'''


def _functions(source: str) -> dict[str, str]:
    return {n.name: ast.unparse(n) for n in ast.parse(source).body if isinstance(n, ast.FunctionDef)}


def test_expected_values_never_reach_the_probe() -> None:
    probe = compile_tests("tests/test_shop.py", SAMPLE)
    assert "SECRET" not in probe.source
    assert "pytest" not in probe.source
    assert "EXPECTED_TOTALS" not in probe.source and "def reference" not in probe.source
    functions = _functions(probe.source)
    # the parametrized expectation column is gone, the input column stays
    assert "def test_price(code)" in functions["test_price"]
    assert "@cases('code', [('a',), ('b',)])" in functions["test_price"]
    # one shared table: each test keeps its own input column
    assert "[(1,), (2,)]" in functions["test_name"]
    assert "def test_number(number)" in functions["test_number"]
    assert probe.tables == {"test_price": [["code"]], "test_name": [["number"]], "test_number": [["number"]],
                            "test_totals": [], "test_errors": []}
    assert "basket" in functions  # fixtures survive, as fixtures
    assert "TAX" not in probe.source  # unused constants are dropped


def test_each_assertion_becomes_observations() -> None:
    probe = compile_tests("tests/test_shop.py", SAMPLE)
    body = _functions(probe.source)["test_totals"]
    observed = [ast.unparse(c.args[0]) for c in ast.walk(ast.parse(body))
                if isinstance(c, ast.Call) and getattr(c.func, "id", "") == "observe"]
    assert observed == [
        "basket.totals()", "basket.total('a')", "basket.total('b')",
        "basket.weight()",                                       # plain bounds are dropped
        "basket.first()", "basket.last()", "basket.first() < basket.last()",  # two live operands: and their order
        "basket.empty()",
        "basket.ratio()",
    ]
    approx_sites = [rule for rule in probe.sites.values() if rule]
    assert approx_sites == [{"approx": [1e-3, 1e-12]}]
    errors = _functions(probe.source)["test_errors"]
    assert "raises(" in errors and "message=True" in errors and "message=False" in errors


def test_swapped_operands_observe_the_actual_side() -> None:
    probe = compile_tests("t.py", "from m import f\n\ndef test_a():\n    assert 'SECRET' == f(1)\n")
    assert "observe(f(1), 0)" in probe.source and "SECRET" not in probe.source


def test_unsupported_constructs_are_refused() -> None:
    with pytest.raises(ProbeCompileError):
        compile_tests("t.py", "import pytest\n\n@pytest.mark.skip\ndef test_a():\n    assert 1\n")
    with pytest.raises(ProbeCompileError):
        compile_tests("t.py", "import pytest\n\n@pytest.mark.parametrize('a', make())\ndef test_a(a):\n    assert a\n")
    with pytest.raises(ProbeCompileError):
        compile_tests("t.py", "import pytest\n\ndef test_a():\n    pytest.fail('no')\n")


def test_a_value_expected_by_one_assertion_and_input_of_another_splits_the_test() -> None:
    source = project_tests("rle_codec")["tests/test_rle_codec.py"]
    probe = compile_tests("tests/test_rle_codec.py", source)
    functions = _functions_ast(probe.source)
    first = functions["test_encode_with_max_run"]
    second = functions["test_encode_with_max_run__envhub_segment_1"]
    assert [a.arg for a in first.args.args] == ["text", "max_run"]   # encode(...) never sees the encoding
    assert [a.arg for a in second.args.args] == ["expected"]         # decode(...) never sees the text
    assert probe.functions("test_encode_with_max_run") == ["test_encode_with_max_run",
                                                           "test_encode_with_max_run__envhub_segment_1"]


@pytest.mark.parametrize("project", sorted(p.name for p in PROJECTS_DIR.iterdir() if (p / "project.json").exists()))
def test_every_project_compiles(project: str) -> None:
    for path, source in project_tests(project).items():
        probe = compile_tests(path, source)
        compile(probe.source, path, "exec")
        original = {n.name for n in ast.parse(source).body if isinstance(n, ast.FunctionDef)}
        tests = [n for n in _functions_ast(probe.source) if n.startswith("test_")]
        assert {n.split("__envhub_segment_")[0] for n in tests} <= original
        for name in tests:
            params = {a.arg for a in _functions_ast(probe.source)[name].args.args}
            # a parameter named as an expectation survives only as the input of another segment
            assert not params & {"expected", "want"} or "__envhub_segment_" in name, (path, name)


def _functions_ast(source: str) -> dict[str, ast.FunctionDef]:
    return {n.name: n for n in ast.parse(source).body if isinstance(n, ast.FunctionDef)}
