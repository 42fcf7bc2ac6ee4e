"""What decides, records or encodes an observation, out of the submission's reach.

Standard library only; shipped beside the runtime as ``envhub_probe_seal.py`` and used by the runner
in each batch child, after the probe module is compiled and before anything submitted is imported
(docs/code-repair.md, "The sealed runtime"):

* :func:`private_runtime` -- a second copy of the runtime and its ``excinfo`` helper, made from their
  sources into namespaces that no module table holds, with a builtins table of their own and every
  module they name replaced by a snapshot of that module's attributes taken now. Patching a module,
  a builtin, ``sys.modules`` or the public ``envhub_probe`` changes nothing this copy runs.
* :func:`seal` -- the probe module's code with every load of ``observe`` and ``raises`` *by name*
  replaced by a load of the private copy's objects as *constants*: no namespace the submission can
  reach (the probe module's globals, ``envhub_probe``, builtins) holds them, so rebinding a name
  neither intercepts an observation nor tells the submission where a ``pytest.raises`` block is.
* :func:`guard` -- an audit hook, installed before the submission is imported and never removable,
  that refuses every route by which an object is reached other than through a name: frames
  (``sys._getframe``, ``sys._current_frames``, a traceback's, generator's or coroutine's frame, trace
  and profile hooks), the probe's code objects (a probe function's ``__code__``, ``gi_code``: the
  constants :func:`seal` put there), the collector's object graph (``gc.get_objects``/``get_referrers``/``get_referents``),
  raw memory (``ctypes``, files on procfs such as ``/proc/self/mem``), other interpreters in the
  process, and another audit hook that would be handed the arguments of later events.

Together: the objects that turn the tests' behaviour into observations are reachable only from
code constants and from each other, and nothing the submission can call leads to a code object.
"""

from __future__ import annotations

import _thread
import builtins as _builtins
import opcode as _opcode
import os as _os
import sys as _sys
import types as _types
from typing import Any

__all__ = ["SEALED_NAMES", "SealError", "code_tree", "guard", "private_runtime", "seal"]

#: the probe's names whose global loads become constants -> the sealed runtime's objects they name
#: (``message`` stays public: it runs the exception's ``__str__``, which must never have the sealed
#: runtime below it)
SEALED_NAMES = {"observe": "observe", "raises": "raises", "_envhub_raised": "raised"}

_LOAD_GLOBAL, _LOAD_NAME = _opcode.opmap["LOAD_GLOBAL"], _opcode.opmap["LOAD_NAME"]
_LOAD_CONST, _PUSH_NULL, _NOP = _opcode.opmap["LOAD_CONST"], _opcode.opmap["PUSH_NULL"], _opcode.opmap["NOP"]
_EXTENDED_ARG = _opcode.opmap["EXTENDED_ARG"]
_CACHES = getattr(_opcode, "_inline_cache_entries", [0] * 256)


class SealError(RuntimeError):
    """The probe code cannot be sealed on this interpreter (a runner or interpreter mismatch)."""


# ---- the private copy ----------------------------------------------------------------------------

def _snapshot(module: _types.ModuleType) -> _types.SimpleNamespace:
    """The module's attributes as they are now, in an object no module table holds."""
    return _types.SimpleNamespace(**{k: v for k, v in vars(module).items() if isinstance(k, str)})


def private_runtime(codes: dict[str, _types.CodeType], current: list) -> _types.SimpleNamespace:
    """A private copy of the runtime from its compiled ``codes`` (by module name: ``envhub_probe``,
    ``envhub_probe_excinfo``), sharing the public copy's ``current`` test index (labels are
    anyone's to write: they decide nothing).

    Made in the trusted runner before anything submitted exists: the stdlib modules the copy names
    are frozen as they are then. Its classes keep the public module names, so what it reports reads
    as the public runtime's would. Whoever makes it drops it once the probe is sealed: from then on
    only the probe's code constants lead to it.
    """
    own_builtins = dict(vars(_builtins))
    excinfo = _load(codes["envhub_probe_excinfo"], "envhub_probe_excinfo", own_builtins)
    return _load(codes["envhub_probe"], "envhub_probe", own_builtins, _excinfo=excinfo, _current=current)


def _load(code: _types.CodeType, name: str, own_builtins: dict[str, Any], **given: Any) -> _types.SimpleNamespace:
    namespace = {"__name__": name, "__file__": code.co_filename, "__package__": "", "__builtins__": own_builtins,
                 **given}
    exec(code, namespace)
    for key, value in list(namespace.items()):
        if isinstance(value, _types.ModuleType):
            namespace[key] = _snapshot(value)
    return _types.SimpleNamespace(**{k: v for k, v in namespace.items() if not k.startswith("__")})


# ---- sealing the probe code ----------------------------------------------------------------------

def _const_units(index: int) -> list[tuple[int, int]]:
    """``LOAD_CONST index`` as code units, with the EXTENDED_ARG prefixes a large index needs."""
    prefix = []
    for shift in (24, 16, 8):
        if index >> shift:
            prefix.append((_EXTENDED_ARG, (index >> shift) & 0xFF))
    return [*prefix, (_LOAD_CONST, index & 0xFF)]


