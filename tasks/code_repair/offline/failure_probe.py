"""The pytest plugin that observes how a mutant's tests fail, for the issue text to describe.

An issue must read like a user's bug report (the call, what came back, what was expected) and
must never quote the hidden tests: their names, assertions or bodies would hand the agent the
grader.  So the text is not built from the test file but from what happened at run time.  While
the synthesizer runs a project's tests, this module is loaded into pytest as a plugin (``-p``; it
is copied next to the run under the private name ``PROBE_MODULE``, which is why it imports the
standard library only, and nothing of envhub).  For each failing test the plugin records:

* the call under test, re-rendered from the test's AST with simple local values substituted
  (``to_roman(number)`` becomes ``to_roman(4)``), never a whole test line or the test's name;
* the expected and the actual value, taken from the live frame of the failed assertion and
  cross-checked against pytest's own assertion message (so a stateful re-evaluation that returns
  something else is not reported as the actual value);
* or the unexpected exception (type, message, and the project function that raised it), or the
  exception that should have been raised but was not.

At the end of the session it writes ``{"outcomes", "failures", "collection_errors"}`` as JSON to
the file named by ``$PROBE_ENV``; :mod:`.issue_text` turns the failure records into issue text.
"""

from __future__ import annotations

import ast
import contextlib
import datetime
import decimal
import fractions
import json
import os
import re
from pathlib import Path
from typing import Any

PROBE_ENV = "ENVHUB_CODE_REPAIR_PROBE_OUT"
PROBE_MODULE = "_envhub_code_repair_probe"
MAX_REPR = 160

_STATE: dict[str, Any] = {"outcomes": {}, "failures": {}, "collection_errors": []}
_SOURCES: dict[str, ast.Module | None] = {}
_BUILTIN_CALLS = frozenset({
    "len", "list", "tuple", "set", "dict", "sorted", "str", "repr", "int", "float", "bool", "abs", "sum",
    "min", "max", "round", "isinstance", "type", "iter", "next", "range", "enumerate", "zip", "map", "any", "all",
    "approx", "raises", "frozenset", "reversed",
})


def pytest_collectreport(report: Any) -> None:
    if report.failed:
        _STATE["collection_errors"].append(report.nodeid or "<session>")


def pytest_runtest_logreport(report: Any) -> None:
    outcomes = _STATE["outcomes"]
    if report.failed:
        outcomes[report.nodeid] = "failed"
    elif report.skipped and report.nodeid not in outcomes:
        outcomes[report.nodeid] = "skipped"
    elif report.passed and report.when == "call" and report.nodeid not in outcomes:
        outcomes[report.nodeid] = "passed"


def pytest_runtest_makereport(item: Any, call: Any) -> None:
    """Record why a test failed; returns None so pytest builds its report as usual."""
    excinfo = call.excinfo
    if excinfo is None or item.nodeid in _STATE["failures"]:
        return
    if excinfo.typename in ("Skipped", "XFailed", "Exit"):
        return
    try:
        record = describe_failure(item, excinfo.value, excinfo.tb)
    except Exception as exc:  # the probe must never change what the run reports
        record = {"kind": "other", "probe_error": repr(exc)[:200]}
    record.setdefault("exc_type", type(excinfo.value).__name__)
    _STATE["failures"][item.nodeid] = record


def pytest_sessionfinish(session: Any, exitstatus: Any) -> None:
    out = os.environ.get(PROBE_ENV)
    if out:
        Path(out).write_text(json.dumps(_STATE, sort_keys=True, default=str))


def _short(value: Any) -> str:
    try:
        text = repr(value)
    except Exception:
        text = f"<{type(value).__name__} object>"
    text = re.sub(r" at 0x[0-9a-f]+", "", text)
    return text if len(text) <= MAX_REPR else text[: MAX_REPR - 3] + "..."


def _parse(path: str) -> ast.Module | None:
    if path not in _SOURCES:
        try:
            _SOURCES[path] = ast.parse(Path(path).read_text(encoding="utf-8"))
        except (OSError, SyntaxError, ValueError):
            _SOURCES[path] = None
    return _SOURCES[path]


def _chain(tree: ast.AST, lineno: int) -> list[ast.AST]:
    """Nodes from the module down to the innermost statement that covers ``lineno``."""
    chain: list[ast.AST] = []
    node: ast.AST | None = tree
    while node is not None:
        chain.append(node)
        node = next(
            (child for child in ast.iter_child_nodes(node)
             if isinstance(child, ast.stmt) and child.lineno <= lineno <= (child.end_lineno or child.lineno)),
            None,
        )
    return chain


