"""pytest's rule for exceptions: the sandbox observes the exception's classes and text, the trusted
side decides as ``pytest.raises`` would (any subclass of a class the test named; ``re.search`` of
its ``match=`` pattern), and nothing a submitted class says about itself is believed."""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

import pytest

from envhub.verifiers.probes import excinfo, runner, runtime
from envhub.verifiers.probes.compare import judge, raised_as_expected, read_report
from envhub.verifiers.probes.compiler import ProbeCompileError, compile_tests
from envhub.verifiers.probes.record import RecordError, record_project

HERE = __name__


class QueryError(ValueError):
    pass


class EscapeError(QueryError):
    pass


class Sibling(ValueError):
    pass


def _names(cls: type) -> list[str]:
    return excinfo.names(cls)


def _chains(*classes: type) -> dict[str, list[str]]:
    """What the recording stores beside a predicate: the known classes' MROs (builtins left out)."""
    known = {k for c in classes for k in c.__mro__ if k.__module__ != "builtins"}
    return {excinfo.qualname(k): _names(k) for k in known}


CHAINS = _chains(QueryError, EscapeError, Sibling)
WANT = ["raises", [f"{HERE}.QueryError"], "position 3$", 0, CHAINS]


def test_any_subclass_of_a_named_class_passes_and_nothing_else() -> None:
    assert raised_as_expected(["raised", _names(QueryError), "invalid escape at position 3"], WANT)
    assert raised_as_expected(["raised", _names(EscapeError), "bad escape '%zz' at position 3"], WANT)
    assert not raised_as_expected(["raised", _names(Sibling), "invalid escape at position 3"], WANT)
    assert not raised_as_expected(["raised", _names(ValueError), "invalid escape at position 3"], WANT)
    assert not raised_as_expected(["not raised"], WANT)
    either = ["raises", [f"{HERE}.Sibling", "builtins.KeyError"], None, 0, CHAINS]  # pytest.raises((Sibling, KeyError))
    assert raised_as_expected(["raised", _names(Sibling), None], either)
    assert raised_as_expected(["raised", _names(KeyError), None], either)
    assert not raised_as_expected(["raised", _names(QueryError), None], either)


class Intermediate(QueryError):
    pass


class Leaf(Intermediate):
    pass


def _everything(*first: type) -> type:
    """A class that really inherits from the given classes, then every builtin exception that fits."""
    import builtins

    chosen: list[type] = list(first)
    for base in sorted((c for c in vars(builtins).values() if isinstance(c, type) and issubclass(c, Exception)),
                       key=lambda c: -len(c.__mro__)):
        try:
            type("Everything", (*chosen, base), {})
        except TypeError:
            continue
        chosen.append(base)
    return type("Everything", tuple(chosen), {})


