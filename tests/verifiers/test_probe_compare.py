"""The trusted comparison: only an exact, single, clean report of the gold's observations passes."""

from __future__ import annotations

import json
import time

from envhub.verifiers.probes.compare import holds, judge, read_report, same_value
from envhub.verifiers.probes.compiler import compile_tests
from envhub.verifiers.probes.grader import ProbeSuite, ProbeTest, plan, verdicts_from_output

GOLD = {"status": "ok", "observations": [[0, ["int", "3"]], [1, ["str", "abc"]]]}


def _line(index: int, observations: list, status: str = "ok") -> str:
    return json.dumps({"index": index, "status": status, "observations": observations, "detail": ""})


def test_exact_observations_pass_and_everything_else_fails() -> None:
    ok = read_report(_line(0, GOLD["observations"]) + "\n" + json.dumps({"done": True}), {0})
    assert ok.done and judge(ok, 0, GOLD, {}).passed
    cases = {
        "missing": "",
        "other value": _line(0, [[0, ["int", "4"]], [1, ["str", "abc"]]]),
        "bool for int": _line(0, [[0, ["bool", True]], [1, ["str", "abc"]]]),
        "other site": _line(0, [[1, ["int", "3"]], [1, ["str", "abc"]]]),
        "one short": _line(0, [[0, ["int", "3"]]]),
        "one extra": _line(0, [*GOLD["observations"], [1, ["str", "abc"]]]),
        "raised": _line(0, GOLD["observations"], status="raised"),
        "timeout": _line(0, GOLD["observations"], status="timeout"),
        "reported twice": _line(0, GOLD["observations"]) + "\n" + _line(0, GOLD["observations"]),
        "not json": '{"index": 0, "status": "ok", "observations": [[0, ["int", "3"]]',
        "object for a value": _line(0, [[0, ["object", "m.AlwaysEqual", []]], [1, ["str", "abc"]]]),
        "observations not a list": json.dumps({"index": 0, "status": "ok", "observations": "all"}),
        "index as a string": json.dumps({"index": "0", "status": "ok", "observations": GOLD["observations"]}),
    }
    for name, stdout in cases.items():
        assert not judge(read_report(stdout, {0}), 0, GOLD, {}).passed, name


def test_approx_sites_compare_numbers_within_the_recorded_tolerance() -> None:
    gold = {"status": "ok", "observations": [[0, ["float", "0.25"]], [0, ["list", [["float", "1.0"]]]]]}
    rules = {"0": {"approx": [["float", "0.001"], ["None"], False]}}  # rel=1e-3, the gold's value expected
    near = _line(0, [[0, ["float", "0.25002"]], [0, ["list", [["int", "1"]]]]])
    far = _line(0, [[0, ["float", "0.2600"]], [0, ["list", [["float", "1.0"]]]]])
    nan = _line(0, [[0, ["float", "nan"]], [0, ["list", [["float", "1.0"]]]]])
    assert judge(read_report(near, {0}), 0, gold, rules).passed
    assert not judge(read_report(far, {0}), 0, gold, rules).passed
    assert not judge(read_report(nan, {0}), 0, gold, rules).passed
    assert not judge(read_report(near, {0}), 0, gold, {}).passed  # exact where no tolerance was recorded


def test_a_segmented_test_passes_only_when_every_segment_does() -> None:
    source = "from m import enc, dec\n\ndef test_round():\n    text = 'ab'\n    coded = '1a1b'\n" \
             "    assert enc(text) == coded\n    assert dec(coded) == text\n"
    probe = compile_tests("tests/test_m.py", source)
    # enc observed without the encoding; both comparisons on their own; dec observed without the text
    assert probe.functions("test_round") == ["test_round", "test_round__envhub_segment_1",
                                             "test_round__envhub_segment_2"]
    assert "1a1b" not in probe.modules["test_round"] and "'ab'" not in probe.modules["test_round__envhub_segment_2"]
    gold = [[[1, ["str", "1a1b"]]], [[0, ["bool", True]], [2, ["bool", True]]], [[3, ["str", "ab"]]]]
    suite = ProbeSuite({"tests/test_m.py": probe}, {"t::a": ProbeTest("tests/test_m.py", "test_round")},
                       {"t::a": [{"status": "ok", "observations": g} for g in gold]})
    run_plan, index_of = plan(suite, ["t::a"], timeout_s=5)
    assert [t["function"] for b in run_plan["batches"] for t in b["tests"]] == probe.functions("test_round")
    assert "t::a" not in json.dumps(run_plan)  # no test id (which can embed expected values) reaches the sandbox
    assert verdicts_from_output(suite, index_of, "\n".join(_line(i, g) for i, g in enumerate(gold))).all_passed(["t::a"])
    wrong_last = [*gold[:2], [[3, ["str", "ba"]]]]
    failing = verdicts_from_output(suite, index_of, "\n".join(_line(i, g) for i, g in enumerate(wrong_last)))
    assert not failing.all_passed(["t::a"]) and failing.failed() == ["t::a"]


def _point(x: int, cache: int = 0) -> list:
    return ["object", "shop.Point", [["_cache", ["int", str(cache)]], ["x", ["int", str(x)]]]]


def test_many_objects_of_one_class_cost_what_their_number_does() -> None:
    """Decoded objects hash by the attributes their gold ``__eq__`` compares: a set or dict of
    thousands of one class is decided in about linear time, not by comparing each with each."""
    n = 5000
    keyed = {"shop.Point": ("x",)}
    gold = ["set", [_point(i) for i in range(n)]]
    fix = ["set", [_point(i, cache=7) for i in reversed(range(n))]]  # a cache the gold's __eq__ ignores
    wrong = ["set", [_point(i + 1) for i in range(n)]]
    as_keys = ["dict", [[_point(i), ["int", str(i)]] for i in range(n)]]
    t0 = time.monotonic()
    assert same_value(fix, gold, keyed) and not same_value(wrong, gold, keyed)
    assert same_value(["dict", [[_point(i, 3), ["int", str(i)]] for i in range(n)]], as_keys, keyed)
    assert time.monotonic() - t0 < 30  # a hang guard: under a second; quadratic comparison took minutes
    # a class without __eq__ of its own: compared on the gold's attributes, so hashed by class only;
    # deciding costs comparisons, and past the budget the observation is the submission's failure
    t0 = time.monotonic()
    assert not same_value(["set", [_point(i) for i in reversed(range(n))]], gold, {})
    assert not holds({"member_of": gold}, _point(n + 1), {})
    assert time.monotonic() - t0 < 30  # a hang guard, as above
    assert same_value(["set", [_point(i) for i in range(50)]], ["set", [_point(i) for i in range(50)]], {})
