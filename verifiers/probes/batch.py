"""Running one batch of probe tests in the runner's child.

Standard library only; shipped beside the runtime as ``envhub_probe_batch.py`` and loaded by the
runner. It calls :func:`signatures` on the probe module's source before the audit hook is installed,
then :func:`run_batch`, which imports the probe module (and with it the submission) and runs the
plan's tests, each ended by a frame ``[i, "end"]`` or ``[i, "raised", qualname, detail]``.

This is public code: a submission can rebind anything here, which changes labels and endings but
no observation (those come from the sealed runtime, reached only through the probe's constants).
So nothing here holds a sealed object or the probe's code once it runs, and nothing here reads a
frame or a code object: what a test or fixture takes comes from the probe's source, and the line a
failure names is read from the traceback's own line numbers.
"""

from __future__ import annotations

import ast as _ast
import contextlib as _contextlib
import importlib.util as _importlib_util
import os as _os
import sys as _sys
import types as _types
from typing import Any

if __package__:  # on the host, as envhub.verifiers.probes.batch
    from . import runtime as _runtime
else:  # in the sandbox: the public runtime, which the runner loaded first
    _runtime = _sys.modules["envhub_probe"]

Signatures = dict[str, list[tuple[str, bool]]]
_EXC_ARGS = BaseException.__dict__["args"]
_EXC_TRACEBACK = BaseException.__dict__["__traceback__"]


class _TestFailed(Exception):
    """What a test function raised, with the line of the test it came through."""

    def __init__(self, exc: BaseException, line: int | None) -> None:
        super().__init__()
        self.exc, self.line = exc, line


def signatures(source: bytes | bytearray | str) -> Signatures:
    """(name, has a default) of every parameter of each function of a probe module, by qualified
    name (``test_x``, ``TestY.test_z``), from its source: read before anything submitted runs."""
    out: Signatures = {}

    def visit(body: list[_ast.stmt], prefix: str) -> None:
        for node in body:
            if isinstance(node, (_ast.FunctionDef, _ast.AsyncFunctionDef)):
                a = node.args
                positional = [*a.posonlyargs, *a.args]
                first_default = len(positional) - len(a.defaults)
                out[prefix + node.name] = [(p.arg, i >= first_default) for i, p in enumerate(positional)] + [
                    (p.arg, d is not None) for p, d in zip(a.kwonlyargs, a.kw_defaults, strict=True)]
            elif isinstance(node, _ast.ClassDef):
                visit(node.body, f"{prefix}{node.name}.")

    with _contextlib.suppress(SyntaxError, ValueError):  # compiling it fails too, and says so for each test
        visit(_ast.parse(bytes(source) if not isinstance(source, str) else source).body, "")
    return out


def run_batch(path: str, tests: list[dict[str, Any]], code: list, signatures: Signatures | None = None) -> None:
    """Import the probe module at ``path`` from ``code`` -- a list holding its code object, or the
    exception compiling it raised, taken out as it runs so that no frame keeps it -- and run
    ``tests`` (plan entries) in order, each framed by ``[i, "end"]`` or ``[i, "raised", qualname,
    detail]``. Needs the runtime's ``bind`` first."""
    begin, send, qualname = _runtime.begin, _runtime.send, _runtime.qualname
    try:
        if isinstance(code[-1], BaseException):
            raise code.pop()
        name = _os.path.splitext(_os.path.basename(path))[0]
        spec = _importlib_util.spec_from_file_location(name, path)
        if spec is None:
            raise _runtime.ProbeError(f"cannot import {path}")
        module = _sys.modules[name] = _importlib_util.module_from_spec(spec)
        exec(code.pop(), module.__dict__)
    except BaseException as exc:
        detail = "import failed: " + _describe(exc, _line_below(exc))
        for test in tests:
            send([test["index"], "raised", qualname(type(exc)), detail])
        return
    for test in tests:
        begin(test["index"])
        try:
            _run_test(module, test, signatures or {})
        except _TestFailed as failed:
            frame = [test["index"], "raised", qualname(type(failed.exc)), _describe(failed.exc, failed.line)]
        except BaseException as exc:
            frame = [test["index"], "raised", qualname(type(exc)), _describe(exc, None)]
        else:
            frame = [test["index"], "end"]
        begin(None)
        send(frame)


def _line_below(exc: BaseException) -> int | None:
    """The line of the frame just below the one handling ``exc`` (the probe's own, there)."""
    tb = _EXC_TRACEBACK.__get__(exc)
    below = tb.tb_next if type(tb) is _types.TracebackType else None
    return below.tb_lineno if type(below) is _types.TracebackType else None