# Values whose repr reads as a literal in a report (``datetime.date(2023, 1, 31)``, ``Decimal('1.50')``).
_VALUE_TYPES = (int, float, str, bool, bytes, datetime.date, datetime.datetime, datetime.time, datetime.timedelta,
                decimal.Decimal, fractions.Fraction)


def _is_simple(value: Any, depth: int = 0) -> bool:
    if value is None or type(value) in _VALUE_TYPES:
        return True
    if depth < 2 and type(value) in (list, tuple, set, frozenset):
        return len(value) <= 8 and all(_is_simple(v, depth + 1) for v in value)
    if depth < 2 and type(value) is dict:
        return len(value) <= 6 and all(_is_simple(k, 1) and _is_simple(v, depth + 1) for k, v in value.items())
    return False


class _Literalize(ast.NodeTransformer):
    """Substitute test-local names bound to small literal values by those values."""

    def __init__(self, local_vars: dict[str, Any]) -> None:
        self.local_vars = local_vars

    def literal(self, name: str) -> ast.expr | None:
        value = self.local_vars.get(name, self)
        if value is self or not _is_simple(value) or len(repr(value)) > 60:
            return None
        try:
            return ast.parse(repr(value), mode="eval").body
        except SyntaxError:
            return None

    def visit_Name(self, node: ast.Name) -> ast.AST:
        return (self.literal(node.id) if isinstance(node.ctx, ast.Load) else None) or node

    def visit_Call(self, node: ast.Call) -> ast.AST:
        """``f(*args)`` with a literal ``args`` tuple becomes ``f(1, 2)``."""
        args: list[ast.expr] = []
        for arg in node.args:
            value = self.literal(arg.value.id) if isinstance(arg, ast.Starred) and isinstance(
                arg.value, ast.Name) else None
            args += value.elts if isinstance(value, ast.Tuple | ast.List) else [arg]
        node.args = args
        keywords: list[ast.keyword] = []
        for kw in node.keywords:  # f(**{"a": 1}) -> f(a=1)
            value = self.literal(kw.value.id) if kw.arg is None and isinstance(kw.value, ast.Name) else None
            if isinstance(value, ast.Dict) and all(
                    isinstance(k, ast.Constant) and str(k.value).isidentifier() for k in value.keys):
                keywords += [ast.keyword(arg=k.value, value=v) for k, v in zip(value.keys, value.values, strict=True)]
            else:
                keywords.append(kw)
        node.keywords = keywords
        self.generic_visit(node)
        return node


def _render(node: ast.AST, frame: Any, rename: dict[str, str] | None = None) -> str:
    """Source of an expression (or simple statement) with simple test-local values inlined.

    A bare name stays a name: it is the value being described, not an argument.
    """
    module = ast.parse(ast.unparse(node))
    tree: ast.AST = module.body[0].value if len(module.body) == 1 and isinstance(module.body[0], ast.Expr) else module
    if isinstance(tree, ast.Name):
        return tree.id
    local_vars = {k: v for k, v in frame.f_locals.items() if not k.startswith("@") and k not in (rename or {})}
    tree = _Literalize(local_vars).visit(tree)
    for name_node in ast.walk(tree):
        if isinstance(name_node, ast.Name) and rename and name_node.id in rename:
            name_node.id = rename[name_node.id]
    return ast.unparse(tree)


def _eval(node: ast.AST, frame: Any) -> Any:
    return eval(compile(ast.Expression(body=node), "<probe>", "eval"), frame.f_globals, dict(frame.f_locals))


def project_calls(node: ast.AST) -> list[ast.Call]:
    """Calls that may reach project code: not builtins (``len(x)``) nor pytest helpers."""
    return [n for n in ast.walk(node) if isinstance(n, ast.Call) and not _is_helper(n)]


def _is_helper(call: ast.Call) -> bool:
    func = call.func
    if isinstance(func, ast.Name):
        return func.id in _BUILTIN_CALLS
    return isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "pytest"


def callee(call: ast.Call) -> str:
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")


