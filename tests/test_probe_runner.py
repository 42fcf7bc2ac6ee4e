"""The in-sandbox half of probe grading: the runtime's canonical encoding and the runner's isolation.

Encoding is checked in-process on the host. The runner runs hand-made probe modules and plans as a
plain subprocess on the host and, through ``exec`` and ``exec_python``, inside real docker and
bwrap sandboxes: ordinary tests, parametrized cases, fixtures and ``raises``, then every way a
submission can misbehave (hang, flood, fork bomb, a setsid'd double-forked writer, forged frames,
failing imports, ``os._exit`` at import, ``sys.exit`` in a test). Statuses and observations are
asserted exactly; the runner must report every test once and finish promptly.
"""

from __future__ import annotations

import collections
import datetime as dt
import decimal
import enum
import fractions
import json
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sandbox_fixtures import backend_params, require_backend

from envhub.sandboxes import SandboxSpec, new_sandbox
from envhub.sandboxes.base import Limits
from envhub.verifiers.probes import runner, runtime
from envhub.verifiers.probes.runtime import encode

PACKAGE = Path(runtime.__file__).resolve().parent
RUNTIME_SOURCE = (PACKAGE / "runtime.py").read_text(encoding="utf-8")
RUNNER_SOURCE = (PACKAGE / "runner.py").read_text(encoding="utf-8")
PROBE_DIR = ".envhub_probe"
RUNNER = f"{PROBE_DIR}/envhub_probe_runner.py"
PLAN = f"{PROBE_DIR}/plan.json"
TIMEOUT_S = 2.0
MAX_BYTES = 100_000
LIMITS = Limits(cpus=1.0, memory_mb=512, pids=64, timeout_s=60.0, output_bytes=1 << 20, disk_mb=64)


# ---- encoding (in-process) ------------------------------------------------------------------------

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


def test_raises_observes_and_not_raised_ends_the_test() -> None:
    read, write = os.pipe()
    runtime.bind(write)
    runtime.begin(4)
    try:
        with runtime.raises(7, message=True) as info:
            raise KeyError("k")
        with runtime.raises(8):
            raise Shop("secret")
        with pytest.raises(runtime.NotRaised), runtime.raises(9):
            pass
        with pytest.raises(SystemExit), runtime.raises(10):
            raise SystemExit(1)
    finally:
        runtime.bind(None)
        runtime.begin(None)
        os.close(write)
    data = os.read(read, 65536)
    os.close(read)
    sent = runner.frames(data, 1 << 20)[0]
    assert isinstance(info.value, KeyError)
    assert sent == [[4, 7, ["raised", "builtins.KeyError", ["tuple", [["str", "k"]]]]],
                    [4, 8, ["raised", f"{Q}.Shop", None]], [4, 9, ["not raised"]]]
    with pytest.raises(RuntimeError, match="no frame channel"):
        runtime.observe(1, 1)


# ---- the runner: a project that does everything wrong --------------------------------------------

SRC = {
    "shop/__init__.py": """
        class Cart:
            def __init__(self):
                self.items = {}
            def add(self, name, qty):
                self.items[name] = self.items.get(name, 0) + qty
            def count(self):
                return sum(self.items.values())
            def remove(self, name):
                if name not in self.items:
                    raise KeyError(name, "not in cart")
                del self.items[name]
        """,
    "shop/exiter.py": "import os\nos._exit(0)\n",
    "shop/bomb.py": """
        import os, time
        def bomb():
            made = 0
            while True:
                try:
                    pid = os.fork()
                except OSError:
                    return made
                if pid == 0:
                    os.setsid()
                    while True:
                        try:
                            os.fork()
                        except OSError:
                            time.sleep(0.05)
                made += 1
        """,
}

