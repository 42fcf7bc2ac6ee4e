"""The sealed runtime (docs/code-repair.md, "The sealed runtime"): what decides, records or encodes an
observation is reachable by no route a submission has -- names, import machinery, frames, code
objects, the collector, signal handlers, ctypes, procfs -- and honest code still runs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from probe_scenarios import PLAN, RUNNER, int_enc, parse, project

from envhub.verifiers.probes import seal

SRC = {"shop.py": '''
import dataclasses, collections, enum, logging, typing


class ShopError(ValueError):
    pass


@dataclasses.dataclass
class Item:  # no docstring: dataclasses reads __init__.__code__ for its signature
    name: str
    qty: int = 0


Pair = collections.namedtuple("Pair", "a b")  # sys._getframe inside: refused, falls back
Color = enum.Enum("Color", "RED GREEN")
class Point(typing.NamedTuple):
    x: int
    y: int


def take(qty):
    logging.getLogger("shop").warning("taking %s", qty)  # findCaller falls back too
    if qty < 0:
        raise ShopError("negative")
    return Item("x", qty)
'''}

ROUTES = '''
import sys, gc, signal, types


def refused(attempt):
    try:
        attempt()
    except (ValueError, AttributeError, RuntimeError, PermissionError, OSError) as exc:
        return type(exc).__name__
    return "allowed"


def probe_code():
    module = next(m for n, m in sys.modules.items() if n.startswith("test_"))
    return module.test_routes.__code__


def ctypes_frame():
    import ctypes
    return ctypes.pythonapi.PyEval_GetFrame


def traceback_frame():
    try:
        raise KeyError
    except KeyError as exc:
        return exc.__traceback__.tb_frame


def proc_mem():
    with open("/proc/self/mem", "rb"):
        pass


def hook_calls():
    calls = []
    sys.addaudithook(lambda event, args: calls.append(event))  # refused quietly, as CPython does
    open("/dev/null").close()
    return len(calls)


ATTEMPTS = {
    "getframe": lambda: sys._getframe(),
    "current_frames": lambda: sys._current_frames(),
    "tb_frame": traceback_frame,
    "gi_frame": lambda: (x for x in ()).gi_frame,
    "settrace": lambda: sys.settrace(lambda *a: None),
    "setprofile": lambda: sys.setprofile(lambda *a: None),
    "gc_objects": gc.get_objects,
    "gc_referrers": lambda: gc.get_referrers(sys),
    "probe_code": probe_code,
    "ctypes": ctypes_frame,
    "proc_mem": proc_mem,
    "signal_handler": lambda: signal.signal(signal.SIGALRM, lambda *a: None),
}
'''

MODULES = {
    "test_routes": '''
        from envhub_probe import observe
        import shop
        import routes

        def test_routes():
            observe({name: routes.refused(attempt) for name, attempt in routes.ATTEMPTS.items()}, 1)
            observe(routes.refused(lambda: shop.take.__code__), 2)  # not the probe's: readable
            observe([shop.take(2).qty, shop.Pair(1, 2).a, shop.Color.RED.value, shop.Point(3, 4).y], 3)
            observe(routes.hook_calls(), 4)
        ''',
}


def _run(tmp_path: Path, modules: dict[str, str], tests: list, src: dict[str, str]) -> dict:
    for rel, text in project(tests, modules, src).items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text, encoding="utf-8")
    proc = subprocess.run([sys.executable, "-I", RUNNER, PLAN], cwd=tmp_path, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    return parse(proc.stdout, set(range(len(tests))), forged_ok=True)


def test_every_route_to_the_sealed_runtime_is_refused_and_honest_code_runs(tmp_path: Path) -> None:
    records = _run(tmp_path, MODULES, [("test_routes", "test_routes", {})], {**SRC, "routes.py": ROUTES})
    assert records[0]["status"] == "ok", records[0]
    observed = dict(records[0]["observations"])
    refusals = {k[1]: v[1] for k, v in observed[1][1]}
    assert refusals == {"getframe": "ValueError", "current_frames": "RuntimeError", "tb_frame": "AttributeError",
                        "gi_frame": "AttributeError", "settrace": "RuntimeError", "setprofile": "RuntimeError",
                        "gc_objects": "RuntimeError", "gc_referrers": "RuntimeError", "probe_code": "AttributeError",
                        "ctypes": "RuntimeError", "proc_mem": "PermissionError", "signal_handler": "PermissionError"}
    assert observed[2] == ["str", "allowed"]
    assert observed[3] == ["list", [int_enc(2), int_enc(1), int_enc(1), int_enc(4)]]
    assert observed[4] == int_enc(0)  # another audit hook would be handed later events' arguments


TAMPER = '''
import sys, importlib
import shop

for name in ("envhub_probe", "envhub_probe_batch", "envhub_probe_seal"):
    module = importlib.import_module(name)
    for attr in ("observe", "raises", "raised", "encode", "send"):
        if hasattr(module, attr):
            setattr(module, attr, lambda *a, **k: None)
for module in list(sys.modules.values()):  # every probe module's own names too
    for attr in ("observe", "raises", "_envhub_raised"):
        if attr in getattr(module, "__dict__", {}):
            module.__dict__[attr] = lambda *a, **k: None
import builtins
builtins.id = lambda obj: 0  # the sealed copy has builtins of its own (its encoder looks types up by id)
'''

MISSING = {
    "test_missing": '''
        import pytest
        from envhub_probe import observe, raises
        from envhub_probe import message as _envhub_message, raised as _envhub_raised
        import shop, tamper

        def test_missing():
            with raises(1, message=True) as info:
                shop.take(1)  # the bug: raises nothing
            _envhub_raised(1, _envhub_message(info.value))
            with raises(2) as info:
                shop.take(-1)
            observe(shop.take(3).qty, 3)
        ''',
}


def test_rebinding_every_name_changes_no_observation(tmp_path: Path) -> None:
    records = _run(tmp_path, MISSING, [("test_missing", "test_missing", {})], {**SRC, "tamper.py": TAMPER})
    assert records[0]["observations"][0] == [1, ["not raised"]]
    assert records[0]["observations"][1][0] == 2 and records[0]["observations"][1][1][0] == "raised"
    assert records[0]["observations"][1][1][1][0] == "shop.ShopError"
    assert records[0]["observations"][2] == [3, int_enc(3)]


def test_seal_keeps_offsets_and_replaces_every_load_by_name() -> None:
    source = ("observe = raises = print\n"
              "def t(x):\n    observe(x, 1)\n    with raises(2) as info:\n        x()\n"
              "    return [lambda: observe(0, 3)], info\n")
    code = compile(source, "p", "exec")
    marker_observe, marker_raises = object(), object()
    sealed = seal.seal(code, {"observe": marker_observe, "raises": marker_raises})
    for before, after in zip(seal.code_tree(code), seal.code_tree(sealed), strict=True):
        assert len(before.co_code) == len(after.co_code)
        assert list(before.co_positions()) == list(after.co_positions())
    namespace: dict = {}
    exec(sealed, namespace)  # the import binds the public names ...
    t = namespace["t"]
    consts = [c for code in seal.code_tree(t.__code__) for c in code.co_consts]
    assert marker_observe in consts and marker_raises in consts  # ... the function loads the sealed ones
    calls = []
    namespace["observe"] = lambda *a: calls.append(a)  # rebinding the name does not reach them
    with pytest.raises(TypeError):
        t(lambda: None)  # calls marker_observe, an object(): not callable
    assert calls == []
