import copy

import pytest

from json_pointer import (
    JsonPointerError,
    PointerSyntaxError,
    ResolutionError,
    add,
    escape,
    exists,
    format_pointer,
    iter_pointers,
    parse,
    remove,
    replace,
    resolve,
    unescape,
)

RFC_DOC = {
    "foo": ["bar", "baz"],
    "": 0,
    "a/b": 1,
    "c%d": 2,
    "e^f": 3,
    "g|h": 4,
    "i\\j": 5,
    'k"l': 6,
    " ": 7,
    "m~n": 8,
}


@pytest.mark.parametrize(
    ("pointer", "expected"),
    [
        ("", RFC_DOC),
        ("/foo", ["bar", "baz"]),
        ("/foo/0", "bar"),
        ("/foo/1", "baz"),
        ("/", 0),
        ("/a~1b", 1),
        ("/c%d", 2),
        ("/e^f", 3),
        ("/g|h", 4),
        ("/i\\j", 5),
        ('/k"l', 6),
        ("/ ", 7),
        ("/m~0n", 8),
    ],
)
def test_rfc6901_examples(pointer, expected):
    assert resolve(RFC_DOC, pointer) == expected


@pytest.mark.parametrize(
    ("token", "escaped"),
    [("a/b", "a~1b"), ("m~n", "m~0n"), ("~1", "~01"), ("/~", "~1~0"), ("plain", "plain"), ("", "")],
)
def test_escape_and_unescape(token, escaped):
    assert escape(token) == escaped
    assert unescape(escaped) == token


def test_unescape_order():
    assert unescape("~01") == "~1"
    assert unescape("~10") == "/0"
    assert unescape("~0~1") == "~/"


@pytest.mark.parametrize("token", ["~", "a~", "~2", "~a", "x~~0"])
def test_unescape_invalid(token):
    with pytest.raises(PointerSyntaxError):
        unescape(token)


def test_unescape_error_position():
    with pytest.raises(PointerSyntaxError, match="position 4"):
        unescape("ab~0~x")
    with pytest.raises(PointerSyntaxError, match="position 2"):
        unescape("~0~")


def test_parse():
    assert parse("") == []
    assert parse("/") == [""]
    assert parse("//") == ["", ""]
    assert parse("/a/b~1c/~0") == ["a", "b/c", "~"]


@pytest.mark.parametrize("pointer", ["a", "a/b", "#/a", "/a~"])
def test_parse_invalid(pointer):
    with pytest.raises(PointerSyntaxError):
        parse(pointer)


def test_format_pointer_round_trip():
    tokens = ["a/b", "", "m~n", "0"]
    assert format_pointer(tokens) == "/a~1b//m~0n/0"
    assert parse(format_pointer(tokens)) == tokens
    assert format_pointer([]) == ""


def test_error_hierarchy():
    assert issubclass(PointerSyntaxError, JsonPointerError)
    assert issubclass(ResolutionError, JsonPointerError)
    assert issubclass(ResolutionError, LookupError)
    assert issubclass(JsonPointerError, ValueError)
    assert not issubclass(PointerSyntaxError, LookupError)


@pytest.mark.parametrize(
    "pointer",
    ["/missing", "/foo/2", "/foo/-", "/foo/01", "/foo/-1", "/foo/x", "/foo/0/extra", "/a~1b/x", "/foo/1.0", "/foo/\u0661"],
)
def test_resolve_errors(pointer):
    with pytest.raises(ResolutionError):
        resolve(RFC_DOC, pointer)


def test_resolve_error_messages():
    with pytest.raises(ResolutionError, match="nonexistent array element"):
        resolve(RFC_DOC, "/foo/-")
    with pytest.raises(ResolutionError, match="invalid array index '01'"):
        resolve(RFC_DOC, "/foo/01")
    with pytest.raises(ResolutionError, match="out of range"):
        resolve(RFC_DOC, "/foo/2")


def test_resolve_default():
    assert resolve(RFC_DOC, "/missing", default=None) is None
    assert resolve(RFC_DOC, "/foo/9", default="d") == "d"
    assert resolve(RFC_DOC, "/foo/0", default="d") == "bar"
    with pytest.raises(PointerSyntaxError):
        resolve(RFC_DOC, "missing", default=None)