MODULES = {
    "test_basic": """
        import sys
        from envhub_probe import cases, fixture, observe, raises
        import shop

        @fixture
        def cart():
            c = shop.Cart()
            yield c
            c.items.clear()

        @fixture
        def stocked(cart):
            cart.add("apple", 3)
            return cart

        @cases("name, qty", [("pear", 1), ("fig", 2)])
        @cases("extra", [10, 20])
        def test_add(name, qty, extra, stocked, unused=None):
            stocked.add(name, qty + extra)
            observe(stocked.count(), 1)
            observe(stocked.items, 2)

        def test_raises():
            with raises(3, message=True) as info:
                shop.Cart().remove("ghost")
            observe(info.value.args[0], 4)
            with raises(5):
                {}["k"]

        def test_not_raised():
            with raises(6):
                shop.Cart()
            observe("unreachable", 7)

        def test_assert_fails():
            observe(1, 8)
            assert shop.Cart().count() == 1, "wrong count"

        def test_sys_exit():
            sys.exit(3)

        def test_after_exit(cart):
            observe(cart.count(), 9)

        @fixture
        def broken():
            yield 1
            raise RuntimeError("teardown broke")

        def test_teardown_error(broken):
            observe(broken, 10)
        """,
    "test_hang": """
        import time
        from envhub_probe import observe
        def test_hang():
            observe(1, 1)
            while True:
                time.sleep(0.05)
        def test_never():
            observe(2, 2)
        """,
    "test_flood": """
        from envhub_probe import observe
        def test_flood():
            observe(1, 1)
            while True:
                observe("x" * 20000, 2)
        def test_after_flood():
            observe(0, 3)
        """,
    "test_forge": """
        import os
        import envhub_probe
        from envhub_probe import observe
        def test_forge():
            envhub_probe.send([13, 1, ["str", "forged"]])   # for a later test
            envhub_probe.send([12, "end"])                  # ends itself early ...
            observe(1, 1)                                   # ... so this is late
        def test_victim():
            observe(2, 2)
        def test_unknown_index():
            envhub_probe.send([999, 1, ["int", "1"]])
        def test_garbage():
            os.write(envhub_probe._channel, b"\\x00\\x00\\x00\\x05hello")
        def test_corrupt_header():
            os.write(envhub_probe._channel, b"\\xff\\xff\\xff\\xff")
        def test_lost():
            observe(3, 3)
        """,
    "test_escape": """
        import json, os, struct, time
        import envhub_probe
        from envhub_probe import observe

        def _writer(fd, runner):
            try:
                out, result = open(f"/proc/{runner}/fd/1", "w"), "opened"
            except OSError:
                out, result = None, "denied"
            with open("proc_fd.txt", "w") as fh:
                fh.write(result)
            with open("writer.tmp", "w") as fh:
                fh.write(str(os.getpid()))
            os.rename("writer.tmp", "writer.pid")
            body = json.dumps([19, 1, ["str", "forged"]]).encode()
            line = json.dumps({"index": 19, "status": "ok", "observations": [], "detail": "", "forged": True})
            while True:
                try:
                    os.write(fd, struct.pack(">I", len(body)) + body)
                except OSError:
                    pass
                if out is not None:
                    try:
                        out.write(line + "\\n")
                        out.flush()
                    except OSError:
                        pass
                time.sleep(0.005)

        def test_spawn_writer():
            fd, runner = envhub_probe._channel, os.getppid()
            first = os.fork()
            if first == 0:
                os.setsid()
                if os.fork() == 0:
                    _writer(fd, runner)
                os._exit(0)
            os.waitpid(first, 0)
            deadline = time.monotonic() + 5
            while not os.path.exists("writer.pid") and time.monotonic() < deadline:
                time.sleep(0.01)
            time.sleep(0.2)

        def test_escape_victim():
            observe(1, 1)
        """,
    "test_after_escape": """
        import os
        from envhub_probe import observe
        def test_writer_is_dead():
            with open("writer.pid") as fh:
                pid = int(fh.read())
            observe(os.path.exists(f"/proc/{pid}"), 1)
            with open("proc_fd.txt") as fh:
                observe(fh.read(), 2)
        """,
    "test_import_fails": """
        import shop.nope
        def test_one():
            pass
        def test_two():
            pass
        """,
    "test_exit_at_import": """
        import shop.exiter
        def test_one():
            pass
        def test_two():
            pass
        """,
    "test_bomb": """
        from envhub_probe import observe
        import shop.bomb
        def test_bomb():
            observe(shop.bomb.bomb() > 0, 1)
        """,
    "test_alive": """
        from envhub_probe import observe
        def test_alive():
            observe(1, 1)
        """,
    "test_deep": """
        import os
        import envhub_probe
        from envhub_probe import observe
        def test_deep_json():
            value = ["None"]
            for _ in range(100):
                value = ["list", [value]]
            envhub_probe.send([envhub_probe._test, 1, value])
        def test_nan():
            body = b'[%d, 1, NaN]' % envhub_probe._test
            os.write(envhub_probe._channel, len(body).to_bytes(4, "big") + body)
        """,
    "test_signals": """
        import os, signal
        from envhub_probe import observe
        def test_signal_the_runner():
            for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGRTMIN):
                os.kill(os.getppid(), sig)
            observe(signal.getsignal(signal.SIGINT) in (signal.default_int_handler, signal.SIG_DFL), 1)  # not SIG_IGN
            observe(signal.getsignal(signal.SIGTERM) == signal.SIG_DFL, 2)
        def test_runner_survived():
            observe(1, 3)
        """,
}

