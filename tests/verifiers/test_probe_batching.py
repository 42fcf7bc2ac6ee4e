"""Which probe functions share a child (``verifiers/probes/batching.py``): never one whose module
holds a value another expects, unless that value is in the other's own module already."""

from __future__ import annotations

from envhub.verifiers.probes.batching import group

TABLE = "VIEWS = {'shop.Token': ('kind', 'end')}\n"


def _source(body: str) -> str:
    return TABLE + f"def probe():\n    {body}\n"


def test_a_module_holding_a_value_another_test_expects_never_joins_it() -> None:
    sources = {"test_roman": _source("observe(to_roman(14), 0)"), "test_parse": _source("observe(parse('XIV'), 0)")}
    expected = {"test_roman": {"XIV"}, "test_parse": {"14"}}
    assert group(list(sources), sources, expected, {f: f for f in sources}) == [["test_roman"], ["test_parse"]]


def test_a_value_in_the_takers_own_module_adds_nothing_to_its_reach() -> None:
    # both modules carry the view table: 'end' is a field name there, and a token kind one test expects
    sources = {"test_kinds": _source("observe(kinds('a+b'), 0)"), "test_spans": _source("observe(span(3), 0)")}
    expected = {"test_kinds": {"end", "name"}, "test_spans": {"17"}}
    assert group(list(sources), sources, expected, {f: f for f in sources}) == [["test_kinds", "test_spans"]]
    # ... but a value only the giver holds still keeps them apart
    sources["test_spans"] = _source("observe(span('name'), 0)")
    assert group(list(sources), sources, expected, {f: f for f in sources}) == [["test_kinds"], ["test_spans"]]


def test_segments_of_one_test_never_share_a_child() -> None:
    sources = {"test_a": _source("observe(f(), 0)"), "test_a__envhub_segment_1": _source("observe(g(), 0)")}
    expected = {f: {"42"} for f in sources}
    assert group(list(sources), sources, expected, {f: "test_a" for f in sources}) == [
        ["test_a"], ["test_a__envhub_segment_1"]]
