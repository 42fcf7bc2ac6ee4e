import pytest

from url_query import (
    QueryError,
    build_query,
    get_first,
    parse_qs,
    parse_qsl,
    quote,
    unquote,
)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("", ""),
        ("plain", "plain"),
        ("a+b", "a b"),
        ("a%20b", "a b"),
        ("%41%42%43", "ABC"),
        ("%e2%82%ac", "\u20ac"),
        ("%E2%82%AC", "\u20ac"),
        ("caf%C3%A9", "caf\u00e9"),
        ("100%25", "100%"),
        ("%2B", "+"),
        ("%7e%7E", "~~"),
    ],
)
def test_unquote(text, expected):
    assert unquote(text) == expected


def test_unquote_plus_kept_when_disabled():
    assert unquote("a+b", plus_as_space=False) == "a+b"
    assert unquote("a+%2B", plus_as_space=False) == "a++"


@pytest.mark.parametrize(
    "text, expected",
    [
        ("%", "%"),
        ("%4", "%4"),
        ("100%", "100%"),
        ("%zz", "%zz"),
        ("%4g", "%4g"),
        ("%%41", "%A"),
        ("a%2", "a%2"),
    ],
)
def test_unquote_lenient_keeps_bad_escapes(text, expected):
    assert unquote(text) == expected


@pytest.mark.parametrize(
    "text, position",
    [("%", 0), ("ab%4", 2), ("x%zz", 1), ("%41%g1", 3)],
)
def test_unquote_strict_bad_escape(text, position):
    with pytest.raises(QueryError, match=f"position {position}$"):
        unquote(text, strict=True)


def test_unquote_invalid_utf8():
    assert unquote("%FF") == "\ufffd"
    assert unquote("a%C3") == "a\ufffd"
    with pytest.raises(QueryError):
        unquote("%FF", strict=True)
    with pytest.raises(ValueError):
        unquote("%C3%28", strict=True)


def test_unquote_strict_accepts_valid_input():
    assert unquote("x%3Dy+z", strict=True) == "x=y z"


@pytest.mark.parametrize(
    "text, expected",
    [
        ("", ""),
        ("abcXYZ019", "abcXYZ019"),
        ("-._~", "-._~"),
        ("a b", "a+b"),
        ("a&b=c", "a%26b%3Dc"),
        ("\u20ac", "%E2%82%AC"),
        ("100%", "100%25"),
        ("a+b", "a%2Bb"),
        ("/path?", "%2Fpath%3F"),
        ("\n", "%0A"),
    ],
)
def test_quote(text, expected):
    assert quote(text) == expected


def test_quote_space_as_percent_and_safe():
    assert quote("a b", space_as_plus=False) == "a%20b"
    assert quote("/a b/", safe="/") == "/a+b/"
    assert quote("a:b/c", safe=":") == "a:b%2Fc"


@pytest.mark.parametrize("text", ["hello world", "\u00fcber & co", "a+b=c", "~!*()'", "100% \u2713"])
def test_quote_unquote_roundtrip(text):
    assert unquote(quote(text)) == text
    assert unquote(quote(text, space_as_plus=False)) == text


def test_parse_qsl_basic_order_and_repeats():
    assert parse_qsl("a=1&b=2&a=3") == [("a", "1"), ("b", "2"), ("a", "3")]


def test_parse_qsl_leading_question_mark_and_empty_fields():
    assert parse_qsl("?x=1&&y=2&") == [("x", "1"), ("y", "2")]
    assert parse_qsl("") == []
    assert parse_qsl("?") == []


def test_parse_qsl_decodes_keys_and_values():
    assert parse_qsl("first+name=J%C3%BCrgen&q=a%26b") == [
        ("first name", "J\u00fcrgen"),
        ("q", "a&b"),
    ]


def test_parse_qsl_value_may_contain_equals():
    assert parse_qsl("expr=a=b&k==") == [("expr", "a=b"), ("k", "=")]


def test_parse_qsl_blank_values():
    query = "a=&b=1&flag&=v"
    assert parse_qsl(query) == [("b", "1"), ("", "v")]
    assert parse_qsl(query, keep_blank=True) == [("a", ""), ("b", "1"), ("flag", ""), ("", "v")]


def test_parse_qsl_strict_requires_equals():
    with pytest.raises(QueryError, match="flag"):
        parse_qsl("a=1&flag", strict=True)
    assert parse_qsl("a=1&b=", strict=True, keep_blank=True) == [("a", "1"), ("b", "")]


def test_parse_qsl_strict_bad_escape():
    with pytest.raises(QueryError):
        parse_qsl("a=%G1", strict=True)
    assert parse_qsl("a=%G1") == [("a", "%G1")]


def test_parse_qsl_custom_separator():
    assert parse_qsl("a=1;b=2&c", separator=";") == [("a", "1"), ("b", "2&c")]
    with pytest.raises(ValueError):
        parse_qsl("a=1", separator="")


@pytest.mark.parametrize(
    "query, limit, ok",
    [
        ("a=1&b=2", 2, True),
        ("a=1&b=2&c=3", 2, False),
        ("a=1&&b=2&", 2, True),
        ("a=1", 0, False),
        ("", 0, True),
        ("a=&b=", 2, True),
    ],
)
def test_parse_qsl_max_fields(query, limit, ok):
    if ok:
        parse_qsl(query, max_fields=limit)
    else:
        with pytest.raises(QueryError, match="too many fields"):
            parse_qsl(query, max_fields=limit)


def test_parse_qs_groups_values():
    assert parse_qs("a=1&b=2&a=3&c=") == {"a": ["1", "3"], "b": ["2"]}
    assert parse_qs("a=1&c=", keep_blank=True) == {"a": ["1"], "c": [""]}
    with pytest.raises(QueryError):
        parse_qs("a", strict=True)
    assert parse_qs("flag&a=%zz") == {"a": ["%zz"]}


def test_get_first():
    query = "a=&a=2&b=x+y"
    assert get_first(query, "a") == ""
    assert get_first(query, "b") == "x y"
    assert get_first(query, "c") is None
    assert get_first(query, "c", default="dflt") == "dflt"


def test_build_query_from_mapping():
    assert build_query({"q": "hello world", "page": 2}) == "q=hello+world&page=2"


def test_build_query_lists_none_and_bools():
    params = {"tag": ["a", "b c"], "debug": None, "on": True, "off": False, "ratio": 0.5}
    assert build_query(params) == "tag=a&tag=b+c&debug&on=true&off=false&ratio=0.5"


def test_build_query_from_pairs_and_tuple_values():
    assert build_query([("x", 1), ("x", 2), ("y", ("p", "q"))]) == "x=1&x=2&y=p&y=q"
    assert build_query([]) == ""


def test_build_query_encodes_keys_and_space_mode():
    assert build_query({"a key": "v&w"}) == "a+key=v%26w"
    assert build_query({"a key": "v w"}, space_as_plus=False) == "a%20key=v%20w"
    assert build_query({"k": ""}) == "k="


def test_build_then_parse_roundtrip():
    params = [("name", "Zo\u00eb & Ann"), ("tags", "x+y"), ("empty", ""), ("n", "42")]
    assert parse_qsl(build_query(params), keep_blank=True) == params