def _receiver(call: ast.AST, frame: Any) -> dict[str, str]:
    """``{"receiver": class, "receiver_var": name}`` when a method is called on a test-local object."""
    root: ast.AST = call
    while isinstance(root, ast.Call | ast.Attribute | ast.Subscript):
        root = root.func if isinstance(root, ast.Call) else root.value
    if isinstance(root, ast.Name) and root is not call:
        value = frame.f_locals.get(root.id)
        if value is not None and not _is_simple(value) and not isinstance(value, type):
            module = type(value).__module__
            if module != "builtins" and not module.startswith(("_pytest", "pytest")):
                return {"receiver": type(value).__name__, "receiver_var": root.id}
    return {}


def _origin(name: ast.Name, chain: list[ast.AST], lineno: int) -> ast.expr | None:
    """The expression last assigned to ``name`` before ``lineno`` in the enclosing function."""
    func = next((n for n in reversed(chain) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)), None)
    assigns = [
        node for node in (ast.walk(func) if func else ())
        if isinstance(node, ast.Assign) and node.lineno < lineno
        and any(isinstance(t, ast.Name) and t.id == name.id for t in node.targets)
    ]
    return max(assigns, key=lambda node: node.lineno).value if assigns else None


def _root_name(expr: ast.AST) -> ast.Name | None:
    """The test variable a value is read from: ``totals`` in ``sorted(totals.keys())[0]``."""
    while True:
        if isinstance(expr, ast.Attribute | ast.Subscript | ast.Starred):
            expr = expr.value
        elif isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute):
            expr = expr.func.value
        elif isinstance(expr, ast.Call) and _is_helper(expr) and expr.args:
            expr = expr.args[0]
        else:
            return expr if isinstance(expr, ast.Name) else None


def _subject(expr: ast.expr, chain: list[ast.AST], lineno: int) -> tuple[ast.expr, str | None]:
    """The call a checked value came from, and the test variable that holds its result.

    ``sorted(totals)`` after ``totals = category_totals(rows)`` gives ``(category_totals(rows),
    "totals")``; a value that is itself a project call gives ``(expr, None)``.
    """
    if not project_calls(expr):
        root = _root_name(expr)
        origin = _origin(root, chain, lineno) if root is not None else None
        if root is not None and origin is not None and project_calls(origin):
            return origin, root.id
    return expr, None


def _describe_value(expr: ast.expr, frame: Any, chain: list[ast.AST], lineno: int) -> dict[str, Any]:
    """How to name a checked value: the call itself, a variable assigned from a call, or context."""
    subject, root = _subject(expr, chain, lineno)
    record: dict[str, Any] = {"call": _render(subject, frame), **_receiver(subject, frame)}
    if root is not None and not isinstance(expr, ast.Name):
        record |= {"assigned": root, "value_of": _render(expr, frame, {root: root})}
    elif root is None:
        record |= _context(subject, frame, chain, lineno)
    return record


def _context(subject: ast.expr, frame: Any, chain: list[ast.AST], lineno: int) -> dict[str, Any]:
    """For a value that is not a call result (``evicted``), the last call made before the check."""
    if project_calls(subject):
        return {}
    func = next((n for n in reversed(chain) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)), None)
    before = [n for n in (ast.walk(func) if func else ()) if isinstance(n, ast.Expr | ast.Assign)
              and (n.end_lineno or n.lineno) < lineno and project_calls(n.value)]
    if not before:
        return {"weak": True}
    call = max(before, key=lambda n: n.lineno).value
    receiver = _receiver(call, frame)
    return {"weak": True, "after": _render(call, frame),
            **{f"after_{k}": v for k, v in receiver.items()}}


def _raised_error(expr: ast.expr, frame: Any, chain: list[ast.AST], lineno: int) -> dict[str, Any] | None:
    """For checks on a caught exception (``info.value.line``): the call that raised it and the field."""
    for name in sorted({n.id for n in ast.walk(expr) if isinstance(n, ast.Name)}):
        value = frame.f_locals.get(name)
        info, error = None, None
        if type(value).__name__ == "ExceptionInfo":
            info, error = name, value.value
        elif isinstance(value, BaseException):
            origin = _origin(ast.Name(id=name), chain, lineno)
            if isinstance(origin, ast.Attribute) and origin.attr == "value" and isinstance(origin.value, ast.Name):
                info, error = origin.value.id, value
        if info is None:
            continue
        func = next((n for n in reversed(chain) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)), None)
        for block in ast.walk(func) if func else ():
            if isinstance(block, ast.With) and any(
                    isinstance(i.optional_vars, ast.Name) and i.optional_vars.id == info for i in block.items):
                call = getattr(block.body[-1], "value", None)
                if call is None or not project_calls(call):
                    return None
                text = re.sub(rf"\b{re.escape(info)}\.value\b", "error", ast.unparse(expr))
                renamed = ast.parse(text, mode="eval").body
                return {"call": _render(call, frame), **_receiver(call, frame), "error": type(error).__name__,
                        "field": _render(renamed, frame, {name: "error"} if name != info else {})}
    return None