def _describe(exc: BaseException, line: int | None) -> str:
    """A short message for ``exc`` without calling any of its methods, plus the probe line."""
    args = _EXC_ARGS.__get__(exc)
    text = ", ".join(a if type(a) is str else _runtime.dumps(_runtime.encode(a)) for a in args[:3])[:300]
    return f"{text} (probe line {line})" if line is not None else text


def _parameters(func: Any, known: Signatures) -> list[tuple[str, bool]]:
    """(name, has a default) of every parameter a test or fixture takes (``self`` excluded)."""
    method = type(func) is _types.MethodType
    target = func.__func__ if method else func
    params = known.get(getattr(target, "__qualname__", None))
    if params is None:
        raise _runtime.ProbeError(f"no signature of {target!r} in the probe source")
    return params[1:] if method else params


def _resolve(module: Any, dotted: str) -> Any:
    """``function`` or ``Class.method`` (the class instantiated without arguments)."""
    head, *rest = dotted.split(".")
    obj = getattr(module, head)
    if rest and isinstance(obj, type):
        obj = obj()
    for part in rest:
        obj = getattr(obj, part)
    return obj


def _bind_cases(func: Any, indices: dict[str, int]) -> dict[str, Any]:
    bound: dict[str, Any] = {}
    for names, rows in getattr(func, "__probe_cases__", []):
        rows_at = {indices.get(name) for name in names}
        if len(rows_at) != 1 or None in rows_at:
            raise _runtime.ProbeError(f"the plan's indices do not pick one row of the cases table {names}")
        row = rows[rows_at.pop()]
        values = (row,) if len(names) == 1 else tuple(row)
        if len(values) != len(names):
            raise _runtime.ProbeError(f"a row of the cases table {names} has {len(values)} values")
        bound.update(zip(names, values, strict=True))
    unbound = set(indices) - set(bound)
    if unbound:
        raise _runtime.ProbeError(f"the plan binds {sorted(unbound)}, which no cases table has")
    return bound


class _Fixtures:
    """Function-scoped fixtures of one test: one value per name, torn down in reverse order."""

    def __init__(self, module: Any, signatures: dict[str, list[tuple[str, bool]]]) -> None:
        self.module, self.signatures = module, signatures
        self.values: dict[str, Any] = {}
        self.active: set[str] = set()
        self.teardowns: list[Any] = []

    def get(self, name: str) -> Any:
        if name in self.values:
            return self.values[name]
        func = getattr(self.module, name, None)
        if func is None or getattr(func, "__probe_fixture__", False) is not True:
            raise _runtime.ProbeError(f"no fixture named {name!r}")
        if name in self.active:
            raise _runtime.ProbeError(f"fixture {name!r} depends on itself")
        self.active.add(name)
        value = func(**{p: self.get(p) for p, has_default in _parameters(func, self.signatures) if not has_default})
        if type(value) is _types.GeneratorType:
            self.teardowns.append(value)
            value = next(value)
        self.active.discard(name)
        self.values[name] = value
        return value

    def teardown(self) -> None:
        """Finish every generator fixture; raise the first error after all of them ran."""
        error = None
        for gen in reversed(self.teardowns):
            try:
                next(gen)
                error = error or _runtime.ProbeError("a fixture yielded more than once")
            except StopIteration:
                pass
            except BaseException as exc:
                error = error or exc
        self.teardowns.clear()
        if error is not None:
            raise error


def _run_test(module: Any, test: dict[str, Any], signatures: dict[str, list[tuple[str, bool]]]) -> None:
    func = _resolve(module, test["function"])
    bound = _bind_cases(func, test["indices"])
    fixtures = _Fixtures(module, signatures)
    try:
        kwargs = {}
        for name, has_default in _parameters(func, signatures):
            if name in bound:
                kwargs[name] = bound[name]
            elif not has_default:
                kwargs[name] = fixtures.get(name)
        try:
            result = func(**kwargs)
        except BaseException as exc:
            raise _TestFailed(exc, _line_below(exc)) from None
        if type(result) in (_types.CoroutineType, _types.GeneratorType):
            result.close()
            raise _runtime.ProbeError("generator and async tests are not supported")
    except BaseException:
        with _contextlib.suppress(BaseException):
            fixtures.teardown()
        raise
    fixtures.teardown()