#: (module, function, indices) in plan order; the list position is the test's plan index
TESTS = [
    ("test_basic", "test_add", {"name": 0, "qty": 0, "extra": 1}),      # 0
    ("test_basic", "test_add", {"name": 1, "qty": 1, "extra": 0}),      # 1
    ("test_basic", "test_raises", {}),                                  # 2
    ("test_basic", "test_not_raised", {}),                              # 3
    ("test_basic", "test_assert_fails", {}),                            # 4
    ("test_basic", "test_sys_exit", {}),                                # 5
    ("test_basic", "test_after_exit", {}),                              # 6
    ("test_basic", "test_teardown_error", {}),                          # 7
    ("test_hang", "test_hang", {}),                                     # 8
    ("test_hang", "test_never", {}),                                    # 9
    ("test_flood", "test_flood", {}),                                   # 10
    ("test_flood", "test_after_flood", {}),                             # 11
    ("test_forge", "test_forge", {}),                                   # 12
    ("test_forge", "test_victim", {}),                                  # 13
    ("test_forge", "test_unknown_index", {}),                           # 14
    ("test_forge", "test_garbage", {}),                                 # 15
    ("test_forge", "test_corrupt_header", {}),                          # 16
    ("test_forge", "test_lost", {}),                                    # 17
    ("test_escape", "test_spawn_writer", {}),                           # 18
    ("test_escape", "test_escape_victim", {}),                          # 19
    ("test_after_escape", "test_writer_is_dead", {}),                   # 20
    ("test_import_fails", "test_one", {}),                              # 21
    ("test_import_fails", "test_two", {}),                              # 22
    ("test_exit_at_import", "test_one", {}),                            # 23
    ("test_exit_at_import", "test_two", {}),                            # 24
    ("test_bomb", "test_bomb", {}),                                     # 25 (sandboxes only)
    ("test_alive", "test_alive", {}),                                   # 26
    ("test_deep", "test_deep_json", {}),                                # 27
    ("test_deep", "test_nan", {}),                                      # 28
    ("test_signals", "test_signal_the_runner", {}),                     # 29
    ("test_signals", "test_runner_survived", {}),                       # 30
]
BOMB = 25


def _int(n: int) -> list:
    return ["int", str(n)]


