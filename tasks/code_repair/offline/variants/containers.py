"""Rules for two families of correct fixes the probes once rejected (issue 37 item 3).

*Containers equal to a builtin one under the container protocol*: where the gold returns a dict, a
``collections.UserDict``, a read-only ``types.MappingProxyType``, or a ``collections.abc.Mapping``
class of the module's own (equal to a dict through ``Mapping.__eq__``); where it returns a list, a
``collections.UserList``; where it returns a set, a ``collections.abc.Set`` class of its own or a
dict's keys view. A ``Sequence`` class in place of a list is *not* such a fix: it has no list
equality, and pytest fails it.

*Numbers* ``pytest.approx`` *accepts*: where a function annotated ``-> float`` returns, the exact
``Fraction`` or ``Decimal`` of the value (equal to the float under ``==``), or its divisions done
exactly in ``Fraction`` (not equal to the float, within any ``approx`` tolerance of it); where one
annotated ``-> int`` returns, its ``Fraction``.

Each candidate is kept only where the project's real pytest suite passes on it (:mod:`.build`). The
probe rebuilds the containers into builtins in its own frame before it observes them, so their rules
change no observed value alone: they are stacked on the project's base variant, like form rules.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator

from envhub import safe_ast

from .rules import Candidate, Rule, Sources
from .source import Edit, Module, clone, import_stmt, is_dunder, own_nodes
from .values import Matcher, _any_value, _is_dict, _is_list, _is_set, _returns, _wrap

#: what a module needs at its top and how a returned value is rewrapped, for one module
Wrapping = Callable[[Module], tuple[list[ast.stmt], Callable[[ast.expr], ast.expr]]]

_MAPPING = '''
class {name}({abc}.Mapping):
    def __init__(self, data=()):
        self._data = dict(data)

    def __getitem__(self, key):
        return self._data[key]

    def __iter__(self):
        return iter(self._data)

    def __len__(self):
        return len(self._data)

    def __repr__(self):
        return repr(self._data)
'''

_SET = '''
class {name}({abc}.Set):
    def __init__(self, items=()):
        self._items = frozenset(items)

    def __contains__(self, item):
        return item in self._items

    def __iter__(self):
        return iter(self._items)

    def __len__(self):
        return len(self._items)

    def __repr__(self):
        return repr(set(self._items))
'''


def _alias(module: Module, name: str, top: list[ast.stmt]) -> str:
    """The name ``import name`` binds in ``module``, adding the import to ``top`` where it has none."""
    alias = module.module_alias(name)
    if alias is None:
        alias = module.fresh("_" + name.replace(".", "_"))
        top.append(import_stmt(name, alias))
    return alias


def _stdlib(module_name: str, attribute: str) -> Wrapping:
    def make(module: Module) -> tuple[list[ast.stmt], Callable[[ast.expr], ast.expr]]:
        top: list[ast.stmt] = []
        return top, _wrap(f"{_alias(module, module_name, top)}.{attribute}")
    return make


def _own_class(template: str, stem: str) -> Wrapping:
    def make(module: Module) -> tuple[list[ast.stmt], Callable[[ast.expr], ast.expr]]:
        top: list[ast.stmt] = []
        abc = _alias(module, "collections.abc", top)
        name = module.fresh(stem)
        top += safe_ast.parse(template.format(name=name, abc=abc)).body
        return top, _wrap(name)
    return make


def _keys_view(module: Module) -> tuple[list[ast.stmt], Callable[[ast.expr], ast.expr]]:
    def wrap(value: ast.expr) -> ast.expr:
        made = _wrap("dict.fromkeys")(value)
        return ast.Call(ast.Attribute(made, "keys", ast.Load()), [], [])
    return [], wrap


def _fraction_divisions(module: Module) -> tuple[list[ast.stmt], Callable[[ast.expr], ast.expr]]:
    top: list[ast.stmt] = []
    fraction = f"{_alias(module, 'fractions', top)}.Fraction"

    class Exact(ast.NodeTransformer):
        def visit_BinOp(self, node: ast.BinOp) -> ast.expr:
            self.generic_visit(node)
            if not isinstance(node.op, ast.Div):
                return node
            node.left, node.right = (ast.Call(safe_ast.parse(fraction, mode="eval").body, [side], [])
                                     for side in (node.left, node.right))
            return node

    return top, lambda value: Exact().visit(value)


def _is_set_like(node: ast.expr) -> bool:
    return _is_set(node) or (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                             and node.func.id == "frozenset")


def _has_division(node: ast.expr) -> bool:
    return any(isinstance(n, ast.BinOp) and isinstance(n.op, ast.Div) for n in ast.walk(node))


def _annotation(fn: ast.FunctionDef) -> str:
    """The function's return annotation without its parameters (``dict[str, int]`` -> ``dict``)."""
    return "" if fn.returns is None else ast.unparse(fn.returns).strip("'\"").split("[")[0]


