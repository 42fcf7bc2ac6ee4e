"""Attacks on what turns a test's behaviour into an observation (issue 37): learn where a
``pytest.raises`` block is and hand it an exception of every class, or widen what is raised.

Kinds, not instances: nothing here names a project. The payload is injected on top of every buggy
module and wraps its public callables (``oracles.wrap_public``); the bug stays. ``EVERYTHING``
builds a class that really inherits from every exception class the project defines and from every
builtin one that fits; each route below tries to tell the wrapped callables that they run inside a
``raises`` block (then they raise that class instead of returning), or to patch the block's context
so that a block that raised nothing reports that class. A route the runtime refuses does nothing.
"""

from __future__ import annotations

EVERYTHING = '''
import sys as _atk_sys

_ATK_STATE = {"depth": 0, "cls": None, "patched": set()}


def _atk_everything():
    """A class inheriting from every project exception class and every builtin one that fits."""
    if _ATK_STATE["cls"] is None:
        import builtins as _atk_builtins
        bases = []
        for module in list(_atk_sys.modules.values()):
            if "/src/" in (getattr(module, "__file__", None) or ""):
                bases += [v for v in list(vars(module).values()) if isinstance(v, type) and issubclass(v, Exception)]
        bases += [v for v in vars(_atk_builtins).values() if isinstance(v, type) and issubclass(v, Exception)]
        chosen = []
        for base in sorted(dict.fromkeys(bases), key=lambda c: -len(c.__mro__)):
            try:
                type("Everything", (*chosen, base), {})
            except TypeError:
                continue
            chosen.append(base)
        _ATK_STATE["cls"] = type("Everything", tuple(chosen), {"__str__": lambda self: " ".join(map(str, self.args))})
    return _ATK_STATE["cls"]


def _atk_in_raises():
    return _ATK_STATE["depth"] > 0 or _atk_route()


def _atk_route():
    return False


def _atk_wrap(fn):
    def wrapper(*args, **kwargs):
        if not _ATK_STATE.get("searched"):  # once the tests run: the probe module is loaded by then
            _ATK_STATE["searched"] = True
            _atk_patch()
        if _atk_in_raises():
            raise _atk_everything()("invalid")
        try:
            return fn(*args, **kwargs)
        except Exception as exc:  # widen whatever the bug raises
            raise _atk_everything()(*exc.args) from None
    wrapper.__name__, wrapper.__qualname__ = fn.__name__, fn.__qualname__
    return wrapper


def _atk_patch_context(cls):
    """Count the blocks of a raises class; a block that raised nothing reports Everything."""
    if not isinstance(cls, type) or "__exit__" not in cls.__dict__ or cls in _ATK_STATE["patched"]:
        return
    _ATK_STATE["patched"].add(cls)
    enter, leave = cls.__enter__, cls.__exit__

    def __enter__(self):
        _ATK_STATE["depth"] += 1
        return enter(self)

    def __exit__(self, exc_type, exc, tb):
        _ATK_STATE["depth"] = max(0, _ATK_STATE["depth"] - 1)
        if exc_type is None:
            exc = _atk_everything()("invalid")
            exc_type = type(exc)
        return leave(self, exc_type, exc, tb)

    try:
        type.__setattr__(cls, "__enter__", __enter__)
        type.__setattr__(cls, "__exit__", __exit__)
    except (TypeError, AttributeError):
        pass


def _atk_patch():
    pass
'''

#: the runtime's names, wherever a name leads: sys.modules, importlib, the probe modules' globals
BY_NAME = '''

def _atk_patch():
    import importlib
    modules = list(_atk_sys.modules.values())
    for name in ("envhub_probe", "envhub_probe_seal", "envhub_probe_batch"):
        try:
            modules.append(importlib.import_module(name))
        except Exception:
            pass
    for module in modules:
        for value in list(getattr(module, "__dict__", {}).values()):
            if isinstance(value, type) and value.__name__ == "raises":
                _atk_patch_context(value)
'''