def project(tests: list[tuple[str, str, dict[str, int]]], modules: dict[str, str], src: dict[str, str],
            **plan: Any) -> dict[str, str]:
    """Every file of a grading directory: runtime, runner, probe modules, submission, plan."""
    files = {f"{PROBE_DIR}/envhub_probe.py": RUNTIME_SOURCE, RUNNER: RUNNER_SOURCE}
    files.update({f"{PROBE_DIR}/tests/{name}.py": textwrap.dedent(code) for name, code in modules.items()})
    files.update({f"src/{path}": textwrap.dedent(code) for path, code in src.items()})
    batches: list[dict[str, Any]] = []
    for index, (module, function, indices) in enumerate(tests):
        if index in plan.get("skip", ()):
            continue
        path = f"{PROBE_DIR}/tests/{module}.py"
        if not batches or batches[-1]["module"] != path:
            batches.append({"module": path, "tests": []})
        batches[-1]["tests"].append({"index": index, "function": function, "indices": indices})
    body = {"probe_dir": PROBE_DIR, "paths": ["src"], "preload": ["decimal", "fractions", "json"],
            "timeout_s": plan.get("timeout_s", TIMEOUT_S), "max_bytes": MAX_BYTES, "batches": batches,
            "stats": True}
    files[PLAN] = json.dumps(body)
    return files


def parse(stdout: str, planned: set[int], forged_ok: bool = False) -> dict[int, dict[str, Any]]:
    """The runner's report: each planned test exactly once, then ``{"done": true}`` last."""
    lines = stdout.splitlines()
    assert lines and json.loads(lines[-1]) == {"done": True}, stdout[-2000:]
    records: dict[int, dict[str, Any]] = {}
    for line in lines[:-1]:
        record = json.loads(line)
        if record.get("forged"):
            assert forged_ok, "a forged line reached the runner's stdout"
            continue
        assert ": " not in line.split('"observations"')[0]  # compact
        assert set(record) == {"index", "status", "observations", "detail"}
        assert record["index"] not in records, f"test {record['index']} reported twice"
        records[record["index"]] = record
    assert set(records) == planned
    return records


def check_attacks(records: dict[int, dict[str, Any]], proc_fd: str, bomb: bool) -> None:
    def expect(index: int, status: str, observations: list | None = None, detail: str = "") -> None:
        got = records[index]
        assert got["status"] == status, (index, got)
        if observations is not None:
            assert got["observations"] == observations, (index, got)
        assert got["detail"].startswith(detail), (index, got)

    stock = [["str", "apple"], _int(3)]
    expect(0, "ok", [[1, _int(24)], [2, ["dict", [[stock[0], stock[1]], [["str", "pear"], _int(21)]]]]])
    expect(1, "ok", [[1, _int(15)], [2, ["dict", [[["str", "apple"], _int(3)], [["str", "fig"], _int(12)]]]]])
    expect(2, "ok", [[3, ["raised", "builtins.KeyError", ["tuple", [["str", "ghost"], ["str", "not in cart"]]]]],
                     [4, ["str", "ghost"]], [5, ["raised", "builtins.KeyError", None]]])
    expect(3, "raised", [[6, ["not raised"]]], "envhub_probe.NotRaised")
    expect(4, "raised", [[8, _int(1)]], "builtins.AssertionError: wrong count (probe line")
    expect(5, "raised", [], "builtins.SystemExit")
    expect(6, "ok", [[9, _int(0)]])
    expect(7, "raised", [[10, _int(1)]], "builtins.RuntimeError: teardown broke")
    expect(8, "timeout", [[1, _int(1)]], "the batch ran past its 2s limit")
    expect(9, "timeout", [], "not run: the batch ran past")
    flood = records[10]["observations"]
    expect(10, "flood", None, "the batch sent more than 100000 bytes")
    assert flood[0] == [1, _int(1)] and len(flood) >= 2 and all(o == [2, ["str", "x" * 20000]] for o in flood[1:])
    expect(11, "flood", [], "not run: ")
    expect(12, "late", [], "a frame after the test ended")
    expect(13, "malformed", [[2, _int(2)]], "a frame before the test started")
    expect(14, "malformed", [], "an undecodable or unattributable frame")
    expect(15, "malformed", [], "an undecodable or unattributable frame")
    expect(16, "malformed", [], "the frame stream is corrupt")
    expect(17, "malformed", [], "the frame stream is corrupt")
    expect(18, "ok", [])
    expect(19, "malformed", None, "a frame before the test started")
    expect(20, "ok", [[1, ["bool", False]], [2, ["str", proc_fd]]])
    expect(21, "raised", [], "builtins.ModuleNotFoundError: import failed: No module named 'shop.nope'")
    expect(22, "raised", [], "builtins.ModuleNotFoundError: import failed: ")
    expect(23, "crashed", [], "the test process exited with code 0 before the test ended")
    expect(24, "crashed", [], "not run: the test process exited with code 0")
    if bomb:
        expect(BOMB, "ok", [[1, ["bool", True]]])
    expect(26, "ok", [[1, _int(1)]])
    expect(27, "malformed", [], "an undecodable or unattributable frame")  # deeper than any encoding
    expect(28, "malformed", [], "an undecodable or unattributable frame")
    expect(29, "ok", [[1, ["bool", True]], [2, ["bool", True]]])  # the child has the usual handlers back
    expect(30, "ok", [[3, _int(1)]])