def _rewrapped(sources: Sources, matches: Matcher, make: Wrapping, annotated: str | None = None,
               kind: str | None = None) -> Iterator[Candidate]:
    """One candidate per function: every return of a value ``matches`` accepts (in a function annotated
    ``-> kind[...]``: every return of a value) rewrapped as ``make`` says, with what ``make`` needs added
    at the top of the module."""
    for module in sources.modules():
        for qualname, fn, _, _ in module.functions():
            if is_dunder(fn.name) or any(isinstance(n, ast.Yield | ast.YieldFrom) for n in own_nodes(fn)):
                continue
            if annotated is not None and _annotation(fn) != annotated:
                continue
            typed = kind is not None and _annotation(fn).lower() in (kind, "mapping" if kind == "dict" else kind)
            returns = _returns(fn, _any_value if typed else matches)
            if not returns or not all(module.alone(r) for r in returns):
                continue
            top, wrap = make(module)
            edits: list[Edit] = [module.insert_at_top(top)] if top else []
            for node in returns:
                new = clone(node)
                assert isinstance(new, ast.Return) and new.value is not None
                new.value = wrap(new.value)
                edits.append(module.replace(node, [new]))
            text = module.edited(edits)
            if text is not None:
                yield Candidate({module.path: text}, f"{module.path}:{qualname}: {len(returns)} returns")


def _rule(name: str, description: str, matches: Matcher, make: Wrapping, annotated: str | None = None) -> Rule:
    kind = {_is_dict: "dict", _is_list: "list", _is_set_like: "set"}.get(matches)
    return Rule(name, description, kind is None, lambda sources: _rewrapped(sources, matches, make, annotated, kind))


#: numbers first (observable); then the container rules, which the probe rebuilds into the gold's own
#: builtins before observing (``runtime.as_builtin``): like form rules they change no observed value
#: alone, so they are stacked on the project's base variant
RULES = [
    _rule("fraction_for_float", "return the exact fractions.Fraction of the value from a function annotated "
          "-> float (equal under ==)", _any_value, _stdlib("fractions", "Fraction"), annotated="float"),
    _rule("fraction_for_int", "return fractions.Fraction(x) from a function annotated -> int (equal under ==)",
          _any_value, _stdlib("fractions", "Fraction"), annotated="int"),
    _rule("decimal_for_float", "return the exact decimal.Decimal of the value from a function annotated -> float "
          "(equal under ==)", _any_value, _stdlib("decimal", "Decimal"), annotated="float"),
    _rule("exact_fraction_division", "divide exactly in fractions.Fraction in the returns of a function annotated "
          "-> float (within pytest.approx of the float, not equal to it)", _has_division, _fraction_divisions,
          annotated="float"),
    _rule("user_dict_for_dict", "return a collections.UserDict where the gold returns a dict (Mapping.__eq__)",
          _is_dict, _stdlib("collections", "UserDict")),
    _rule("mapping_proxy_for_dict", "return a read-only types.MappingProxyType where the gold returns a dict",
          _is_dict, _stdlib("types", "MappingProxyType")),
    _rule("abc_mapping_for_dict", "return an instance of a collections.abc.Mapping class of the module's own "
          "where the gold returns a dict", _is_dict, _own_class(_MAPPING, "_ReadOnlyMapping")),
    _rule("user_list_for_list", "return a collections.UserList where the gold returns a list (equal under ==)",
          _is_list, _stdlib("collections", "UserList")),
    _rule("abc_set_for_set", "return an instance of a collections.abc.Set class of the module's own where the "
          "gold returns a set", _is_set_like, _own_class(_SET, "_ReadOnlySet")),
    _rule("keys_view_for_set", "return dict.fromkeys(x).keys() where the gold returns a set (a set-like view)",
          _is_set_like, _keys_view),
]