def describe_failure(item: Any, exc: BaseException, tb: Any) -> dict[str, Any]:
    """Structured description of one failing test, free of its name and source lines."""
    test_file = str(item.path)
    src_root = str(Path(str(item.config.rootpath)) / "src") + os.sep
    frames = []
    while tb is not None:
        frames.append((tb.tb_frame, tb.tb_lineno))
        tb = tb.tb_next
    in_test = [i for i, (f, _) in enumerate(frames) if f.f_code.co_filename == test_file]
    record: dict[str, Any] = {"exc_type": type(exc).__name__, "exc_message": _first_line(exc)}
    project = [(f, line) for f, line in frames if f.f_code.co_filename.startswith(src_root)]
    if project:
        frame = project[-1][0]
        module = Path(frame.f_code.co_filename[len(src_root):]).with_suffix("").as_posix().replace("/", ".")
        record["raised_in"] = f"{module.removesuffix('.__init__')}.{frame.f_code.co_qualname}"
    tree = _parse(test_file)
    if not in_test or tree is None:
        record["kind"] = "other"
        return record
    frame, lineno = frames[in_test[-1]]
    chain = _chain(tree, lineno)
    stmt = chain[-1]
    raises = _expected_raise(chain)
    entry = frames[in_test[-1] + 1][0].f_code.co_name if in_test[-1] + 1 < len(frames) else None
    raised_here = entry is None
    if isinstance(stmt, ast.Assert) and isinstance(exc, AssertionError) and raised_here:
        record.update(_describe_assert(stmt, exc, frame, chain, lineno))
    elif type(exc).__name__ == "Failed" and "DID NOT RAISE" in str(exc) and raises is not None:
        record.update(_describe_no_raise(raises[0], raises[1], frame))
    elif raised_here and (caught := _raised_error(_checked_expr(stmt), frame, chain, lineno)) is not None:
        record.update(kind="error_field_crash", **caught)
    else:
        call = _call_for_exception(stmt, entry)
        record["kind"] = "exception" if call is not None and not raised_here else "other"
        if call is not None:
            record["call"] = _render(call, frame)
            record.update(_receiver(call, frame))
        if raises is not None:
            record["expected_exc"] = _exc_name(raises[1])
    return record


def _checked_expr(stmt: ast.AST) -> ast.expr:
    """The value a statement computes or checks (the left side of an asserted comparison)."""
    expr = stmt.test if isinstance(stmt, ast.Assert) else getattr(stmt, "value", None)
    if isinstance(expr, ast.Compare):
        expr = expr.left
    return expr if isinstance(expr, ast.expr) else ast.Constant(None)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    line = text[0] if text else ""
    return line if len(line) <= 200 else line[:197] + "..."


def _expected_raise(chain: list[ast.AST]) -> tuple[ast.With | ast.AsyncWith, ast.Call] | None:
    """The innermost enclosing ``with pytest.raises(...)`` block and its ``raises`` call."""
    for node in reversed(chain):
        if isinstance(node, ast.With | ast.AsyncWith):
            for with_item in node.items:
                expr = with_item.context_expr
                if isinstance(expr, ast.Call) and callee(expr) == "raises":
                    return node, expr
    return None


def _exc_name(raises: ast.Call) -> str:
    return ast.unparse(raises.args[0]) if raises.args else "an exception"


