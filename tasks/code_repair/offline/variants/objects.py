"""Rules for objects whose private layout differs from the gold's (issue 37 item 3, family c).

*A property where the gold had an attribute*: a public attribute that ``__init__`` sets becomes a
property (with a setter) over a private attribute of another name; every read and write still goes
through the attribute's name. *A typed named tuple where the gold had a dataclass*: a frozen
dataclass of plain annotated fields becomes a ``typing.NamedTuple`` class with the same fields and
methods. Either way ``==`` between two objects of the class still compares the same values, and
pytest passes the variant wherever the project's tests do (:mod:`.build` keeps only those).

The probe views an object of a gold class with an ``__eq__`` by what that ``__eq__`` compares, read
with ``getattr`` in its own frame (``runtime.viewer``), so like form rules these change no observed
value there alone: they are stacked on the project's base variant.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from envhub import safe_ast

from .rules import Candidate, Rule, Sources
from .source import clone, import_stmt, is_dunder

_PROPERTY = '''
@property
def {name}(self):
    return self.{store}

@{name}.setter
def {name}(self, value):
    self.{store} = value
'''


def _decorated_dataclass(node: ast.ClassDef) -> bool:
    if len(node.decorator_list) != 1:
        return False
    deco = node.decorator_list[0]
    target = deco.func if isinstance(deco, ast.Call) else deco
    if ast.unparse(target).split(".")[-1] != "dataclass" or not isinstance(deco, ast.Call) or deco.args:
        return False
    keywords = {k.arg: k.value for k in deco.keywords}
    frozen = keywords.pop("frozen", None)
    return isinstance(frozen, ast.Constant) and frozen.value is True and not keywords


def _init_attributes(init: ast.FunctionDef) -> list[str]:
    """The public attributes ``__init__`` assigns on ``self`` (``self.x = ...``), in order."""
    me = init.args.args[0].arg
    found = [t.attr for n in ast.walk(init) if isinstance(n, ast.Assign | ast.AnnAssign)
             for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
             if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == me]
    return [name for name in dict.fromkeys(found) if not name.startswith("_")]


def property_variants(sources: Sources) -> Iterator[Candidate]:
    """Per class with an ``__init__`` and no ``__slots__``, per public attribute it sets: a property
    of that name (and its setter) over a private attribute, added at the end of the class."""
    for module in sources.modules():
        for node in module.tree.body:
            if not isinstance(node, ast.ClassDef) or node.decorator_list:
                continue
            members = {n.name for n in node.body if isinstance(n, ast.FunctionDef | ast.ClassDef)}
            members |= {t.id for n in node.body if isinstance(n, ast.Assign | ast.AnnAssign)
                        for t in (n.targets if isinstance(n, ast.Assign) else [n.target]) if isinstance(t, ast.Name)}
            init = next((n for n in node.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None)
            if init is None or not init.args.args or "__slots__" in members or "__setattr__" in members:
                continue
            for name in _init_attributes(init):
                if name in members:
                    continue
                store = module.fresh(f"_{name}_value")
                added = safe_ast.parse(_PROPERTY.format(name=name, store=store)).body
                text = module.edited([module.insert_after(node.body[-1], added, blank=0)])
                if text is not None:
                    yield Candidate({module.path: text}, f"{module.path}:{node.name}.{name} -> property over {store}")


def namedtuple_variants(sources: Sources) -> Iterator[Candidate]:
    """Per ``@dataclass(frozen=True)`` class without bases whose fields are plain annotations (no
    ``field(...)``, no ``ClassVar``, no private names) and no ``__post_init__``: the same class as a
    ``typing.NamedTuple``."""
    for module in sources.modules():
        for node in module.tree.body:
            if not isinstance(node, ast.ClassDef) or node.bases or node.keywords or not _decorated_dataclass(node):
                continue
            fields = [n for n in node.body if isinstance(n, ast.AnnAssign)]
            if not fields or any(not isinstance(f.target, ast.Name) or f.target.id.startswith("_")
                                 or "ClassVar" in ast.unparse(f.annotation)
                                 or (isinstance(f.value, ast.Call) and "field" in ast.unparse(f.value.func))
                                 for f in fields):
                continue
            methods = [n for n in node.body if isinstance(n, ast.FunctionDef)]
            if any(is_dunder(m.name) and m.name not in ("__str__", "__repr__") for m in methods):
                continue
            top = []
            alias = module.module_alias("typing")
            if alias is None:
                alias = module.fresh("_typing")
                top.append(import_stmt("typing", alias))
            new = clone(node)
            new.decorator_list = []
            new.bases = [safe_ast.parse(f"{alias}.NamedTuple", mode="eval").body]
            edits = [module.replace(node, [new])]
            if top:
                edits.insert(0, module.insert_at_top(top))
            text = module.edited(edits)
            if text is not None:
                yield Candidate({module.path: text}, f"{module.path}:{node.name} -> typing.NamedTuple")


RULES = [
    Rule("property_for_attribute", "a public attribute __init__ sets becomes a property (with a setter) over a "
         "private attribute of another name", False, property_variants),
    Rule("namedtuple_for_dataclass", "a frozen dataclass of plain fields becomes a typing.NamedTuple class",
         False, namedtuple_variants),
]

