"""A hand-made grading directory that does everything wrong, and how the runner must report it.

Shared by ``tests/test_probe_runner.py``: :func:`project` lays out runtime, runner, probe modules,
submission and plan; :func:`parse` reads the runner's stdout (every planned test exactly once, then
``{"done": true}``); :func:`check_attacks` asserts each test's status and observations exactly.
"""

from __future__ import annotations

import json
import textwrap
from typing import Any

from envhub.verifiers.probes.grader import PROBE_DIR, RUNNER_FILE, shipped_sources

RUNNER_SOURCE = shipped_sources()[RUNNER_FILE]
RUNNER = f"{PROBE_DIR}/{RUNNER_FILE}"
PLAN = f"{PROBE_DIR}/plan.json"
TIMEOUT_S = 2.0
MAX_BYTES = 100_000

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
        from envhub_probe import message as _envhub_message, raised as _envhub_raised
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
            _envhub_raised(3, _envhub_message(info.value))
            observe(info.value.args[0], 4)
            with raises(5):
                {}["k"]

        def test_not_raised():
            with raises(6):
                shop.Cart()
            observe("goes on", 7)

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
            envhub_probe.send([27, 1, value])  # its own plan index: frames are anyone's to write
        def test_nan():
            body = b'[%d, 1, NaN]' % 28
            os.write(envhub_probe._channel, len(body).to_bytes(4, "big") + body)
        """,
    "test_signals": """
        import os, signal
        from envhub_probe import observe
        def test_signal_the_runner():
            refused = 0
            for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGRTMIN, signal.SIGSTOP):
                for target in (os.getppid(), -os.getpgid(os.getppid()), -1):
                    try:
                        os.kill(target, sig)
                    except PermissionError:
                        refused += 1
            observe(refused, 0)  # no test process may signal the runner, its group or everyone
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


def int_enc(n: int) -> list:
    return ["int", str(n)]


def project(tests: list[tuple[str, str, dict[str, int]]], modules: dict[str, str], src: dict[str, str],
            **plan: Any) -> dict[str, str]:
    """Every file of a grading directory: runtime, runner, probe modules, submission, plan."""
    files = {f"{PROBE_DIR}/{name}": source for name, source in shipped_sources().items()}
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

    stock = [["str", "apple"], int_enc(3)]
    expect(0, "ok", [[1, int_enc(24)], [2, ["dict", [[stock[0], stock[1]], [["str", "pear"], int_enc(21)]]]]])
    expect(1, "ok", [[1, int_enc(15)], [2, ["dict", [[["str", "apple"], int_enc(3)], [["str", "fig"], int_enc(12)]]]]])
    key_error = ["builtins.KeyError", "builtins.LookupError", "builtins.Exception", "builtins.BaseException",
                 "builtins.object"]
    expect(2, "ok", [[3, ["raised", key_error, "('ghost', 'not in cart')"]], [4, ["str", "ghost"]],
                     [5, ["raised", key_error, None]]])
    expect(3, "ok", [[6, ["not raised"]], [7, ["str", "goes on"]]])  # a missing raise is observed; the test goes on
    expect(4, "raised", [[8, int_enc(1)]], "builtins.AssertionError: wrong count (probe line")
    expect(5, "raised", [], "builtins.SystemExit")
    expect(6, "ok", [[9, int_enc(0)]])
    expect(7, "raised", [[10, int_enc(1)]], "builtins.RuntimeError: teardown broke")
    expect(8, "timeout", [[1, int_enc(1)]], "the batch ran past its 2s limit")
    expect(9, "timeout", [], "not run: the batch ran past")
    flood = records[10]["observations"]
    expect(10, "flood", None, "the batch sent more than 100000 bytes")
    assert flood[0] == [1, int_enc(1)] and len(flood) >= 2 and all(o == [2, ["str", "x" * 20000]] for o in flood[1:])
    expect(11, "flood", [], "not run: ")
    expect(12, "late", [], "a frame after the test ended")
    expect(13, "malformed", [[2, int_enc(2)]], "a frame before the test started")
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
    expect(26, "ok", [[1, int_enc(1)]])
    expect(27, "malformed", [], "an undecodable or unattributable frame")  # deeper than any encoding
    expect(28, "malformed", [], "an undecodable or unattributable frame")
    expect(29, "ok", [[0, int_enc(18)], [1, ["bool", True]], [2, ["bool", True]]])  # usual handlers back
    expect(30, "ok", [[3, int_enc(1)]])
