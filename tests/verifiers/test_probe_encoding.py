"""The probe runtime's canonical encoding: exact types only, no method of a submitted object called.

In-process on the host (the runtime is stdlib-only and imports as ``envhub.verifiers.probes.runtime``);
``tests/test_probe_runner.py`` checks the same encoding end to end inside the sandboxes.
"""

from __future__ import annotations

import collections
import datetime as dt
import decimal
import enum
import fractions
import json
import os
from collections.abc import Iterator
from typing import Any

import pytest

from envhub.verifiers.probes import runner, runtime
from envhub.verifiers.probes.runtime import encode


class Color(enum.Enum):
    RED = 1


class Level(enum.IntEnum):
    HIGH = 3


class MyInt(int):
    pass


class Point:
    def __init__(self, x: int, y: int) -> None:
        self.x, self.y = x, y


class Slotted:
    __slots__ = ("__hidden", "a", "unset")

    def __init__(self) -> None:
        self.a = 1
        self.__hidden = [2]


class AlwaysEqual:
    def __eq__(self, other: object) -> bool:
        return True

    __hash__ = object.__hash__


class Shop(Exception):
    pass


class OddZone(dt.tzinfo):
    def __init__(self) -> None:
        self.name = "X"

    def utcoffset(self, when: object) -> dt.timedelta:
        raise AssertionError("a submitted tzinfo was called")


P = collections.namedtuple("P", "x y")
Q = __name__


def test_plain_values_encode_by_exact_type() -> None:
    assert encode(None) == ["None"]
    assert encode(True) == ["bool", True]
    assert encode(7) == ["int", "7"]
    assert encode(-(2**100)) == ["int", str(-(2**100))]
    assert encode(10**5000) == ["int", "1" + "0" * 5000]  # past int-to-str's digit limit, exact
    assert encode(-0.0) == ["float", "-0.0"]
    assert encode(float("nan")) == ["float", "nan"]
    assert encode(float("-inf")) == ["float", "-inf"]
    assert encode(0.1) == ["float", "0.1"]
    assert encode(1 - 2j) == ["complex", "1.0", "-2.0"]
    assert encode("é\ud800") == ["str", "é\ud800"]
    assert encode(b"\x00\xff") == ["bytes", "00ff"]
    assert encode(bytearray(b"a")) == ["bytearray", "61"]
    assert encode((1, [2])) == ["tuple", [["int", "1"], ["list", [["int", "2"]]]]]
    assert encode({2: "b", "a": 1}) == ["dict", [[["int", "2"], ["str", "b"]], [["str", "a"], ["int", "1"]]]]
    assert encode({3, 1}) == ["set", [["int", "1"], ["int", "3"]]]
    assert encode(frozenset({"z", "a"})) == ["frozenset", [["str", "a"], ["str", "z"]]]
    assert encode(decimal.Decimal("1.10")) == ["Decimal", "1.10"]
    assert encode(fractions.Fraction(6, -4)) == ["Fraction", "-3", "2"]
    assert encode(dt.date(2024, 2, 29)) == ["date", "2024-02-29"]
    assert encode(dt.datetime(2024, 1, 2, 3, 4, 5, 6)) == ["datetime", "2024-01-02T03:04:05.000006"]
    utc = dt.datetime(2024, 1, 2, tzinfo=dt.timezone(dt.timedelta(hours=-5)))
    assert encode(utc) == ["datetime", "2024-01-02T00:00:00-05:00"]
    assert encode(dt.time(1, 2)) == ["time", "01:02:00"]
    odd = dt.datetime(2024, 1, 2, tzinfo=OddZone())  # its utcoffset is never called
    assert encode(odd) == ["datetime", "2024-01-02T00:00:00", ["object", f"{Q}.OddZone", [["name", ["str", "X"]]]]]
    assert encode(dt.timedelta(days=-1, seconds=5, microseconds=7)) == ["timedelta", -1, 5, 7]
    assert encode(range(1, 10, 3)) == ["range", 1, 10, 3]
    assert encode(range(2**70)) == ["truncated"]
    json.dumps(encode(float("nan")), allow_nan=False)  # always plain JSON


def test_enums_exceptions_classes_and_opaque_things() -> None:
    assert encode(Color.RED) == ["enum", f"{Q}.Color", "RED"]
    assert encode(Level.HIGH) == ["enum", f"{Q}.Level", "HIGH"]  # an IntEnum is not an int
    assert encode(ValueError("bad", 3)) == ["exception", "builtins.ValueError",
                                            ["tuple", [["str", "bad"], ["int", "3"]]]]
    assert encode(Shop()) == ["exception", f"{Q}.Shop", ["tuple", []]]
    assert encode(Point) == ["class", f"{Q}.Point"]
    assert encode(int) == ["class", "builtins.int"]
    assert encode(len) == ["opaque", "builtins.builtin_function_or_method"]
    assert encode(lambda: 1) == ["opaque", "builtins.function"]
    assert encode(os) == ["opaque", "builtins.module"]
    assert encode(x for x in ()) == ["opaque", "builtins.generator"]
    assert encode(iter([1])) == ["opaque", "builtins.list_iterator"]
    assert encode(object()) == ["opaque", "builtins.object"]


