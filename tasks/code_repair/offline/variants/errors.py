"""Rules on raised exceptions: what ``pytest.raises(E, match=p)`` accepts besides the gold's own.

``pytest.raises(E)`` accepts an instance of any subclass of ``E``; ``match=p`` accepts any text in
which ``re.search(p, text)`` finds ``p``. So a fix may raise a more specific class, or say more.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator

from envhub import safe_ast

from .rules import Candidate, Rule, Sources
from .source import Edit, FuncSite, Module, camel, clone, dotted, is_builtin_exception, own_nodes

SUFFIX = " (check the input)"
PREFIX = "invalid input: "


def _raised_class(module: Module, node: ast.Raise, imported: set[str]) -> str | None:
    """The dotted name of the class a ``raise`` statement raises, when it plainly names one."""
    if node.exc is None:
        return None
    target = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
    name = dotted(target)
    if name is None:
        return None
    head, _, last = name.rpartition(".")
    if not last[:1].isupper():
        return None  # a variable or a factory function, not a class
    classes = {n.name for n in module.tree.body if isinstance(n, ast.ClassDef)}
    if not head:
        return name if name in classes or name in imported or is_builtin_exception(name) else None
    return name if head.split(".")[0] in imported else None


def _imported(module: Module) -> set[str]:
    return {(a.asname or a.name).split(".")[0] for n in module.tree.body
            if isinstance(n, ast.Import | ast.ImportFrom) for a in n.names}


def _raises_by_class(module: Module, fn: ast.FunctionDef) -> dict[str, list[ast.Raise]]:
    imported = _imported(module)
    found: dict[str, list[ast.Raise]] = {}
    for node in own_nodes(fn):
        if isinstance(node, ast.Raise) and module.alone(node):
            name = _raised_class(module, node, imported)
            if name is not None:
                found.setdefault(name, []).append(node)
    return {k: sorted(v, key=lambda n: n.lineno) for k, v in sorted(found.items(), key=lambda kv: kv[1][0].lineno)}


def _renamed(node: ast.Raise, name: str) -> ast.Raise:
    new = clone(node)
    assert isinstance(new, ast.Raise) and new.exc is not None
    if isinstance(new.exc, ast.Call):
        new.exc.func = ast.Name(id=name, ctx=ast.Load())
    else:
        new.exc = ast.Name(id=name, ctx=ast.Load())
    return new


def subclass_variants(sources: Sources) -> Iterator[Candidate]:
    """For each function and each class it raises: a new subclass of that class, defined in the same
    module (right after the class, or after the imports), raised instead at those sites."""
    for module in sources.modules():
        classes = {n.name: n for n in module.tree.body if isinstance(n, ast.ClassDef)}
        site: FuncSite
        for site in module.functions():
            qualname, fn, _, _ = site
            for name, raises in _raises_by_class(module, fn).items():
                last = name.rpartition(".")[2]
                new = module.fresh(f"_{camel(qualname)}{last}")
                definition = safe_ast.parse(
                    f'class {new}({name}):\n    """A more specific {last}, raised by {qualname}."""\n').body
                edits = [module.replace(r, [_renamed(r, new)]) for r in raises]
                where = classes.get(name)
                edits.append(module.insert_after(where, definition, blank=2) if where is not None
                             else module.insert_at_top(definition))
                text = module.edited(edits)
                if text is not None:
                    yield Candidate({module.path: text}, f"{module.path}:{qualname}: {name} -> {new}")


def _message_arg(node: ast.Raise) -> ast.expr | None:
    if isinstance(node.exc, ast.Call) and node.exc.args:
        first = node.exc.args[0]
        if isinstance(first, ast.JoinedStr) or (isinstance(first, ast.Constant) and isinstance(first.value, str)):
            return first
    return None


def _extended(arg: ast.expr, mode: str) -> ast.expr:
    if isinstance(arg, ast.Constant):
        text = str(arg.value)
        return ast.Constant(text + SUFFIX if mode == "suffix" else PREFIX + text)
    assert isinstance(arg, ast.JoinedStr)
    extra = ast.Constant(SUFFIX if mode == "suffix" else PREFIX)
    values = [*clone(arg).values, extra] if mode == "suffix" else [extra, *clone(arg).values]
    return ast.JoinedStr(values=values)


def _patterns_still_find(patterns: list[str], old: ast.expr, new: ast.expr) -> bool:
    """Every literal ``match=`` pattern that finds a literal old message still finds the new one
    (f-string messages are left to the real test run)."""
    if not (isinstance(old, ast.Constant) and isinstance(new, ast.Constant)):
        return True
    for pattern in patterns:
        try:
            if re.search(pattern, str(old.value)) and not re.search(pattern, str(new.value)):
                return False
        except re.error:
            continue
    return True


def message_variants(sources: Sources) -> Iterator[Candidate]:
    """For each function whose raises carry a literal or f-string message: the messages with words
    appended (or, second, prepended), where every ``match=`` pattern of the tests still finds them."""
    if not sources.has_match:
        return  # no test reads a message the probes would observe
    for module in sources.modules():
        imported = _imported(module)
        for qualname, fn, _, _ in module.functions():
            raises = [n for n in own_nodes(fn) if isinstance(n, ast.Raise) and module.alone(n)
                      and _raised_class(module, n, imported) and _message_arg(n) is not None]
            if not raises:
                continue
            for mode in ("suffix", "prefix"):
                edits: list[Edit] = []
                for node in sorted(raises, key=lambda n: n.lineno):
                    new = clone(node)
                    assert isinstance(new, ast.Raise) and isinstance(new.exc, ast.Call)
                    old = new.exc.args[0]
                    new.exc.args[0] = _extended(old, mode)
                    if not _patterns_still_find(sources.match_patterns, old, new.exc.args[0]):
                        break
                    edits.append(module.replace(node, [new]))
                else:
                    text = module.edited(edits)
                    if text is not None:
                        words = SUFFIX if mode == "suffix" else PREFIX
                        yield Candidate({module.path: text}, f"{module.path}:{qualname}: {mode} {words.strip()!r}")


RULES = [
    Rule("exception_subclass", "raise a new subclass of the raised exception class, defined in the same module",
         True, subclass_variants),
    Rule("exception_message", "append (or prepend) words to exception messages that every literal match= "
         "pattern of the tests still finds", True, message_variants),
]