def test_a_subclass_of_everything_fails_and_every_honest_subclass_passes() -> None:
    """The known classes observed must lie in the gold MRO of the most derived of them: one branch."""
    chains = _chains(QueryError, EscapeError, Sibling, Intermediate, Leaf)
    want = ["raises", [f"{HERE}.QueryError"], None, 0, chains]
    honest = [QueryError, EscapeError, Leaf, type("Mine", (QueryError,), {}), type("Deep", (Leaf,), {}),
              type("Twice", (type("Own", (QueryError,), {}),), {})]  # classes a fix adds, on one branch
    for cls in honest:
        assert raised_as_expected(_observed(_raise(cls("x")), message=False), want), cls
    chained = QueryError("x")
    chained.__cause__ = KeyError("cause")  # raise ... from ...: the class is what counts
    assert raised_as_expected(_observed(_raise(chained), message=False), want)
    retyped = Sibling("k")
    retyped.__class__ = QueryError  # the interpreter's type now: pytest would accept it, and so do we
    assert raised_as_expected(_observed(_raise(retyped), message=False), want)
    widened = [_everything(QueryError), _everything(KeyError, QueryError), _everything(Sibling, EscapeError),
               type("Two", (QueryError, KeyError), {}), type("Mixed", (type("Own", (Sibling,), {}), QueryError), {})]
    for cls in widened:
        assert issubclass(cls, QueryError)  # pytest.raises(QueryError) would pass every one of them
        assert not raised_as_expected(_observed(_raise(cls("x")), message=False), want), cls.__mro__

    class Branches(type):
        def mro(cls) -> list[type]:
            return [cls, QueryError, KeyError, LookupError, ValueError, Exception, BaseException, object]

    assert not raised_as_expected(_observed(_raise(Branches("Meta", (Exception,), {})("x")), message=False), want)
    # a moved class (found at its new name only) is unknown: it is not the one the test imported
    moved = type("QueryError", (ValueError,), {"__module__": "elsewhere"})
    assert not raised_as_expected(["raised", [f"{HERE}.Moved", *_names(ValueError)], None], want)
    assert not raised_as_expected(_observed(_raise(moved("x")), message=False), want)
    # forged names: only strings, and a forged chain is held to the same rule
    assert not raised_as_expected(["raised", [f"{HERE}.QueryError", 3], None], want)
    assert not raised_as_expected(["raised", [f"{HERE}.QueryError", "builtins.KeyError",
                                              *_names(ValueError)], None], want)


def test_match_is_re_search_on_the_trusted_side() -> None:
    for text in ("invalid escape at position 3", "position 3", "at position 3\n"):
        assert raised_as_expected(["raised", _names(QueryError), text], WANT), text
    for text in ("invalid escape at position 3.", "position 31", "position  3", "", None, ["str", "position 3"]):
        assert not raised_as_expected(["raised", _names(QueryError), text], WANT), text
    flagged = ["raises", ["builtins.ValueError"], "^BAD", 2]  # re.IGNORECASE, from re.compile(..., re.I)
    assert raised_as_expected(["raised", _names(ValueError), "bad input"], flagged)


def test_malformed_or_forged_observations_fail() -> None:
    for got in (["raised", f"{HERE}.QueryError", "position 3"], ["raised", [f"?{HERE}.QueryError"], "position 3"],
                ["raised", [[f"{HERE}.QueryError"]], "position 3"], ["raised", _names(QueryError)], "raised", None,
                ["exception", f"{HERE}.QueryError", ["tuple", []]]):
        assert not raised_as_expected(got, WANT), got
    line = json.dumps({"index": 0, "status": "ok", "observations": [[5, ["raised", _names(EscapeError),
                                                                         "at position 3"]]], "detail": ""})
    gold = {"status": "ok", "observations": [[5, WANT]]}
    assert judge(read_report(line, {0}), 0, gold, {}).passed
    other_site = line.replace("[[5,", "[[6,")
    assert not judge(read_report(other_site, {0}), 0, gold, {}).passed


# ---- the sandbox side: what raises observes -------------------------------------------------------

class _Claims(type):
    """Answers every question about its classes as QueryError would."""

    def __getattribute__(cls, name: str) -> object:
        lies = {"__mro__": QueryError.__mro__, "__qualname__": "QueryError", "__name__": "QueryError",
                "__module__": HERE}
        return lies[name] if name in lies else type.__getattribute__(cls, name)


class Liar(ValueError, metaclass=_Claims):
    __class__ = property(lambda self: QueryError)  # type: ignore[assignment]


class _Impostor(ValueError):
    pass


_Impostor.__qualname__ = "QueryError"


class _Loud(str):
    def __format__(self, spec: str) -> str:
        raise AssertionError("a method of the submission's str subclass ran")

    __str__ = __repr__ = __format__  # type: ignore[assignment]


class _Named(ValueError):
    pass


_Named.__qualname__ = _Loud("_Named")


class _Reordered(type):
    def mro(cls) -> list[type]:
        return [cls, QueryError, ValueError, Exception, BaseException, object]


