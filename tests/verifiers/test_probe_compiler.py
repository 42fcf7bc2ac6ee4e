"""The probe compiler: hidden pytest tests become probes that hold inputs and calls, never expected values."""

from __future__ import annotations

import ast

import pytest

from envhub.tasks.code_repair.manifest import PROJECTS_DIR
from envhub.tasks.code_repair.workspace import project_tests
from envhub.verifiers.probes.compiler import Probe, ProbeCompileError, compile_tests

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


def _functions(probe: Probe) -> dict[str, str]:
    """Every function of every probe module, by name, as source."""
    return {n.name: ast.unparse(n) for text in probe.modules.values() for n in ast.parse(text).body
            if isinstance(n, ast.FunctionDef)}


def test_expected_values_never_reach_the_probe() -> None:
    probe = compile_tests("tests/test_shop.py", SAMPLE)
    comparison = "test_totals__envhub_segment_1"  # basket.total('b') == reference('b'), observed on its own
    for function, text in probe.modules.items():
        assert "pytest" not in text and "EXPECTED_TOTALS" not in text and "TAX" not in text
        assert ("SECRET" in text) == (function == comparison), function
        assert "reference" not in text or function == comparison
        others = set(probe.modules) - {function, "basket"}
        assert not {n.name for n in ast.parse(text).body if isinstance(n, ast.FunctionDef)} & others
    functions = _functions(probe)
    # the parametrized expectation column is gone, the input column stays
    assert "def test_price(code)" in functions["test_price"]
    assert "@cases('code', ['a', 'b'])" in functions["test_price"]
    # one shared table: each test keeps its own input column
    assert "@cases('number', [1, 2])" in functions["test_name"]
    assert "def test_number(number)" in functions["test_number"]
    assert probe.tables["test_price"] == [["code"]] and probe.tables["test_number"] == [["number"]]
    assert "basket" in functions and "def basket" in probe.modules["test_totals"]  # fixtures go with their tests
    assert "def basket" not in probe.modules["test_price"]


def test_each_assertion_becomes_observations() -> None:
    probe = compile_tests("tests/test_shop.py", SAMPLE)
    body = _functions(probe)["test_totals"]
    observed = [ast.unparse(c.args[0]) for c in ast.walk(ast.parse(body))
                if isinstance(c, ast.Call) and getattr(c.func, "id", "") == "observe"]
    assert observed == [
        # against a container (or a value the compiler cannot tell from one), pytest.approx, or beside the
        # comparison's own result: rebuilt from builtins in the probe's frame first (runtime.as_builtin)
        "_envhub_as_builtin(basket.totals())", "_envhub_as_builtin(basket.total('a'))",
        "_envhub_as_builtin(basket.total('b'))",
        # a chain pair by pair, its middle operand evaluated once; bounds are inputs: each comparison is observed
        "_envhub_as_builtin(__envhub_chain_40_11_1)", "0 < __envhub_chain_40_11_1", "__envhub_chain_40_11_1 <= 10",
        "_envhub_as_builtin(basket.first())", "_envhub_as_builtin(basket.last())", "basket.first() < basket.last()",
        "basket.empty()",
        "_envhub_as_builtin(basket.ratio(), True)",
    ]
    approx_sites = [spec["approx"] for spec in probe.raising.values() if "approx" in spec]
    assert approx_sites == ["pytest.approx(0.25, rel=0.001)"]  # evaluated per case on the gold when recorded
    errors = _functions(probe)["test_errors"]
    assert "raises(" in errors and "message=True" in errors and "message=False" in errors


def test_swapped_operands_observe_the_actual_side() -> None:
    probe = compile_tests("t.py", "from m import f\n\ndef test_a():\n    assert 'SECRET' == f(1)\n")
    assert "observe(f(1), 0)" in probe.modules["test_a"] and "SECRET" not in probe.modules["test_a"]


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
    functions = {n.name: n for text in probe.modules.values() for n in ast.parse(text).body
                 if isinstance(n, ast.FunctionDef)}
    first = functions["test_encode_with_max_run"]
    last = functions["test_encode_with_max_run__envhub_segment_2"]
    assert [a.arg for a in first.args.args] == ["text", "max_run"]   # encode(...) never sees the encoding
    assert [a.arg for a in last.args.args] == ["expected"]           # decode(...) never sees the text
    assert "2a2aa" not in probe.modules["test_encode_with_max_run"]    # nor does its module hold the other's rows
    assert probe.functions("test_encode_with_max_run") == [
        "test_encode_with_max_run", "test_encode_with_max_run__envhub_segment_1",  # the two comparisons
        "test_encode_with_max_run__envhub_segment_2"]


@pytest.mark.parametrize("project", sorted(p.name for p in PROJECTS_DIR.iterdir() if (p / "project.json").exists()))
def test_every_project_compiles(project: str) -> None:
    for path, source in project_tests(project).items():
        probe = compile_tests(path, source)
        original = {n.name for n in ast.parse(source).body if isinstance(n, ast.FunctionDef)}
        assert {n.split("__envhub_segment_")[0] for n in probe.modules} <= original
        for name, text in probe.modules.items():
            compile(text, probe.module_path(name), "exec")
            fn = next(n for n in ast.parse(text).body if isinstance(n, ast.FunctionDef) and n.name == name)
            # a parameter named as an expectation survives only as the input of another segment
            assert not {a.arg for a in fn.args.args} & {"expected", "want"} or "__envhub_segment_" in name, (path, name)


@pytest.mark.parametrize("project", ["money", "bitset", "semver", "priority_queue"])
def test_every_whole_comparison_has_a_twin_that_observes_its_actual_side_alone(project: str) -> None:
    """A segment that observes ``a == B(...)`` lets the project's ``__eq__`` decide and holds B's
    inputs: it is sound only because another segment of the same test observes ``a`` without them."""
    for path, source in project_tests(project).items():
        probe = compile_tests(path, source, frozenset({"test_randomized_against_sorted_reference"}))
        for name, text in probe.modules.items():
            test = name.split("__envhub_segment_")[0]
            for call in ast.walk(ast.parse(text)):
                if not (isinstance(call, ast.Call) and getattr(call.func, "id", "") == "observe"):
                    continue
                observed = call.args[0]
                if isinstance(observed, ast.Compare) and isinstance(observed.ops[0], ast.Eq) and \
                        not _mentions_hash(observed):
                    actual = ast.unparse(observed.left)
                    twins = [f for f in probe.functions(test) if f != name
                             and f"observe(_envhub_as_builtin({actual}), " in probe.modules[f]]
                    assert twins, (path, name, ast.unparse(observed))


def _mentions_hash(node: ast.AST) -> bool:
    return any(isinstance(n, ast.Call) and getattr(n.func, "id", "") in ("hash", "id") for n in ast.walk(node))