def _rewrite(code: _types.CodeType, objects: dict[str, Any]) -> _types.CodeType:
    consts = list(code.co_consts)
    for i, const in enumerate(consts):
        if isinstance(const, _types.CodeType):
            consts[i] = _rewrite(const, objects)
    raw = bytearray(code.co_code)
    units = [(raw[i], raw[i + 1]) for i in range(0, len(raw), 2)]
    at, start, arg = 0, 0, 0
    while at < len(units):
        op, oparg = units[at]
        if op == _EXTENDED_ARG:
            arg = (arg << 8) | oparg
            at += 1
            continue
        arg, begin = (arg << 8) | oparg, start
        size = 1 + _CACHES[op]
        name_index = arg >> 1 if op == _LOAD_GLOBAL else arg
        if op in (_LOAD_GLOBAL, _LOAD_NAME) and code.co_names[name_index] in objects:
            consts.append(objects[code.co_names[name_index]])
            new = ([(_PUSH_NULL, 0)] if op == _LOAD_GLOBAL and arg & 1 else []) + _const_units(len(consts) - 1)
            span = at + size - begin
            if len(new) > span:
                raise SealError(f"no room to seal a load of {code.co_names[name_index]!r} in {code.co_qualname}")
            units[begin:at + size] = new + [(_NOP, 0)] * (span - len(new))
        at += size
        start, arg = at, 0
    co_code = bytes(b for unit in units for b in unit)
    return code.replace(co_code=co_code, co_consts=tuple(consts))


def seal(code: _types.CodeType, objects: dict[str, Any]) -> _types.CodeType:
    """``code`` (a probe module's) with every ``LOAD_GLOBAL``/``LOAD_NAME`` of a name in ``objects``,
    in it and every code object nested in it, replaced by a ``LOAD_CONST`` of that object. The
    replacement keeps every instruction's offset (the freed cache entries become ``NOP``), so jumps,
    the exception table and line numbers stay as they were."""
    if _sys.version_info[:2] not in ((3, 11), (3, 12)):
        raise SealError(f"probe code is sealed for Python 3.11 and 3.12, not {_sys.version.split()[0]}")
    return _rewrite(code, objects)


# ---- the audit hook ------------------------------------------------------------------------------

#: events refused outright, with the exception each raises (the one its caller expects of a failure)
_REFUSED_EVENTS = {
    "sys._getframe": ValueError,  # namedtuple, enum, typing and logging fall back on ValueError
    "sys._getframemodulename": ValueError,
    "sys._current_frames": RuntimeError,
    "sys._current_exceptions": RuntimeError,
    "sys.settrace": RuntimeError,
    "sys.setprofile": RuntimeError,
    "sys.monitoring.register_callback": RuntimeError,
    "gc.get_objects": RuntimeError,
    "gc.get_referrers": RuntimeError,
    "gc.get_referents": RuntimeError,
    "sys.addaudithook": RuntimeError,  # a RuntimeError here quietly refuses the new hook
    "cpython.PyInterpreterState_New": RuntimeError,
    "cpython._PySys_ClearAuditHooks": RuntimeError,
}
#: attributes whose reads (audited as ``object.__getattr__``) lead to a frame or a generator's code
_REFUSED_ATTRIBUTES = frozenset({"f_code", "tb_frame", "gi_frame", "gi_code", "cr_frame", "cr_code", "ag_frame",
                                 "ag_code"})


def code_tree(code: _types.CodeType) -> list[_types.CodeType]:
    """``code`` and every code object nested in it."""
    out, todo = [], [code]
    while todo:
        out.append(todo.pop())
        todo.extend(c for c in out[-1].co_consts if isinstance(c, _types.CodeType))
    return out


def guard(protected: list[_types.CodeType]) -> None:
    """Install the audit hook described in the module docstring (for this process and its forks).

    A function's ``__code__`` stays readable (``dataclasses`` reads it for a signature) unless it is
    one of ``protected`` (the sealed probe's code objects): the hook reads the code itself, on a
    thread marked busy so that its own read is not refused.
    """
    refused, attributes, stat, str_type, bytes_type, int_type = dict(_REFUSED_EVENTS), _REFUSED_ATTRIBUTES, _os.stat, str, bytes, int
    sealed_ids, busy, thread_id = {id(c): c for c in protected}, set(), _thread.get_ident
    try:
        proc_dev = stat("/proc").st_dev
    except OSError:
        proc_dev = None

    def on_open(path: Any) -> None:
        if type(path) is int_type:
            return
        if type(path) is not str_type and type(path) is not bytes_type:  # its __fspath__ could answer twice
            raise PermissionError("envhub probe: open a path given as str or bytes while probes run")
        try:
            device = stat(path).st_dev
        except (OSError, ValueError):
            return
        if device == proc_dev:
            raise PermissionError(f"envhub probe: {path!r} is on procfs, which probes keep closed")

    def sealed_code(function: Any) -> bool:
        me = thread_id()
        if me in busy:  # this hook's own read
            return False
        busy.add(me)
        try:
            return id(function.__code__) in sealed_ids
        finally:
            busy.discard(me)

    def hook(event: str, args: tuple) -> None:
        error = refused.get(event)
        if error is not None:
            raise error(f"envhub probe: {event} is refused while probes run")
        if event == "object.__getattr__" and len(args) > 1 and (
                args[1] in attributes or (args[1] == "__code__" and sealed_code(args[0]))):
            raise AttributeError(f"envhub probe: {args[1]} is refused while probes run")
        if event.startswith("ctypes."):
            raise RuntimeError(f"envhub probe: {event} is refused while probes run")
        if event == "open" and args:
            on_open(args[0])

    _sys.addaudithook(hook)