class Adopted(Exception, metaclass=_Reordered):
    pass


def _observed(raise_it: object, message: bool = True) -> list:
    read, write = os.pipe()
    runtime.bind(write)
    runtime.begin(1)
    try:
        with runtime.raises(3, message=message) as info:
            raise_it()  # type: ignore[operator]
        if message:
            runtime.raised(3, runtime.message(info.value))
    finally:
        runtime.bind(None)
        runtime.begin(None)
        os.close(write)
    data = os.read(read, 1 << 20)
    os.close(read)
    [frame] = runner.frames(data, 1 << 20)[0]
    assert frame[:2] == [1, 3]
    return frame[2]


def _raise(exc: BaseException):
    def go() -> None:
        raise exc
    return go


def test_classes_are_named_as_the_interpreter_holds_them() -> None:
    liar = Liar("at position 3")
    assert isinstance(liar, QueryError) and Liar.__mro__ == QueryError.__mro__  # what pytest.raises would believe
    got = _observed(_raise(liar))
    assert got == ["raised", [f"{HERE}.Liar", "builtins.ValueError", "builtins.Exception", "builtins.BaseException",
                              "builtins.object"], "at position 3"]
    assert not raised_as_expected(got, WANT)
    impostor = _observed(_raise(_Impostor("at position 3")))
    assert impostor[1][0] == f"?{HERE}.QueryError" and not raised_as_expected(impostor, WANT)  # not found at its name
    # a str subclass as __qualname__ is read as the plain str it holds: none of its methods runs
    assert _observed(_raise(_Named("x")), message=False) == ["raised", [f"{HERE}._Named", *_names(ValueError)], None]
    # a metaclass mro() is the interpreter's MRO: ``except QueryError`` catches it too, so pytest's rule accepts it
    assert issubclass(Adopted, QueryError)
    assert raised_as_expected(_observed(_raise(Adopted("at position 3"))), WANT)


def test_the_message_is_what_pytest_searches() -> None:
    error = QueryError("bad escape")
    error.add_note("at position 3")
    assert _observed(_raise(error)) == ["raised", _names(QueryError), "bad escape\nat position 3"]

    class Custom(QueryError):
        def __str__(self) -> str:
            return "custom text at position 3"

    assert _observed(_raise(Custom("args", 1)))[2] == "custom text at position 3"
    assert _observed(_raise(QueryError("not sent")), message=False)[2] is None

    class Broken(QueryError):
        def __str__(self) -> str:
            raise RuntimeError("no text")

    read, write = os.pipe()
    runtime.bind(write)
    try:
        with runtime.raises(3, message=True) as info:
            raise Broken()
        with pytest.raises(RuntimeError, match="no text"):  # pytest's match= raises too: the test errors
            runtime.raised(3, runtime.message(info.value))  # and the site is never observed
    finally:
        runtime.bind(None)
        os.close(write)
    os.close(read)


# ---- the compiler and the recording: the predicate stays on the trusted side ---------------------

SOURCE = '''
import pytest
from shop import ShopError, parse


@pytest.mark.parametrize("text, error, fragment", [("x", ShopError, "SECRET-FRAGMENT"), ("", KeyError, "SECRET-KEY")])
def test_parse_errors(text, error, fragment):
    with pytest.raises(error, match=fragment) as info:
        parse(text)
    assert info.type is not None


def test_either():
    with pytest.raises((ShopError, KeyError)):
        parse("y")
    with pytest.raises(ShopError, match=rf"^SECRET-{1 + 1}\\b"):
        parse("z")


def test_frozen():
    import dataclasses
    with pytest.raises(dataclasses.FrozenInstanceError):
        parse("frozen")
'''


