import pytest

from text_wrap import align, fill, indent, justify, justify_line, shorten, wrap

TEXT = "The quick brown fox jumps over the lazy dog"


def test_wrap_basic():
    assert wrap(TEXT, 10) == ["The quick", "brown fox", "jumps over", "the lazy", "dog"]


def test_wrap_exact_fit():
    assert wrap("aaa bbb", 7) == ["aaa bbb"]
    assert wrap("aaa bbb", 6) == ["aaa", "bbb"]


def test_wrap_wide_width_single_line():
    assert wrap(TEXT, 100) == [TEXT]


def test_wrap_collapses_whitespace():
    assert wrap("  a \n\t b   c  ", 80) == ["a b c"]


def test_wrap_blank_text():
    assert wrap("", 10) == []
    assert wrap("   \n ", 10) == []


def test_wrap_width_one():
    assert wrap("ab c", 1) == ["a", "b", "c"]


@pytest.mark.parametrize("width", [0, -3])
def test_wrap_invalid_width(width):
    with pytest.raises(ValueError, match="width must be at least 1"):
        wrap("abc", width)


def test_wrap_breaks_long_words():
    assert wrap("abcdefghij", 4) == ["abcd", "efgh", "ij"]
    assert wrap("ab abcdefghij x", 4) == ["ab", "abcd", "efgh", "ij x"]
    assert wrap("abcdefgh", 4) == ["abcd", "efgh"]


def test_wrap_long_word_exactly_width_not_broken():
    assert wrap("abcd ef", 4) == ["abcd", "ef"]


def test_wrap_without_breaking_long_words():
    assert wrap("ab abcdefghij x", 4, break_long_words=False) == ["ab", "abcdefghij", "x"]


def test_wrap_initial_indent():
    assert wrap("aa bb cc dd", 7, initial_indent="* ") == ["* aa bb", "cc dd"]


def test_wrap_hanging_indent():
    lines = wrap("one two three four five", 10, initial_indent="- ", subsequent_indent="  ")
    assert lines == ["- one two", "  three", "  four", "  five"]
    assert all(len(line) <= 10 for line in lines)


def test_wrap_long_word_with_indents():
    assert wrap("abcdefgh", 5, initial_indent=">", subsequent_indent="..") == [">abcd", "..efg", "..h"]


def test_wrap_long_word_after_flush_uses_subsequent_room():
    assert wrap("ab abcdefgh", 6, subsequent_indent="...") == ["ab", "...abc", "...def", "...gh"]
    assert wrap("ab abcdefgh", 6, initial_indent="....") == ["....ab", "abcdef", "gh"]


def test_wrap_indent_must_fit():
    with pytest.raises(ValueError):
        wrap("a", 3, initial_indent="   ")
    with pytest.raises(ValueError):
        wrap("a", 3, subsequent_indent="abcd")
    assert wrap("a", 3, initial_indent="  ") == ["  a"]


def test_fill():
    assert fill(TEXT, 15) == "The quick brown\nfox jumps over\nthe lazy dog"
    assert fill("a b", 10, initial_indent="> ") == "> a b"
    assert fill("", 5) == ""


@pytest.mark.parametrize(
    ("line", "width", "expected"),
    [
        ("a b", 5, "a   b"),
        ("a b c", 8, "a   b  c"),
        ("a b c", 9, "a   b   c"),
        ("a b c d", 11, "a   b  c  d"),
        ("a b c d", 10, "a  b  c  d"),
        ("ab cd", 5, "ab cd"),
        ("word", 10, "word"),
        ("", 10, ""),
    ],
)
def test_justify_line(line, width, expected):
    result = justify_line(line, width)
    assert result == expected


def test_justify_line_too_long():
    with pytest.raises(ValueError):
        justify_line("abc def", 6)


def test_justify():
    lines = justify(TEXT, 16)
    assert lines == ["The  quick brown", "fox  jumps  over", "the lazy dog"]
    assert justify("", 10) == []
    assert justify("single line", 20) == ["single line"]


@pytest.mark.parametrize(
    ("how", "expected"),
    [("left", "ab   "), ("right", "   ab"), ("center", " ab  ")],
)
def test_align(how, expected):
    assert align("ab", 5, how) == expected


def test_align_center_even_and_exact():
    assert align("ab", 6, "center") == "  ab  "
    assert align("abc", 3, "right") == "abc"
    assert align("x", 2, "center") == "x "


def test_align_errors():
    with pytest.raises(ValueError):
        align("abcdef", 5)
    with pytest.raises(ValueError):
        align("ab", 5, "middle")


def test_indent():
    assert indent("a\nb\n", "> ") == "> a\n> b\n"
    assert indent("a\n\n  \nb", "# ") == "# a\n\n  \n# b"
    assert indent("a\n\nb", "# ", skip_blank=False) == "# a\n# \n# b"
    assert indent("a\r\nb", "-") == "-a\r\n-b"
    assert indent("", "x") == ""


def test_shorten_fits():
    assert shorten("Hello   world", 11) == "Hello world"
    assert shorten("Hello world", 20) == "Hello world"


def test_shorten_truncates():
    assert shorten("Hello world, how are you", 20) == "Hello world, [...]"
    assert shorten("Hello world, how are you", 18) == "Hello world, [...]"
    assert shorten("Hello world, how are you", 17) == "Hello [...]"
    assert shorten("one two three", 12, placeholder="...") == "one two..."
    assert shorten("one two three", 10, placeholder="...") == "one two..."
    assert shorten("one two three", 9, placeholder="...") == "one..."


def test_shorten_placeholder_only():
    assert shorten("Supercalifragilistic word", 10) == "[...]"
    assert shorten("abcdef", 5) == "[...]"


def test_shorten_placeholder_too_long():
    with pytest.raises(ValueError):
        shorten("abcdefgh", 4)
    assert shorten("abcdefgh", 8) == "abcdefgh"
