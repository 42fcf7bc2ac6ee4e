"""Form rules: the same behaviour written another way (they change no observed value alone).

Each accepts only shapes it can rewrite without changing behaviour; the real test run is still the
judge (:mod:`.build`), and the builder stacks these on an observable variant. The gold projects are
written with comprehensions and guard clauses already, so each rule goes both ways: loop to
comprehension and back, early return to ``else`` branch and back.
"""

from __future__ import annotations

import ast
import itertools
from collections.abc import Iterator

from .rules import Candidate, Rule, Sources
from .source import (
    Edit,
    Module,
    clone,
    clone_all,
    delete,
    loaded_names,
    scope_safe,
    statement_lists,
    target_names,
    uses_outside,
)

# ---- loops and comprehensions -------------------------------------------------------------------

#: collector kind -> the method that puts an element in
_KINDS = {"list": "append", "set": "add", "dict": "__setitem__"}


def _collector(stmt: ast.stmt) -> tuple[str, str] | None:
    """``x = []`` / ``x: list[...] = []`` -> (x, "list"); ``x = set()`` -> (x, "set")."""
    target = stmt.targets[0] if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 else (
        stmt.target if isinstance(stmt, ast.AnnAssign) else None)
    value = getattr(stmt, "value", None)
    if not isinstance(target, ast.Name) or value is None:
        return None
    if isinstance(value, ast.List) and not value.elts:
        return target.id, "list"
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "set" and not value.args:
        return target.id, "set"
    return None


def _appended(stmt: ast.stmt, name: str, kind: str) -> ast.expr | None:
    method = _KINDS[kind]
    if (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call) and len(stmt.value.args) == 1
            and not stmt.value.keywords and isinstance(stmt.value.func, ast.Attribute)
            and stmt.value.func.attr == method and isinstance(stmt.value.func.value, ast.Name)
            and stmt.value.func.value.id == name):
        return stmt.value.args[0]
    return None


def _loop_to_comprehension(module: Module, qualname: str, fn: ast.FunctionDef) -> Iterator[Candidate]:
    for body in statement_lists(fn):
        for init, loop in itertools.pairwise(body):
            found = _collector(init)
            if found is None or not isinstance(loop, ast.For) or loop.orelse or len(loop.body) != 1:
                continue
            name, kind = found
            inner, conds = loop.body[0], []
            if isinstance(inner, ast.If) and not inner.orelse and len(inner.body) == 1:
                conds, inner = [inner.test], inner.body[0]
            elt = _appended(inner, name, kind)
            if elt is None or not scope_safe([loop]) or not module.alone(init) \
                    or name in loaded_names(loop.iter) | loaded_names(elt) | set().union(*map(loaded_names, conds)):
                continue
            if uses_outside(fn, target_names(loop.target), [loop]):
                continue  # the loop variable is read after the loop; a comprehension would not bind it
            gen = ast.comprehension(target=clone(loop.target), iter=clone(loop.iter), ifs=conds, is_async=0)
            new = clone(init)
            new.value = ast.ListComp(elt=elt, generators=[gen]) if kind == "list" else ast.SetComp(  # type: ignore[attr-defined]
                elt=elt, generators=[gen])
            text = module.edited([module.replace(init, [new]), delete(loop)])
            if text is not None:
                yield Candidate({module.path: text}, f"{module.path}:{qualname}:{loop.lineno} loop -> comprehension")


def _comprehension_to_loop(module: Module, qualname: str, fn: ast.FunctionDef) -> Iterator[Candidate]:
    for body in statement_lists(fn):
        for stmt in body:
            value = getattr(stmt, "value", None)
            if not isinstance(value, ast.ListComp | ast.SetComp | ast.DictComp) or not module.alone(stmt):
                continue
            if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
                name, tail = stmt.targets[0].id, []
            elif isinstance(stmt, ast.Return):
                name = module.fresh("result")
                tail = [ast.Return(value=ast.Name(id=name, ctx=ast.Load()))]
            else:
                continue
            bound = set().union(*(target_names(g.target) for g in value.generators))
            if not scope_safe([value]) or name in loaded_names(value) or uses_outside(fn, bound, [stmt]) \
                    or any(g.is_async for g in value.generators):
                continue
            kind = {ast.ListComp: "list", ast.SetComp: "set", ast.DictComp: "dict"}[type(value)]
            target = ast.Name(id=name, ctx=ast.Load())
            if isinstance(value, ast.DictComp):
                inner: ast.stmt = ast.Assign(targets=[ast.Subscript(value=target, slice=clone(value.key),
                                                                    ctx=ast.Store())], value=clone(value.value))
            else:
                call = ast.Call(func=ast.Attribute(value=target, attr=_KINDS[kind], ctx=ast.Load()),
                                args=[clone(value.elt)], keywords=[])
                inner = ast.Expr(call)
            for gen in reversed(value.generators):
                for cond in reversed(gen.ifs):
                    inner = ast.If(test=clone(cond), body=[inner], orelse=[])
                inner = ast.For(target=clone(gen.target), iter=clone(gen.iter), body=[inner], orelse=[])
            init = ast.Assign(targets=[ast.Name(id=name, ctx=ast.Store())], value=_empty(kind))
            text = module.edited([module.replace(stmt, [init, inner, *tail])])
            if text is not None:
                yield Candidate({module.path: text}, f"{module.path}:{qualname}:{stmt.lineno} comprehension -> loop")


