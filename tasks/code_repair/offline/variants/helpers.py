"""Form rule: helper functions extracted (alone it changes no observed value; see :mod:`.refactors`)."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from .rules import Candidate, Rule, Sources
from .source import (
    Edit,
    FuncSite,
    Module,
    bound_in,
    clone,
    clone_all,
    first_line,
    loaded_names,
    local_names,
    own_nodes,
    scope_safe,
    target_names,
    uses_outside,
)


def _helper(module: Module, site: FuncSite, stem: str, params: list[str], body: list[ast.stmt]) -> tuple[str, Edit]:
    """A new module-level function right before the statement that holds ``site``'s function."""
    qualname, _, _, top = site
    name = module.fresh(f"_{qualname.lstrip('_').replace('.', '_').lower()}_{stem.lower()}")
    args = ast.arguments(posonlyargs=[], args=[ast.arg(arg=p) for p in params], vararg=None, kwonlyargs=[],
                         kw_defaults=[], kwarg=None, defaults=[])
    doc = ast.Expr(ast.Constant(f"{stem} of {qualname}, extracted."))
    definition = ast.FunctionDef(name=name, args=args, body=[doc, *body], decorator_list=[], returns=None,
                                 type_comment=None)
    return name, module.insert_before(top, [definition], blank=2)


def _call(name: str, params: list[str]) -> ast.Call:
    return ast.Call(func=ast.Name(id=name, ctx=ast.Load()), args=[ast.Name(id=p, ctx=ast.Load()) for p in params],
                    keywords=[])


def _loop_body(module: Module, site: FuncSite) -> Iterator[Candidate]:
    """The body of the function's first ``for`` loop that allows it, as ``helper(locals it reads)``."""
    qualname, fn, _, _ = site
    locals_ = local_names(fn)
    for loop in sorted((n for n in own_nodes(fn) if isinstance(n, ast.For) and not n.orelse), key=lambda n: n.lineno):
        body = loop.body
        if len(body) < 2 or not scope_safe(list(body)) or not all(module.alone(s) for s in body):
            continue
        stored = bound_in(body)
        if uses_outside(fn, stored, list(body)):
            continue  # the body rebinds a name that lives on after it (or before it: loop-carried)
        read = loaded_names(ast.Module(body=body, type_ignores=[]))
        params = sorted(((read & locals_) - stored) | (target_names(loop.target) & read))
        helper, definition = _helper(module, site, "Step", params, clone_all(body))
        first, last = body[0], body[-1]
        call = module.replace(first, [ast.Expr(_call(helper, params))]).text
        text = module.edited([definition, Edit(first_line(first), last.end_lineno or last.lineno, call)])
        if text is not None:
            yield Candidate({module.path: text}, f"{module.path}:{qualname}:{loop.lineno} loop body -> {helper}")
            return


def _return_value(module: Module, site: FuncSite) -> Iterator[Candidate]:
    """The value of the function's first computed ``return`` as ``return helper(locals it reads)``."""
    qualname, fn, _, _ = site
    locals_ = local_names(fn)
    for node in sorted((n for n in own_nodes(fn) if isinstance(n, ast.Return)), key=lambda n: n.lineno):
        value = node.value
        if value is None or isinstance(value, ast.Name | ast.Constant | ast.Attribute) or not module.alone(node) \
                or not scope_safe([value]):
            continue
        params = sorted(loaded_names(value) & locals_)
        helper, definition = _helper(module, site, "Value", params, [ast.Return(value=clone(value))])
        text = module.edited([definition, module.replace(node, [ast.Return(value=_call(helper, params))])])
        if text is not None:
            yield Candidate({module.path: text}, f"{module.path}:{qualname}:{node.lineno} return value -> {helper}")
            return


def _condition(module: Module, site: FuncSite) -> Iterator[Candidate]:
    """The test of the function's first ``if`` with a computed condition, as a predicate helper."""
    qualname, fn, _, _ = site
    locals_ = local_names(fn)
    for node in sorted((n for n in own_nodes(fn) if isinstance(n, ast.If)), key=lambda n: n.lineno):
        test = node.test
        if not isinstance(test, ast.Compare | ast.BoolOp | ast.Call | ast.UnaryOp) or not module.alone(node) \
                or module.lines[node.lineno - 1].lstrip().startswith("elif") or not scope_safe([test]):
            continue
        params = sorted(loaded_names(test) & locals_)
        helper, definition = _helper(module, site, "Check", params, [ast.Return(value=clone(test))])
        new = clone(node)
        new.test = _call(helper, params)
        text = module.edited([definition, module.replace(node, [new])])
        if text is not None:
            yield Candidate({module.path: text}, f"{module.path}:{qualname}:{node.lineno} condition -> {helper}")
            return


def extract_helper_variants(sources: Sources) -> Iterator[Candidate]:
    """Per function: the body of a ``for`` loop moved into a new module-level function that the loop
    calls with the locals it reads (a body that rebinds a name used outside it, or leaves the loop
    early, is left alone); its first computed return value, moved the same way; the condition of
    its first computed ``if``, as a predicate."""
    for module in sources.modules():
        for site in module.functions():
            yield from _loop_body(module, site)
            yield from _return_value(module, site)
            yield from _condition(module, site)


RULES = [
    Rule("extract_helper", "extract a loop body, a computed return value or an if condition into a module-level "
         "helper function",
         False, extract_helper_variants),
]
