"""What a project class's ``==`` compares, read from the gold sources (trusted; parsed, never run).

The trusted side compares observed objects the way the gold class's own ``__eq__`` does
(:func:`envhub.verifiers.probes.compare.same_value`): a submission that keeps extra private state
(a cache, a counter) is equal under that ``__eq__``, and pytest would pass it. :func:`eq_fields`
finds, for each class of the gold sources, the instance attributes its equality reads:

- a ``@dataclass`` (``eq`` not false): its fields in order, without ``ClassVar`` ones and those
  with ``field(compare=False)``, its dataclass bases' first;
- an ``__eq__`` that reads ``self.<name>`` (and the same names of ``other``), also through
  methods of the class it calls on ``self`` (``self._key() == other._key()``), two calls deep;
- a class without an ``__eq__`` of its own takes its base's, when the base is in the sources.

A class whose ``__eq__`` uses ``self`` any other way (``vars(self)``, ``self.__dict__``, passing
``self`` on) is not listed: its objects then compare on all their state, as before.
"""

from __future__ import annotations

import ast
from pathlib import PurePosixPath

from envhub import safe_ast

from .compare import Classes

_DEPTH = 2


def module_name(path: str) -> str:
    """``src/money/money.py`` -> ``money.money``; ``src/pkg/__init__.py`` -> ``pkg``."""
    parts = list(PurePosixPath(path).with_suffix("").parts)
    if parts and parts[0] == "src":
        parts = parts[1:]
    if parts and parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def eq_fields(sources: dict[str, str]) -> Classes:
    """``module.Qualname`` -> compared attributes, for every class whose equality can be read so."""
    found: Classes = {}
    pending: dict[str, list[str]] = {}  # classes without an __eq__ -> base names, resolved below
    for path, text in sorted(sources.items()):
        if not path.endswith(".py"):
            continue
        try:
            tree = safe_ast.parse(text)
        except SyntaxError:
            continue
        module = module_name(path)
        for cls, qual in _classes(tree.body, ""):
            name = f"{module}.{qual}"
            fields = _dataclass_fields(cls, found, module) if _is_dataclass(cls) else _eq_reads(cls)
            if fields is not None:
                found[name] = fields
            elif not any(isinstance(n, ast.FunctionDef) and n.name == "__eq__" for n in cls.body):
                pending[name] = [f"{module}.{ast.unparse(b)}" for b in cls.bases]
    for name, bases in pending.items():
        inherited = next((found[b] for b in bases if b in found), None)
        if inherited is not None:
            found[name] = inherited
    return found


def _classes(body: list[ast.stmt], prefix: str) -> list[tuple[ast.ClassDef, str]]:
    out = []
    for node in body:
        if isinstance(node, ast.ClassDef):
            qual = f"{prefix}{node.name}"
            out.append((node, qual))
            out += _classes(node.body, qual + ".")
    return out


def _is_dataclass(cls: ast.ClassDef) -> bool:
    for deco in cls.decorator_list:
        target = deco.func if isinstance(deco, ast.Call) else deco
        if ast.unparse(target).split(".")[-1] == "dataclass":
            eq = next((k.value for k in deco.keywords if k.arg == "eq"), None) if isinstance(deco, ast.Call) else None
            return not (isinstance(eq, ast.Constant) and eq.value is False)
    return False


def _dataclass_fields(cls: ast.ClassDef, found: Classes, module: str) -> tuple[str, ...] | None:
    if any(isinstance(n, ast.FunctionDef) and n.name == "__eq__" for n in cls.body):
        return _eq_reads(cls)
    fields: list[str] = []
    for base in cls.bases:
        fields += found.get(f"{module}.{ast.unparse(base)}", ())
    for node in cls.body:
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        if "ClassVar" in ast.unparse(node.annotation):
            continue
        value = node.value
        if isinstance(value, ast.Call) and ast.unparse(value.func).split(".")[-1] == "field" and any(
                k.arg == "compare" and isinstance(k.value, ast.Constant) and k.value.value is False
                for k in value.keywords):
            continue
        fields.append(node.target.id)
    return tuple(dict.fromkeys(fields))


def _eq_reads(cls: ast.ClassDef) -> tuple[str, ...] | None:
    methods = {n.name: n for n in cls.body if isinstance(n, ast.FunctionDef)}
    eq = methods.get("__eq__")
    if eq is None:
        return None
    reads: list[str] = []
    if not _reads(eq, methods, reads, _DEPTH):
        return None
    return tuple(dict.fromkeys(reads)) or None


def _reads(fn: ast.FunctionDef, methods: dict[str, ast.FunctionDef], reads: list[str], depth: int) -> bool:
    """Collect the ``self.<attr>`` data reads of ``fn`` into ``reads``; False where ``self`` is used
    in a way that reads its state wholesale or hands it on."""
    if not fn.args.args:
        return False
    me = fn.args.args[0].arg
    allowed: set[int] = set()
    for node in ast.walk(fn):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == me:
            allowed.add(id(node.value))
            if node.attr.startswith("__") and node.attr.endswith("__") and node.attr != "__class__":
                return False
            if node.attr in methods:
                if depth == 0 or not _reads(methods[node.attr], methods, reads, depth - 1):
                    return False
            elif node.attr != "__class__":
                reads.append(node.attr)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "isinstance":
            allowed.update(id(a) for a in node.args if isinstance(a, ast.Name) and a.id == me)
    return all(id(n) in allowed for n in ast.walk(fn) if isinstance(n, ast.Name) and n.id == me
               and isinstance(n.ctx, ast.Load))
