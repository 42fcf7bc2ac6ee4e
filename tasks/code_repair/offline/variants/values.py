"""Rules on values: state the class's own ``__eq__`` ignores, and containers equal under ``==``.

``pytest`` compares with ``==``: an object with an extra private attribute equals the gold's under
a class ``__eq__`` that compares the public state (or a dataclass field with ``compare=False``);
``frozenset`` equals ``set``, ``OrderedDict`` equals ``dict``, a namedtuple equals its tuple,
``3.0`` and ``Decimal(3)`` equal ``3``. A tuple never equals a list, so ``tuple_for_list`` only
survives where the tests iterate, index, measure or ``list()`` the result.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator, Sequence

from envhub import safe_ast

from .rules import Candidate, Rule, Sources
from .source import Edit, Module, camel, clone, dotted, import_stmt, is_dunder, own_nodes

_STATE = ("_cache", "_memo", "_scratch")


def _is_dataclass(node: ast.ClassDef) -> bool:
    for dec in node.decorator_list:
        target = dec.func if isinstance(dec, ast.Call) else dec
        if dotted(target) in ("dataclass", "dataclasses.dataclass"):
            return True
    return False


def _skip_class(node: ast.ClassDef) -> bool:
    """Enums and typed named tuples: an added attribute would be a member or a field."""
    bases = {(dotted(b) or "").rpartition(".")[2] for b in node.bases}
    return bool(bases & {"Enum", "IntEnum", "StrEnum", "Flag", "IntFlag", "NamedTuple", "TypedDict", "Protocol"})


def _state_name(module: Module, node: ast.ClassDef) -> str:
    text = ast.unparse(node)
    for name in _STATE:
        if name not in text:
            return name
    return module.fresh("_scratch")


def private_attribute_variants(sources: Sources) -> Iterator[Candidate]:
    """For each class: a private attribute set first thing in ``__init__``; for a dataclass without
    one, a private ``field(default_factory=dict, compare=False, repr=False)``."""
    for module in sources.modules():
        for node in module.tree.body:
            if not isinstance(node, ast.ClassDef) or _skip_class(node):
                continue
            name = _state_name(module, node)
            init = next((f for f in node.body if isinstance(f, ast.FunctionDef) and f.name == "__init__"), None)
            edits: list[Edit] = []
            if init is not None and init.args.args:
                self_name = init.args.args[0].arg
                stmt = safe_ast.parse(f"{self_name}.{name}: dict = {{}}").body
                body = init.body
                has_doc = isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                anchor = body[1] if has_doc and len(body) > 1 else body[0]
                if has_doc and len(body) == 1:
                    edits.append(module.insert_after(body[0], stmt))
                else:
                    edits.append(module.insert_before(anchor, stmt))
            elif init is None and _is_dataclass(node):
                fields = [f for f in node.body if isinstance(f, ast.AnnAssign) and isinstance(f.target, ast.Name)]
                if not fields:
                    continue
                alias = module.module_alias("dataclasses")
                if alias is None:
                    alias = module.fresh("_dataclasses")
                    edits.append(module.insert_at_top([import_stmt("dataclasses", alias)]))
                stmt = safe_ast.parse(
                    f"{name}: dict = {alias}.field(default_factory=dict, compare=False, repr=False)").body
                edits.append(module.insert_after(fields[-1], stmt))
            else:
                continue
            text = module.edited(edits)
            if text is not None:
                yield Candidate({module.path: text}, f"{module.path}:{node.name}.{name}")


# ---- containers ---------------------------------------------------------------------------------

Matcher = Callable[[ast.expr], bool]


def _call_to(node: ast.expr, *names: str) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in names


def _is_list(node: ast.expr) -> bool:
    return isinstance(node, ast.List | ast.ListComp) or _call_to(node, "list", "sorted")


def _is_set(node: ast.expr) -> bool:
    return isinstance(node, ast.Set | ast.SetComp) or _call_to(node, "set")


def _is_dict(node: ast.expr) -> bool:
    return isinstance(node, ast.Dict | ast.DictComp) or _call_to(node, "dict")


def _returns(fn: ast.FunctionDef, matches: Matcher) -> list[ast.Return]:
    """The function's returns of a value ``matches`` accepts: literally, or a local name every
    binding of which is a plain assignment of such a value (``result = []`` ... ``return result``)."""
    values: dict[str, list[ast.expr | None]] = {}
    plain: set[int] = set()
    for node in own_nodes(fn):
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            target, value = node.target, node.value
        else:
            continue
        if isinstance(target, ast.Name):
            values.setdefault(target.id, []).append(value)
            plain.add(id(target))
    for node in own_nodes(fn):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store) and id(node) not in plain:
            values.setdefault(node.id, []).append(None)  # bound some other way: a loop, +=, with, :=
    found = []
    for node in own_nodes(fn):
        if isinstance(node, ast.Return) and node.value is not None:
            value = node.value
            if matches(value) or (isinstance(value, ast.Name) and value.id in values
                                  and all(v is not None and matches(v) for v in values[value.id])):
                found.append(node)
    return sorted(found, key=lambda n: n.lineno)


def _name(dotted_name: str) -> ast.expr:
    head, *rest = dotted_name.split(".")
    node: ast.expr = ast.Name(id=head, ctx=ast.Load())
    for part in rest:
        node = ast.Attribute(value=node, attr=part, ctx=ast.Load())
    return node


def _wrap(func: str) -> Callable[[ast.expr], ast.expr]:
    def wrap(value: ast.expr) -> ast.expr:
        args = [value]
        if isinstance(value, ast.ListComp | ast.SetComp):
            args = [ast.GeneratorExp(elt=value.elt, generators=value.generators)]
        elif isinstance(value, ast.Call) and _call_to(value, "list", "set", "dict") and len(value.args) <= 1 \
                and not value.keywords:
            args = list(value.args)  # list(x) -> tuple(x), set() -> frozenset()
        return ast.Call(func=_name(func), args=args, keywords=[])
    return wrap


def _return_variants(sources: Sources, matches: Matcher, wrapper: str, module_needed: str | None = None,
                     annotated: str | None = None) -> Iterator[Candidate]:
    """One candidate per function: every matching return wrapped in ``wrapper(...)`` (a dotted
    name on ``module_needed``, imported at the top if the file does not import it)."""
    for module in sources.modules():
        for qualname, fn, _, _ in module.functions():
            if is_dunder(fn.name) or any(isinstance(n, ast.Yield | ast.YieldFrom) for n in own_nodes(fn)):
                continue
            if annotated is not None and not (fn.returns is not None and ast.unparse(fn.returns).strip("'\"")
                                              == annotated):
                continue
            returns = _returns(fn, matches)
            if not returns or not all(module.alone(r) for r in returns):
                continue
            edits: list[Edit] = []
            func = wrapper
            if module_needed is not None:
                alias = module.module_alias(module_needed)
                if alias is None:
                    alias = module.fresh(f"_{module_needed}")
                    edits.append(module.insert_at_top([import_stmt(module_needed, alias)]))
                func = f"{alias}.{wrapper}"
            wrap = _wrap(func)
            for node in returns:
                new = clone(node)
                assert isinstance(new, ast.Return) and new.value is not None
                new.value = wrap(new.value)
                edits.append(module.replace(node, [new]))
            text = module.edited(edits)
            if text is not None:
                yield Candidate({module.path: text}, f"{module.path}:{qualname}: {len(returns)} returns")


def tuple_variants(sources: Sources) -> Iterator[Candidate]:
    return _return_variants(sources, _is_list, "tuple")


def frozenset_variants(sources: Sources) -> Iterator[Candidate]:
    return _return_variants(sources, _is_set, "frozenset")


def ordered_dict_variants(sources: Sources) -> Iterator[Candidate]:
    return _return_variants(sources, _is_dict, "OrderedDict", "collections")


def _any_value(node: ast.expr) -> bool:
    return not (isinstance(node, ast.Constant) and node.value is None)


def float_variants(sources: Sources) -> Iterator[Candidate]:
    return _return_variants(sources, _any_value, "float", annotated="int")


def decimal_variants(sources: Sources) -> Iterator[Candidate]:
    return _return_variants(sources, _any_value, "Decimal", "decimal", annotated="int")


def _tuple_display(node: ast.expr | None) -> int:
    """The length of a tuple display without starred items, else -1."""
    if isinstance(node, ast.Tuple) and not any(isinstance(e, ast.Starred) for e in node.elts):
        return len(node.elts)
    return -1


def _tuple_sites(fn: ast.FunctionDef) -> Iterator[tuple[str, Sequence[ast.Return | ast.Expr]]]:
    """The statements that hand out tuple displays of one length: every ``return (a, b)`` of the
    function; or every ``xs.append((a, b))`` into a list ``xs`` it returns."""
    returns = [n for n in own_nodes(fn) if isinstance(n, ast.Return) and n.value is not None]
    if returns and len({_tuple_display(r.value) for r in returns}) == 1 and _tuple_display(returns[0].value) >= 2:
        yield "returned", sorted(returns, key=lambda n: n.lineno)
    returned = {r.value.id for r in returns if isinstance(r.value, ast.Name)}
    for name in sorted(returned):
        appends = [n for n in own_nodes(fn) if isinstance(n, ast.Expr) and isinstance(n.value, ast.Call)
                   and isinstance(n.value.func, ast.Attribute) and n.value.func.attr == "append"
                   and isinstance(n.value.func.value, ast.Name) and n.value.func.value.id == name
                   and len(n.value.args) == 1]
        sizes = {_tuple_display(n.value.args[0]) for n in appends if isinstance(n.value, ast.Call)}
        if appends and len(sizes) == 1 and min(sizes) >= 2:
            yield f"appended to {name}", sorted(appends, key=lambda n: n.lineno)


def namedtuple_variants(sources: Sources) -> Iterator[Candidate]:
    """Per function: a module-level namedtuple instead of the tuple displays it returns (or appends
    to the list it returns)."""
    for module in sources.modules():
        for qualname, fn, _, _ in module.functions():
            if is_dunder(fn.name):
                continue
            for kind, sites in _tuple_sites(fn):
                if not all(module.alone(s) for s in sites):
                    continue
                alias = module.module_alias("collections")
                top: list[ast.stmt] = []
                if alias is None:
                    alias = module.fresh("_collections")
                    top.append(import_stmt("collections", alias))
                name = module.fresh(f"_{camel(qualname)}Item")
                first = sites[0].value
                size = _tuple_display(first.args[0] if isinstance(first, ast.Call) else first)
                fields = " ".join(f"item{i}" for i in range(size))
                top += safe_ast.parse(f'{name} = {alias}.namedtuple("{name}", "{fields}")').body
                edits: list[Edit] = [module.insert_at_top(top)]
                for node in sites:
                    new = clone(node)
                    call = new.value if isinstance(new, ast.Expr) else None
                    display = call.args[0] if isinstance(call, ast.Call) else new.value
                    assert isinstance(display, ast.Tuple)
                    made = ast.Call(func=ast.Name(id=name, ctx=ast.Load()), args=display.elts, keywords=[])
                    if isinstance(call, ast.Call):
                        call.args[0] = made
                    else:
                        new.value = made
                    edits.append(module.replace(node, [new]))
                text = module.edited(edits)
                if text is not None:
                    yield Candidate({module.path: text}, f"{module.path}:{qualname}: {kind} -> {name}")


RULES = [
    Rule("private_attribute", "add a private attribute in __init__ (a compare=False field of a dataclass)",
         True, private_attribute_variants),
    Rule("tuple_for_list", "return a tuple where the gold returns a list", True, tuple_variants),
    Rule("frozenset_for_set", "return a frozenset where the gold returns a set (equal under ==)", True,
         frozenset_variants),
    Rule("ordered_dict_for_dict", "return a collections.OrderedDict where the gold returns a dict (equal under ==)",
         True, ordered_dict_variants),
    Rule("namedtuple_for_tuple", "a namedtuple where the gold returns (or collects into a returned list) a "
         "tuple display (equal under ==)",
         True, namedtuple_variants),
    Rule("float_for_int", "return float(x) from a function annotated -> int (equal under ==)", True,
         float_variants),
    Rule("decimal_for_int", "return decimal.Decimal(x) from a function annotated -> int (equal under ==)", True,
         decimal_variants),
]