def _describe_assert(stmt: ast.Assert, exc: AssertionError, frame: Any, chain: list[ast.AST],
                     lineno: int) -> dict[str, Any]:
    message = str(exc)
    test = stmt.test
    membership = isinstance(test, ast.Compare) and isinstance(test.ops[0], ast.In | ast.NotIn)
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and not (membership and not project_calls(test.left)):
        left, right = test.left, test.comparators[0]
        swap = _is_literal(left) and not _is_literal(right) and isinstance(test.ops[0], ast.Eq)
        actual_node, expected_node = (right, left) if swap else (left, right)
        actual = _eval(actual_node, frame)
        expected = _eval(expected_node, frame)
        if _short(actual)[:12] not in message:
            return {"kind": "other"}  # re-evaluation disagrees with what the test saw
        op = {ast.In: "in", ast.NotIn: "not in", ast.Is: "is", ast.IsNot: "is not"}.get(
            type(test.ops[0]), _OP_SYMBOL.get(type(test.ops[0]), "=="))
        if swap:
            op = {"in": "contains", "not in": "does not contain"}.get(op, op)
        values = {"op": op, "actual": _short(actual), "expected": _short(expected)}
        raised = _raised_error(actual_node, frame, chain, lineno)
        if raised is not None:
            return {"kind": "error_field", **raised, **values}
        return {"kind": "compare", **_describe_value(actual_node, frame, chain, lineno), **values}
    negated = isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not)
    target = test.operand if negated else test
    if project_calls(target) or isinstance(target, ast.Name | ast.Attribute | ast.Compare):
        value = _eval(target, frame)
        if bool(value) == negated:
            described = ({"call": _render(target, frame)} if isinstance(target, ast.Compare)
                         else _describe_value(target, frame, chain, lineno))
            return {"kind": "truthy", **described, "actual": _short(value), "want_true": not negated}
    return {"kind": "other"}


def _is_literal(node: ast.AST) -> bool:
    try:
        ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False
    return True


_OP_SYMBOL = {ast.Eq: "==", ast.NotEq: "!=", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">="}


def _describe_no_raise(block: ast.With | ast.AsyncWith, raises: ast.Call, frame: Any) -> dict[str, Any]:
    """``with raises(X): call`` where nothing was raised: report what the call returned instead."""
    last = block.body[-1]
    value = getattr(last, "value", None)
    if not isinstance(last, ast.Expr | ast.Assign | ast.AnnAssign) or value is None or not project_calls(value):
        return {"kind": "other", "expected_exc": _exc_name(raises)}
    record: dict[str, Any] = {"kind": "no_raise", "call": _render(value, frame), **_receiver(value, frame),
                              "expected_exc": _exc_name(raises)}
    if len(block.body) == 1:
        # If the second call behaves differently, say only that nothing was raised.
        with contextlib.suppress(Exception):
            record["actual"] = _short(_eval(value, frame))
    return record


_CMP_DUNDERS = ("__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__", "__contains__")
_BINOP_DUNDERS = tuple(f"__{r}{op}__" for op in ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "and",
                                                   "or", "xor", "lshift", "rshift", "matmul") for r in ("", "r"))
_DUNDER_NODE: dict[str, type | tuple[type, ...]] = {
    "__getitem__": ast.Subscript, "__setitem__": (ast.Assign, ast.AugAssign), "__delitem__": ast.Delete,
    "__neg__": ast.UnaryOp, "__pos__": ast.UnaryOp, "__invert__": ast.UnaryOp,
    **dict.fromkeys(_CMP_DUNDERS, ast.Compare), **dict.fromkeys(_BINOP_DUNDERS, ast.BinOp),
    **{f"__i{d[2:]}": ast.AugAssign for d in _BINOP_DUNDERS if not d.startswith("__r")},
}


def _call_for_exception(stmt: ast.AST, entry: str | None) -> ast.AST | None:
    """The expression in the failing statement that led into the project code that raised.

    ``entry`` is the first project function on the stack: a named call, a constructor, a property,
    or a special method reached through syntax (``bs[5] = True`` for ``__setitem__``).
    """
    calls = project_calls(stmt)
    if entry in _DUNDER_NODE:
        found = next((n for n in ast.walk(stmt) if isinstance(n, _DUNDER_NODE[entry])), None)
        if found is not None:
            return found
    elif entry and entry.startswith("__") and entry != "__init__":
        builtin = entry.strip("_")  # __len__ -> len(...), __str__ -> str(...)
        found = next((n for n in ast.walk(stmt) if isinstance(n, ast.Call) and callee(n) == builtin), None)
        if found is not None:
            return found
    elif entry:
        for node in ast.walk(stmt):
            if isinstance(node, ast.Call) and node in calls and (
                    callee(node) == entry or (entry == "__init__" and callee(node)[:1].isupper())):
                return node
            if isinstance(node, ast.Attribute) and node.attr == entry and not any(c.func is node for c in calls):
                return node  # a property
    if isinstance(stmt, ast.Expr | ast.Assign | ast.AnnAssign | ast.AugAssign) and stmt.value is not None:
        return stmt.value if calls and not isinstance(stmt.value, ast.Constant) else stmt
    return calls[0] if calls else None