#: the runner's source run the way ``exec_python`` runs it, but with ``__name__`` not "__main__"
EXEC_STYLE = ("import sys; exec(compile(open(sys.argv[1]).read() + '\\nimport sys; sys.exit(main(sys.argv[2]))',"
              " 'runner', 'exec'), {'__name__': 'envhub_probe_runner'})")


@pytest.mark.parametrize("style", ["script", "exec"])
def test_runner_on_the_host_reports_every_attack_once(tmp_path: Path, style: str) -> None:
    for rel, text in project(TESTS, MODULES, SRC, skip={BOMB}).items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text, encoding="utf-8")
    argv = [sys.executable, "-I", RUNNER, PLAN] if style == "script" else [sys.executable, "-I", "-c", EXEC_STYLE,
                                                                           RUNNER, PLAN]
    bystander = subprocess.Popen(["sleep", "60"])  # same uid, not the runner's descendant: must survive
    t0 = time.monotonic()
    try:
        proc = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=60)
        wall = time.monotonic() - t0
        assert bystander.poll() is None
    finally:
        bystander.kill()
        bystander.wait()
    assert proc.returncode == 0, proc.stderr
    root = os.geteuid() == 0  # root may open a non-dumpable process's fds; a sandbox's uid may not
    records = parse(proc.stdout, set(range(len(TESTS))) - {BOMB}, forged_ok=root)
    check_attacks(records, "opened" if root else "denied", bomb=False)
    assert wall < TIMEOUT_S + 5, f"the runner stalled: {wall:.1f}s"