def test_objects_and_builtin_subclasses_are_objects_never_the_builtin() -> None:
    assert encode(Point(1, "a")) == ["object", f"{Q}.Point", [["x", ["int", "1"]], ["y", ["str", "a"]]]]
    assert encode(Slotted()) == ["object", f"{Q}.Slotted",
                                 [["_Slotted__hidden", ["list", [["int", "2"]]]], ["a", ["int", "1"]]]]
    assert encode(AlwaysEqual()) == ["object", f"{Q}.AlwaysEqual", []]
    assert encode(MyInt(5)) == ["object", f"{Q}.MyInt", [["(int)", ["int", "5"]]]]
    assert encode(P(1, 2)) == ["object", f"{Q}.P", [["(tuple)", ["tuple", [["int", "1"], ["int", "2"]]]]]]
    assert encode(collections.Counter("aab")) == [
        "object", "collections.Counter", [["(dict)", ["dict", [[["str", "a"], ["int", "2"]], [["str", "b"], ["int", "1"]]]]]]]


def test_no_method_of_a_submitted_object_is_called() -> None:
    calls: list[str] = []

    class Meta(type):
        def __hash__(cls) -> int:
            calls.append("meta hash")
            return 1

        def __eq__(cls, other: object) -> bool:
            calls.append("meta eq")
            return True

    class Sneaky(dict, metaclass=Meta):
        def __getattribute__(self, name: str) -> Any:
            calls.append(f"getattribute {name}")
            return object.__getattribute__(self, name)

        def __iter__(self) -> Iterator[Any]:
            calls.append("iter")
            return iter(())

        def items(self) -> Any:
            calls.append("items")
            return []

        def __repr__(self) -> str:
            calls.append("repr")
            return "x"

    class Key:
        def __hash__(self) -> int:
            calls.append("key hash")
            return 0

        def __eq__(self, other: object) -> bool:
            calls.append("key eq")
            return True

    class FakeDict:
        @property
        def __dict__(self) -> dict:  # type: ignore[override]
            calls.append("dict property")
            return {"forged": 1}

    class Tricky(set):
        def __iter__(self) -> Iterator[Any]:
            calls.append("set iter")
            return iter(())

    sneaky = Sneaky(a=1)
    object.__setattr__(sneaky, "state", {Key(): 2})
    calls.clear()  # building the values above may call them; encoding may not
    got = encode([sneaky, FakeDict(), Tricky({1})])
    assert calls == []
    here = f"{Q}.test_no_method_of_a_submitted_object_is_called.<locals>"
    key = ["object", f"{here}.Key", []]
    assert got == ["list", [
        ["object", f"{here}.Sneaky", [["(dict)", ["dict", [[["str", "a"], ["int", "1"]]]]],
                                       ["state", ["dict", [[key, ["int", "2"]]]]]]],
        ["opaque", f"{here}.FakeDict"],
        ["object", f"{here}.Tricky", [["(set)", ["set", [["int", "1"]]]]]]]]


def test_deep_cyclic_and_huge_structures_are_truncated() -> None:
    cycle: list[Any] = []
    cycle.append(cycle)
    got = encode(cycle)
    for _ in range(13):  # levels 0..12 are encoded
        assert got[0] == "list"
        got = got[1][0]
    assert got == ["truncated"]
    point = Point(1, 2)
    point.x = point
    assert json.dumps(encode(point)).count('"truncated"') == 2  # x and y of the object at level 12
    assert encode(list(range(20_000))) == ["truncated"]  # 20,001 nodes
    assert encode(list(range(19_999)))[0] == "list"


def test_raises_observes_and_a_missing_raise_is_observed_and_the_test_goes_on() -> None:
    read, write = os.pipe()
    runtime.bind(write)
    runtime.begin(4)
    try:
        with runtime.raises(7, message=True) as info:
            raise KeyError("k")
        runtime.raised(7, runtime.message(info.value))  # the probe makes the text in its own frame
        with runtime.raises(8):
            raise Shop("secret")
        with runtime.raises(9) as missing:
            pass
        runtime.raised(9, runtime.message(missing.value))  # nothing raised there: nothing more is sent
        with pytest.raises(SystemExit), runtime.raises(10):
            raise SystemExit(1)
    finally:
        runtime.bind(None)
        runtime.begin(None)
        os.close(write)
    data = os.read(read, 65536)
    os.close(read)
    sent = runner.frames(data, 1 << 20)[0]
    assert isinstance(info.value, KeyError) and info.type is KeyError and missing.value is None
    bases = ["builtins.Exception", "builtins.BaseException", "builtins.object"]
    assert sent == [[4, 7, ["raised", ["builtins.KeyError", "builtins.LookupError", *bases], "'k'"]],
                    [4, 8, ["raised", [f"{Q}.Shop", *bases], None]], [4, 9, ["not raised"]]]
    with pytest.raises(RuntimeError, match="no frame channel"):
        runtime.observe(1, 1)