def test_resolve_falsy_values():
    doc = {"z": 0, "n": None, "f": False, "e": []}
    assert resolve(doc, "/z") == 0
    assert resolve(doc, "/n") is None
    assert resolve(doc, "/f") is False
    assert resolve(doc, "/e") == []


def test_resolve_last_index_and_nested():
    doc = {"a": [[1, 2], [3, {"b": "deep"}]]}
    assert resolve(doc, "/a/1/1/b") == "deep"
    assert resolve(doc, "/a/1/0") == 3
    assert resolve(doc, "/a/0/1") == 2
    assert resolve(doc, "/a/10", default=None) is None


def test_exists():
    assert exists(RFC_DOC, "/foo/1")
    assert exists(RFC_DOC, "")
    assert exists({"n": None}, "/n")
    assert not exists(RFC_DOC, "/foo/2")
    assert not exists(RFC_DOC, "/nope")


def test_add_object_member():
    doc = {"a": 1}
    assert add(doc, "/b", 2) is doc
    assert doc == {"a": 1, "b": 2}
    add(doc, "/a", 10)
    assert doc == {"a": 10, "b": 2}


def test_add_array_insert_and_append():
    doc = {"list": [1, 2, 3]}
    add(doc, "/list/0", 0)
    assert doc["list"] == [0, 1, 2, 3]
    add(doc, "/list/2", 99)
    assert doc["list"] == [0, 1, 99, 2, 3]
    add(doc, "/list/5", 4)
    assert doc["list"] == [0, 1, 99, 2, 3, 4]
    add(doc, "/list/-", 5)
    assert doc["list"] == [0, 1, 99, 2, 3, 4, 5]


def test_add_array_out_of_range():
    doc = {"list": [1]}
    with pytest.raises(ResolutionError):
        add(doc, "/list/2", 0)
    with pytest.raises(ResolutionError):
        add(doc, "/list/01", 0)
    assert doc == {"list": [1]}


def test_add_root_and_missing_parent():
    assert add({"a": 1}, "", [1]) == [1]
    with pytest.raises(ResolutionError):
        add({}, "/missing/child", 1)
    with pytest.raises(ResolutionError):
        add({"s": "text"}, "/s/0", 1)
    with pytest.raises(ResolutionError):
        add({"n": 5}, "/n/x", 1)


def test_replace():
    doc = {"a": {"b": [1, 2]}}
    assert replace(doc, "/a/b/1", 20) is doc
    assert doc == {"a": {"b": [1, 20]}}
    replace(doc, "/a/b", "x")
    assert doc == {"a": {"b": "x"}}
    assert replace(doc, "", 7) == 7


def test_replace_missing():
    doc = {"a": [1, 2]}
    for pointer in ("/b", "/a/2", "/a/-", "/x/y"):
        with pytest.raises(ResolutionError):
            replace(doc, pointer, 0)
    assert doc == {"a": [1, 2]}


def test_remove():
    doc = {"a": [1, 2, 3], "b": {"c": 1, "d": 2}}
    assert remove(doc, "/a/0") == 1
    assert doc["a"] == [2, 3]
    assert remove(doc, "/a/1") == 3
    assert doc["a"] == [2]
    assert remove(doc, "/b/c") == 1
    assert doc == {"a": [2], "b": {"d": 2}}


def test_remove_errors():
    doc = {"a": [1], "b": {}}
    original = copy.deepcopy(doc)
    for pointer in ("", "/a/1", "/a/-", "/b/x", "/c", "/a/0/x"):
        with pytest.raises(ResolutionError):
            remove(doc, pointer)
    assert doc == original


def test_iter_pointers():
    doc = {"a": [1, {"b/c": None}], "m~n": {}, "e": []}
    assert list(iter_pointers(doc)) == ["", "/a", "/a/0", "/a/1", "/a/1/b~1c", "/m~0n", "/e"]
    assert list(iter_pointers(5)) == [""]
    for pointer in iter_pointers(doc):
        assert exists(doc, pointer)