def test_runner_rejects_a_bad_plan(tmp_path: Path) -> None:
    (tmp_path / "plan.json").write_text(json.dumps({"probe_dir": ".", "batches": [
        {"module": "m.py", "tests": [{"index": 1, "function": "f"}, {"index": 1, "function": "g"}]}]}))
    (tmp_path / RUNNER).parent.mkdir()
    (tmp_path / RUNNER).write_text(RUNNER_SOURCE)
    proc = subprocess.run([sys.executable, "-I", RUNNER, "plan.json"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=30)
    assert proc.returncode == 2 and "test index 1 appears twice" in proc.stderr and proc.stdout == ""


def test_kills_only_descendants() -> None:
    assert not runner._descends_from(os.getppid(), os.getpid())
    assert runner._descends_from(os.getpid(), os.getppid())
    assert os.getpid() not in runner.descendants(os.getpid())


# ---- inside real sandboxes ------------------------------------------------------------------------

@pytest.fixture(scope="module")
def sandboxes() -> Iterator[dict[str, Any]]:
    opened: dict[str, Any] = {}
    yield opened
    for sb in opened.values():
        sb.close()


def _sandbox(sandboxes: dict[str, Any], backend: str) -> Any:
    require_backend(backend)
    if backend not in sandboxes:
        sandboxes[backend] = new_sandbox(backend, SandboxSpec(limits=LIMITS, role="grading",
                                                             preload=("decimal", "fractions", "json")))
    return sandboxes[backend]


def _run(sb: Any, mode: str, cwd: str) -> Any:
    if mode == "exec":
        return sb.exec(["python3", "-I", RUNNER, PLAN], cwd=cwd, timeout=60)
    return sb.exec_python(RUNNER_SOURCE + f"\nimport sys; sys.exit(main({PLAN!r}))", cwd=cwd, timeout=60)


@pytest.mark.parametrize("mode", ["exec", "exec_python"])
@pytest.mark.parametrize("backend", backend_params("docker", "bwrap"))
def test_runner_in_a_sandbox_contains_every_attack(sandboxes: dict[str, Any], backend: str, mode: str) -> None:
    sb = _sandbox(sandboxes, backend)
    sb.write_files({f"{mode}/{rel}": text for rel, text in project(TESTS, MODULES, SRC).items()})
    result = _run(sb, mode, mode)
    assert result.exit_code == 0 and not result.truncated, result.summary()[-3000:]
    check_attacks(parse(result.stdout, set(range(len(TESTS)))), "denied", bomb=True)
    assert result.duration_s < TIMEOUT_S + 8, f"the runner stalled: {result.duration_s:.1f}s"
    left = sb.exec(["python3", "-c", "import os; print(sum(p.isdigit() for p in os.listdir('/proc')))"])
    assert left.stdout == "2\n", sb.exec("ps -eo pid,ppid,args").stdout  # the executor and this python


TIMING_MODULE = """
    from envhub_probe import cases, observe
    import shop
    @cases("n", [1, 2, 3])
    def test_f{n}(n):
        cart = shop.Cart()
        cart.add("a", n)
        observe(cart.count(), 1)
        observe(cart.items, 2)
        observe([n, "x", 1.5], 3)
    """


@pytest.mark.parametrize("backend", backend_params("docker", "bwrap"))
def test_thirty_test_functions_take_little_runner_time(sandboxes: dict[str, Any], backend: str) -> None:
    """One batch per test function (as the grader plans them), three cases each, via exec_python."""
    sb = _sandbox(sandboxes, backend)
    modules = {f"test_t{n}": TIMING_MODULE.format(n=n) for n in range(30)}
    tests = [(f"test_t{n}", f"test_f{n}", {"n": row}) for n in range(30) for row in range(3)]
    sb.write_files({f"timing/{rel}": text for rel, text in project(tests, modules, SRC).items()})
    best = None
    for _ in range(3):
        result = _run(sb, "exec_python", "timing")
        records = parse(result.stdout, set(range(90)))
        assert all(r["status"] == "ok" for r in records.values())
        assert records[0]["observations"][2] == [3, ["list", [_int(1), ["str", "x"], ["float", "1.5"]]]]
        stats = [json.loads(line) for line in result.stderr.splitlines() if line.startswith('{"batch"')]
        batches = sum(s["run_s"] + s["kill_s"] for s in stats)
        cpu = sum(s["cpu_s"] for s in stats)
        best = min(best or batches, batches)
        print(f"\n{backend}: 30 batches of 3 tests: {batches * 1000:.1f} ms wall in batches "
              f"({batches / 30 * 1000:.2f} ms per batch, CPU {cpu / 30 * 1000:.2f} ms per batch), "
              f"{result.duration_s * 1000:.1f} ms runner wall")
    assert best is not None and best < 1.0  # well under 100 ms on an idle machine; generous for CI load