def _empty(kind: str) -> ast.expr:
    if kind == "list":
        return ast.List(elts=[], ctx=ast.Load())
    if kind == "dict":
        return ast.Dict(keys=[], values=[])
    return ast.Call(func=ast.Name(id="set", ctx=ast.Load()), args=[], keywords=[])


def comprehension_variants(sources: Sources) -> Iterator[Candidate]:
    """``xs = []`` then ``for t in it: [if c:] xs.append(e)`` becomes ``xs = [e for t in it if c]``
    (``set()`` / ``.add``: a set comprehension); and a comprehension assigned or returned becomes
    the loop that builds it."""
    for module in sources.modules():
        for qualname, fn, _, _ in module.functions():
            yield from _loop_to_comprehension(module, qualname, fn)
            yield from _comprehension_to_loop(module, qualname, fn)


# ---- early returns ------------------------------------------------------------------------------

def _terminates(body: list[ast.stmt]) -> bool:
    return bool(body) and isinstance(body[-1], ast.Return | ast.Raise)


def _is_elif(module: Module, stmt: ast.stmt) -> bool:
    return module.lines[stmt.lineno - 1].lstrip().startswith("elif")


def _returned_name(stmt: ast.stmt | None) -> str | None:
    if isinstance(stmt, ast.Return) and isinstance(stmt.value, ast.Name):
        return stmt.value.id
    return None


def _assigned_value(body: list[ast.stmt], name: str) -> ast.expr | None:
    """The value of a branch whose last statement is ``name = value`` (and that uses ``name`` nowhere else)."""
    last = body[-1] if body else None
    if not (isinstance(last, ast.Assign) and len(last.targets) == 1 and isinstance(last.targets[0], ast.Name)
            and last.targets[0].id == name) or name in loaded_names(last.value):
        return None
    if any(isinstance(n, ast.Name) and n.id == name for s in body[:-1] for n in ast.walk(s)):
        return None
    return clone(last.value)


def _early_returns(module: Module, qualname: str, fn: ast.FunctionDef) -> Iterator[Candidate]:
    where = f"{module.path}:{qualname}"
    for body in statement_lists(fn):
        for pos, stmt in enumerate(body):
            after = body[pos + 1] if pos + 1 < len(body) else None
            if isinstance(stmt, ast.Return) and isinstance(stmt.value, ast.IfExp) and module.alone(stmt):
                value = stmt.value  # return a if c else b  ->  if c: return a / return b
                guard = ast.If(test=clone(value.test), body=[ast.Return(value=clone(value.body))], orelse=[])
                text = module.edited([module.replace(stmt, [guard, ast.Return(value=clone(value.orelse))])])
                if text is not None:
                    yield Candidate({module.path: text}, f"{where}:{stmt.lineno} conditional return split")
            if not isinstance(stmt, ast.If) or not module.alone(stmt) or _is_elif(module, stmt):
                continue
            if stmt.orelse and _terminates(stmt.body):  # if c: return a / else: B  ->  if c: return a / B
                guard = clone(stmt)
                guard.orelse = []
                text = module.edited([module.replace(stmt, [guard, *clone_all(stmt.orelse)])])
                if text is not None:
                    yield Candidate({module.path: text}, f"{where}:{stmt.lineno} else dedented")
            elif not stmt.orelse and _terminates(stmt.body) and body is fn.body and after is not None:
                rest = body[pos + 1:]  # if c: return a / B  ->  if c: return a / else: B
                nested = ast.If(test=clone(stmt.test), body=clone_all(stmt.body), orelse=clone_all(rest))
                last = rest[-1]
                edit = module.replace(stmt, [nested])
                text = module.edited([Edit(edit.start, last.end_lineno or last.lineno, edit.text)])
                if text is not None:
                    yield Candidate({module.path: text}, f"{where}:{stmt.lineno} guard -> else branch")
            elif stmt.orelse and (result := _returned_name(after)) is not None:
                a, b = _assigned_value(stmt.body, result), _assigned_value(stmt.orelse, result)
                if a is None or b is None or after is None or uses_outside(fn, {result}, [stmt, after]):
                    continue  # if c: r = a / else: r = b / return r  ->  if c: return a / return b
                guard = ast.If(test=clone(stmt.test), body=[*clone_all(stmt.body[:-1]), ast.Return(value=a)],
                               orelse=[])
                text = module.edited([module.replace(stmt, [guard, *clone_all(stmt.orelse[:-1]), ast.Return(value=b)]),
                                      delete(after)])
                if text is not None:
                    yield Candidate({module.path: text}, f"{where}:{stmt.lineno} return {result} directly")


def early_return_variants(sources: Sources) -> Iterator[Candidate]:
    """Return early where the gold has an ``else`` branch, a result variable or a conditional
    expression, and the other way: a guard clause's rest moved into an ``else`` branch."""
    for module in sources.modules():
        for qualname, fn, _, _ in module.functions():
            yield from _early_returns(module, qualname, fn)


RULES = [
    Rule("comprehension", "rewrite a for-append loop as a comprehension, or a comprehension as its loop", False,
         comprehension_variants),
    Rule("early_return", "return early instead of an else branch, a result variable or a conditional "
         "expression (or move a guard's rest into an else)", False, early_return_variants),
]