def test_raises_expectations_never_reach_the_probe() -> None:
    probe = compile_tests("tests/test_shop.py", SOURCE)
    for text in probe.modules.values():
        assert "SECRET" not in text and "ShopError" not in text.split("import", 2)[-1].split("\n", 1)[1]
    assert "@cases('text', ['x', ''])" in probe.modules["test_parse_errors"]
    assert sorted(probe.raising.values(), key=lambda r: r["classes"]) == [
        {"function": "test_either", "imports": [], "classes": "(ShopError, KeyError)", "match": None},
        {"function": "test_either", "imports": [], "classes": "ShopError", "match": "f'^SECRET-{1 + 1}\\\\b'"},
        {"function": "test_frozen", "imports": ["import dataclasses"], "classes": "dataclasses.FrozenInstanceError",
         "match": None},  # the test's own import goes with it
        {"function": "test_parse_errors", "imports": [], "classes": "error", "match": "fragment"},
    ]
    with pytest.raises(ProbeCompileError, match="one class or tuple"):
        compile_tests("t.py", "import pytest\n\ndef test_a():\n    with pytest.raises(E, check=f):\n        g()\n")


SHOP = '''
import dataclasses


class ShopError(ValueError):
    pass


class SoldOut(ShopError):
    pass


def parse(text):
    if text == "":
        raise KeyError("SECRET-KEY")
    if text == "x":
        raise SoldOut("SECRET-FRAGMENT at x")
    if text == "z":
        raise ShopError("SECRET-2 z")
    if text == "frozen":
        raise dataclasses.FrozenInstanceError("cannot assign")
    raise ShopError(text)
'''


def _project(root: Path, shop: str) -> Path:
    (root / "src").mkdir(parents=True)
    (root / "tests").mkdir()
    (root / "src" / "shop.py").write_text(textwrap.dedent(shop))
    (root / "tests" / "test_shop.py").write_text(SOURCE)
    return root


def test_recording_resolves_each_case_on_the_gold(tmp_path: Path) -> None:
    root = _project(tmp_path / "shop", SHOP)
    suite = record_project(root, {"src/shop.py": SHOP}, {"tests/test_shop.py": SOURCE})
    predicates = sorted(([test.split("::")[1].split("[")[0], o[1][:4]] for test, segments in suite.expected.items()
                         for seg in segments for o in seg["observations"] if o[1][0] == "raises"), key=json.dumps)
    assert predicates == sorted([
        ["test_either", ["raises", ["builtins.KeyError", "shop.ShopError"], None, 0]],
        ["test_either", ["raises", ["shop.ShopError"], "^SECRET-2\\b", 0]],
        ["test_frozen", ["raises", ["dataclasses.FrozenInstanceError"], None, 0]],
        ["test_parse_errors", ["raises", ["builtins.KeyError"], "SECRET-KEY", 0]],  # each case its own
        ["test_parse_errors", ["raises", ["shop.ShopError"], "SECRET-FRAGMENT", 0]],
    ], key=json.dumps)
    base = ["builtins.ValueError", "builtins.Exception", "builtins.BaseException", "builtins.object"]
    frozen = ["dataclasses.FrozenInstanceError", "builtins.AttributeError", *base[1:]]
    for test, segments in suite.expected.items():  # the project's classes, and the expected ones' MROs
        for chains in (o[1][4] for seg in segments for o in seg["observations"] if o[1][0] == "raises"):
            assert chains == {"shop.ShopError": ["shop.ShopError", *base],
                              "shop.SoldOut": ["shop.SoldOut", "shop.ShopError", *base],
                              **({"dataclasses.FrozenInstanceError": frozen} if "frozen" in test else {})}, test
    assert all("SECRET" not in text for probe in suite.probes.values() for text in probe.modules.values())
    wrong = SHOP.replace("raise KeyError(", "raise LookupError(")  # a base class of the one expected
    with pytest.raises(RecordError, match=r"not what pytest\.raises expects"):
        record_project(_project(tmp_path / "wrong", wrong), {"src/shop.py": wrong}, {"tests/test_shop.py": SOURCE})