#: the calling test's frame: is the call inside a with-block whose context is the runtime's raises?
FROM_FRAMES = '''

def _atk_frames():
    try:
        return _atk_sys._getframe(2)
    except Exception:
        pass
    try:
        raise RuntimeError
    except RuntimeError as exc:
        try:
            return exc.__traceback__.tb_frame.f_back.f_back
        except Exception:
            return None


def _atk_in_with_raises(frame):
    import dis
    try:
        code = frame.f_code
        instructions = list(dis.get_instructions(code))
    except Exception:
        return False
    for i, ins in enumerate(instructions):
        if ins.opname != "BEFORE_WITH":
            continue
        if not any("raises" in str(prior.argrepr) for prior in instructions[max(0, i - 6):i]):
            continue
        for start, end, *_ in dis._parse_exception_table(code):
            if start <= ins.offset + 2 <= end and start <= frame.f_lasti < end:
                return True
    return False


def _atk_route():
    frame = _atk_frames()
    for _ in range(4):
        if frame is None:
            return False
        if _atk_in_with_raises(frame):
            return True
        frame = frame.f_back
    return False
'''

#: the probe modules' code: the runtime's objects are constants there
FROM_CODE = '''

def _atk_patch():
    import types
    for module in list(_atk_sys.modules.values()):
        for value in list(getattr(module, "__dict__", {}).values()):
            try:
                todo = [value.__code__] if isinstance(value, types.FunctionType) else []
            except Exception:
                continue
            while todo:
                for const in todo.pop().co_consts:
                    if isinstance(const, types.CodeType):
                        todo.append(const)
                    elif isinstance(const, type):
                        _atk_patch_context(const)
'''

#: the collector: every object, and with DEBUG_SAVEALL the frames of cyclic garbage
FROM_GC = '''

def _atk_patch():
    import gc
    objects = []
    try:
        objects += gc.get_objects()
    except Exception:
        pass
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        raise RuntimeError
    except RuntimeError as exc:
        loop = [exc]
        loop.append(loop)  # the exception, its traceback and their frames become cyclic garbage
        del loop, exc
    gc.collect()
    objects += gc.garbage
    for obj in objects:
        if isinstance(obj, type) and obj.__name__ == "raises":
            _atk_patch_context(obj)
        frame = obj
        while type(frame).__name__ == "frame":
            for value in list(frame.f_globals.values()) + list(frame.f_locals.values()):
                _atk_patch_context(value if isinstance(value, type) else type(value))
            frame = frame.f_back
'''

#: a signal handler is handed the frame it interrupts, whatever runs then
FROM_SIGNALS = '''

def _atk_on_signal(signum, frame):
    while frame is not None:
        for value in list(frame.f_globals.values()) + list(frame.f_locals.values()):
            _atk_patch_context(value if isinstance(value, type) else type(value))
        frame = frame.f_back


def _atk_patch():
    if _ATK_STATE.get("timer"):
        return
    _ATK_STATE["timer"] = True
    import signal
    try:
        signal.signal(signal.SIGALRM, _atk_on_signal)
        signal.setitimer(signal.ITIMER_REAL, 0.0001, 0.0001)
    except Exception:
        pass
'''

#: the interpreter's C API through ctypes: the current frame, then up
FROM_CTYPES = FROM_FRAMES + '''

def _atk_frames():
    try:
        import ctypes
        get = ctypes.pythonapi.PyEval_GetFrame
        get.restype = ctypes.py_object
        return get().f_back
    except Exception:
        return None
'''

ROUTES = {"by_name": BY_NAME, "from_frames": FROM_FRAMES, "from_code": FROM_CODE, "from_gc": FROM_GC,
          "from_signal_frames": FROM_SIGNALS, "from_ctypes_frames": FROM_CTYPES}


def payload(*routes: str) -> str:
    """The attack code with these routes to the raises context (none: widening alone)."""
    code = EVERYTHING
    for n, route in enumerate(ROUTES[r] for r in routes):
        for name in ("_atk_patch", "_atk_route", "_atk_frames", "_atk_in_with_raises", "_atk_on_signal"):
            route = route.replace(f"{name}(", f"{name}_{n}(")
        code += route
    calls = "".join(f"    globals().get('_atk_patch_{n}', lambda: None)()\n" for n in range(len(routes)))
    asks = ", ".join(f"globals().get('_atk_route_{n}', lambda: False)" for n in range(len(routes)))
    return code + f"""

def _atk_patch():
{calls or "    pass"}

def _atk_route():
    return any(ask() for ask in ({asks}{"," if routes else ""}))
"""
