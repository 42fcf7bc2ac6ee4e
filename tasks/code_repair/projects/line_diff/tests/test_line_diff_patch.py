import random

import pytest

from line_diff import (
    Hunk,
    PatchConflictError,
    PatchError,
    apply_hunks,
    apply_patch,
    make_hunks,
    parse_patch,
    reverse_hunks,
    unified_diff,
)

PATCH = """\
--- a
+++ b
@@ -1,3 +1,3 @@
 one
-two
+2
 three
@@ -6 +6,2 @@
 six
+seven
"""

ORIGINAL = ["one", "two", "three", "four", "five", "six"]
PATCHED = ["one", "2", "three", "four", "five", "six", "seven"]


def test_parse_patch():
    hunks = parse_patch(PATCH)
    assert len(hunks) == 2
    assert (hunks[0].old_start, hunks[0].old_count, hunks[0].new_start, hunks[0].new_count) == (1, 3, 1, 3)
    assert hunks[0].lines == [(" ", "one"), ("-", "two"), ("+", "2"), (" ", "three")]
    assert (hunks[1].old_start, hunks[1].old_count, hunks[1].new_start, hunks[1].new_count) == (6, 1, 6, 2)


def test_parse_patch_without_file_headers_and_empty():
    assert parse_patch("@@ -1 +1 @@\n-a\n+b\n")[0].lines == [("-", "a"), ("+", "b")]
    assert parse_patch("") == []


def test_parse_patch_lines_resembling_headers_inside_hunk():
    hunks = parse_patch("@@ -1 +1 @@\n--- x\n+++ y\n")
    assert hunks[0].lines == [("-", "-- x"), ("+", "++ y")]


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("--- a\n+++ b\nhello\n", 3),
        ("@@ -1 +1 @@\n-a\n+b\n*c\n", 4),
        ("@@ -1 +1 @@\n-a\n+b\n\n", 4),
        ("@@ -x +1 @@\n", 1),
        (" context before header\n", 1),
    ],
)
def test_parse_patch_unexpected_lines(text, line):
    with pytest.raises(PatchError, match=f"line {line}:"):
        parse_patch(text)


@pytest.mark.parametrize(
    "text",
    [
        "@@ -1,2 +1 @@\n-a\n+b\n",
        "@@ -1 +1,2 @@\n-a\n+b\n",
        "@@ -1 +1 @@\n-a\n+b\n@@ -5 +5 @@\n-x\n",
        "@@ -1,2 +1 @@\n-a\n+b\n@@ -5 +5 @@\n-x\n+y\n",
        "@@ -1 +1 @@\n",
    ],
)
def test_parse_patch_count_mismatch(text):
    with pytest.raises(PatchError):
        parse_patch(text)


def test_apply_patch_text():
    assert apply_hunks(ORIGINAL, parse_patch(PATCH)) == PATCHED
    assert apply_patch("\n".join(ORIGINAL) + "\n", PATCH) == "\n".join(PATCHED) + "\n"


def test_apply_patch_to_empty_result():
    assert apply_patch("x\n", "@@ -1 +0,0 @@\n-x\n") == ""
    assert apply_patch("", "@@ -0,0 +1 @@\n+x\n") == "x\n"


def test_apply_pure_insertion_in_middle():
    hunks = [Hunk(1, 0, 2, 1, [("+", "X")])]
    assert apply_hunks(["a", "b"], hunks) == ["a", "X", "b"]
    assert apply_hunks(["a", "b"], [Hunk(0, 0, 1, 1, [("+", "X")])]) == ["X", "a", "b"]
    assert apply_hunks(["a", "b"], [Hunk(2, 0, 3, 1, [("+", "X")])]) == ["a", "b", "X"]


def test_apply_conflict_in_context():
    with pytest.raises(PatchConflictError) as info:
        apply_hunks(["one", "TWO", "three"], parse_patch("@@ -1,3 +1,3 @@\n one\n-two\n+2\n three\n"))
    assert info.value.hunk_index == 0
    assert info.value.line_number == 2


def test_apply_conflict_in_second_hunk():
    changed = ORIGINAL.copy()
    changed[5] = "SIX"
    with pytest.raises(PatchConflictError) as info:
        apply_hunks(changed, parse_patch(PATCH))
    assert (info.value.hunk_index, info.value.line_number) == (1, 6)
    assert "hunk 2" in str(info.value)


def test_apply_conflict_past_end():
    with pytest.raises(PatchConflictError) as info:
        apply_hunks(["a"], [Hunk(1, 2, 1, 1, [(" ", "a"), ("-", "b")])])
    assert info.value.line_number == 2


def test_apply_rejects_overlapping_hunks():
    hunks = [Hunk(1, 2, 1, 2, [(" ", "a"), ("-", "b"), ("+", "B")]), Hunk(2, 1, 2, 1, [("-", "b"), ("+", "c")])]
    with pytest.raises(PatchError, match="hunk 2"):
        apply_hunks(["a", "b", "c"], hunks)
    assert not issubclass(PatchError, PatchConflictError)
    assert issubclass(PatchConflictError, PatchError)


def test_apply_adjacent_hunks_allowed():
    hunks = [Hunk(1, 1, 1, 1, [("-", "a"), ("+", "A")]), Hunk(2, 1, 2, 1, [("-", "b"), ("+", "B")])]
    assert apply_hunks(["a", "b", "c"], hunks) == ["A", "B", "c"]


def test_reverse_hunks():
    hunks = parse_patch(PATCH)
    reverse = reverse_hunks(hunks)
    assert (reverse[1].old_start, reverse[1].old_count, reverse[1].new_start, reverse[1].new_count) == (6, 2, 6, 1)
    assert reverse[0].lines == [(" ", "one"), ("+", "two"), ("-", "2"), (" ", "three")]
    assert apply_hunks(PATCHED, reverse) == ORIGINAL


def test_diff_then_patch_round_trip():
    rng = random.Random(1234)
    for _ in range(150):
        a = [rng.choice("abcde") for _ in range(rng.randint(0, 10))]
        b = [rng.choice("abcde") for _ in range(rng.randint(0, 10))]
        context = rng.randint(0, 3)
        hunks = parse_patch(unified_diff(a, b, context=context))
        assert apply_hunks(a, hunks) == b
        assert apply_hunks(b, reverse_hunks(hunks)) == a
        assert [(h.old_start, h.old_count, h.new_start, h.new_count, h.lines) for h in hunks] == [
            (h.old_start, h.old_count, h.new_start, h.new_count, h.lines) for h in make_hunks(a, b, context)
        ]
