import pytest

from line_diff import Hunk, diff_ops, format_hunk_header, lcs_length, make_hunks, similarity, unified_diff


def test_lcs_length():
    assert lcs_length(list("ABCBDAB"), list("BDCABA")) == 4
    assert lcs_length([], ["x"]) == 0
    assert lcs_length(["a", "b"], ["a", "b"]) == 2
    assert lcs_length(["a"], ["b"]) == 0


def test_diff_ops_equal():
    assert diff_ops(["a", "b"], ["a", "b"]) == [(" ", "a"), (" ", "b")]
    assert diff_ops([], []) == []


def test_diff_ops_pure_insert_and_delete():
    assert diff_ops([], ["x", "y"]) == [("+", "x"), ("+", "y")]
    assert diff_ops(["x", "y"], []) == [("-", "x"), ("-", "y")]


def test_diff_ops_replace_deletes_first():
    assert diff_ops(["a", "b", "c"], ["a", "X", "c"]) == [(" ", "a"), ("-", "b"), ("+", "X"), (" ", "c")]


def test_diff_ops_is_minimal():
    a = ["a", "b", "c", "a", "b", "b", "a"]
    b = ["c", "b", "a", "b", "a", "c"]
    ops = diff_ops(a, b)
    assert sum(tag == " " for tag, _ in ops) == lcs_length(a, b) == 4
    assert [text for tag, text in ops if tag != "+"] == a
    assert [text for tag, text in ops if tag != "-"] == b


def test_diff_ops_prefers_longest_match():
    assert diff_ops(["x", "a", "b"], ["a", "b", "x"]) == [("-", "x"), (" ", "a"), (" ", "b"), ("+", "x")]


def test_diff_ops_trailing_changes():
    assert diff_ops(["a", "b"], ["a"]) == [(" ", "a"), ("-", "b")]
    assert diff_ops(["a"], ["a", "b"]) == [(" ", "a"), ("+", "b")]


def test_similarity():
    assert similarity([], []) == 1.0
    assert similarity(["a"], []) == 0.0
    assert similarity(["a", "b"], ["a", "c"]) == 0.5
    assert similarity(["a", "b", "c"], ["a", "b", "c"]) == 1.0
    assert similarity(["a", "b", "c"], ["b"]) == 0.5


@pytest.mark.parametrize(
    ("hunk", "header"),
    [
        (Hunk(1, 4, 1, 5), "@@ -1,4 +1,5 @@"),
        (Hunk(3, 1, 3, 1), "@@ -3 +3 @@"),
        (Hunk(0, 0, 1, 2), "@@ -0,0 +1,2 @@"),
        (Hunk(7, 2, 6, 0), "@@ -7,2 +6,0 @@"),
    ],
)
def test_format_hunk_header(hunk, header):
    assert format_hunk_header(hunk) == header


LETTERS = [chr(ord("a") + i) for i in range(16)]


def two_changes():
    b = LETTERS.copy()
    b[1] = "X"
    b[12] = "Y"
    return LETTERS, b


def test_make_hunks_separate():
    a, b = two_changes()
    hunks = make_hunks(a, b, context=2)
    assert [(h.old_start, h.old_count, h.new_start, h.new_count) for h in hunks] == [(1, 4, 1, 4), (11, 5, 11, 5)]
    assert hunks[0].lines == [(" ", "a"), ("-", "b"), ("+", "X"), (" ", "c"), (" ", "d")]
    assert hunks[1].lines[0] == (" ", "k")
    assert hunks[1].lines[-1] == (" ", "o")


def test_make_hunks_merge_threshold():
    a = LETTERS[:10]
    b = a.copy()
    b[2] = "X"
    b[7] = "Y"  # four unchanged lines (d..g) between the changes
    assert len(make_hunks(a, b, context=2)) == 1
    assert len(make_hunks(a, b, context=1)) == 2
    b2 = a.copy()
    b2[2] = "X"
    b2[6] = "Y"  # three unchanged lines between the changes
    assert len(make_hunks(a, b2, context=1)) == 2
    merged = make_hunks(a, b2, context=2)
    assert len(merged) == 1
    assert (merged[0].old_start, merged[0].old_count) == (1, 9)


def test_make_hunks_zero_context():
    a, b = two_changes()
    hunks = make_hunks(a, b, context=0)
    assert [(h.old_start, h.old_count, h.new_start, h.new_count) for h in hunks] == [(2, 1, 2, 1), (13, 1, 13, 1)]


def test_make_hunks_pure_insertion_position():
    hunks = make_hunks(["a", "b", "c"], ["a", "X", "b", "c"], context=0)
    assert [(h.old_start, h.old_count, h.new_start, h.new_count) for h in hunks] == [(1, 0, 2, 1)]
    hunks = make_hunks(["a", "b"], ["X", "a", "b"], context=0)
    assert [(h.old_start, h.old_count, h.new_start, h.new_count) for h in hunks] == [(0, 0, 1, 1)]


def test_make_hunks_pure_deletion_position():
    hunks = make_hunks(["a", "b", "c"], ["a", "c"], context=0)
    assert [(h.old_start, h.old_count, h.new_start, h.new_count) for h in hunks] == [(2, 1, 1, 0)]


def test_make_hunks_context_clipped_at_edges():
    hunks = make_hunks(["a", "b", "c"], ["a", "b", "C"], context=5)
    assert [(h.old_start, h.old_count, h.new_start, h.new_count) for h in hunks] == [(1, 3, 1, 3)]


def test_default_context_is_three_lines():
    a = LETTERS
    b = LETTERS.copy()
    b[8] = "X"
    hunks = make_hunks(a, b)
    assert [(h.old_start, h.old_count, h.new_start, h.new_count) for h in hunks] == [(6, 7, 6, 7)]
    assert unified_diff(a, b).splitlines()[2] == "@@ -6,7 +6,7 @@"


def test_make_hunks_no_changes_and_validation():
    assert make_hunks(["a"], ["a"]) == []
    with pytest.raises(ValueError):
        make_hunks(["a"], ["b"], context=-1)


def test_unified_diff_output():
    a = ["one", "two", "three", "four"]
    b = ["one", "2", "three", "four", "five"]
    expected = (
        "--- old.txt\n"
        "+++ new.txt\n"
        "@@ -1,4 +1,5 @@\n"
        " one\n"
        "-two\n"
        "+2\n"
        " three\n"
        " four\n"
        "+five\n"
    )
    assert unified_diff(a, b, "old.txt", "new.txt") == expected


def test_unified_diff_edge_cases():
    assert unified_diff(["a"], ["a"]) == ""
    assert unified_diff([], ["x", "y"]) == "--- a\n+++ b\n@@ -0,0 +1,2 @@\n+x\n+y\n"
    assert unified_diff(["x"], []) == "--- a\n+++ b\n@@ -1 +0,0 @@\n-x\n"
