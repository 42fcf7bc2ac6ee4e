"""Line edits of a module's text, computed from its parsed tree.

A rule rewrites a few statements and leaves the rest of the file as the gold wrote it (comments,
blank lines, formatting): each changed statement is unparsed in place at its own indentation, new
statements are inserted between existing ones. The edited text is parsed again before a rule
yields it, so a rule can never hand the builder a file Python would not load.
"""

from __future__ import annotations

import ast
import builtins
import copy
import itertools
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from envhub import safe_ast

_Node = TypeVar("_Node", bound=ast.AST)

#: a function and where it sits: its qualified name, the node, its class (or None) and the
#: module-level statement that holds it
FuncSite = tuple[str, ast.FunctionDef, ast.ClassDef | None, ast.stmt]


@dataclass(frozen=True)
class Edit:
    """Replace lines ``start..end`` (1-based, inclusive) by ``text``; ``end == start - 1`` inserts
    before line ``start``."""

    start: int
    end: int
    text: str

    @property
    def inserts(self) -> bool:
        return self.end < self.start


def splice(source: str, edits: list[Edit]) -> str:
    """``source`` with ``edits`` applied; insertions at one line keep their order, and go before a
    replacement starting there. Overlapping replacements are refused."""
    lines = source.splitlines(keepends=True)
    spans = sorted((e.start, e.end) for e in edits if not e.inserts)
    for (_, end), (start, _) in itertools.pairwise(spans):
        if start <= end:
            raise ValueError("overlapping edits")
    order = sorted(enumerate(edits), key=lambda p: (p[1].start, not p[1].inserts, p[0]), reverse=True)
    for _, edit in order:
        text = edit.text if edit.text.endswith("\n") or not edit.text else edit.text + "\n"
        lines[edit.start - 1:edit.end] = text.splitlines(keepends=True)
    return "".join(lines)


def first_line(node: ast.stmt) -> int:
    """The statement's first line, decorators included."""
    decorators = getattr(node, "decorator_list", [])
    return min([node.lineno, *(d.lineno for d in decorators)])


def render(nodes: Sequence[ast.stmt], indent: str) -> str:
    """Statements as source at ``indent``."""
    out = []
    for node in nodes:
        text = ast.unparse(ast.fix_missing_locations(node))
        out.append("".join(indent + line if line.strip() else line for line in text.splitlines(keepends=True)))
    return "\n".join(out) + "\n"


@dataclass
class Module:
    """One source file of a project, parsed; rules copy nodes before changing them."""

    path: str
    text: str
    tree: ast.Module = field(init=False)

    def __post_init__(self) -> None:
        self.tree = safe_ast.parse(self.text)
        self.lines = self.text.splitlines()

    def indent(self, node: ast.stmt) -> str:
        return self.lines[first_line(node) - 1][:node.col_offset]

    def alone(self, node: ast.stmt) -> bool:
        """Whether the statement has its lines to itself (nothing before it, only a comment after)."""
        head = self.lines[first_line(node) - 1][:node.col_offset]
        tail = self.lines[(node.end_lineno or node.lineno) - 1][node.end_col_offset or 0:]
        return not head.strip() and (not tail.strip() or tail.strip().startswith("#"))

    def replace(self, node: ast.stmt, new: list[ast.stmt]) -> Edit:
        return Edit(first_line(node), node.end_lineno or node.lineno, render(new, self.indent(node)))

    def insert_before(self, node: ast.stmt, new: list[ast.stmt], *, blank: int = 0) -> Edit:
        start = first_line(node)
        return Edit(start, start - 1, render(new, self.indent(node)) + "\n" * blank)

    def insert_after(self, node: ast.stmt, new: list[ast.stmt], *, blank: int = 0) -> Edit:
        end = node.end_lineno or node.lineno
        return Edit(end + 1, end, "\n" * blank + render(new, self.indent(node)))

    def header_end(self) -> int:
        """The last line of the module's docstring, ``__future__`` and other leading imports."""
        end = 0
        for node in self.tree.body:
            if isinstance(node, ast.Import | ast.ImportFrom) or (
                    isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and not end):
                end = node.end_lineno or node.lineno
            else:
                break
        return end

    def insert_at_top(self, new: list[ast.stmt]) -> Edit:
        """Module-level statements right after the leading imports."""
        end = self.header_end()
        imports = [n for n in new if isinstance(n, ast.Import | ast.ImportFrom)]
        rest = [n for n in new if not isinstance(n, ast.Import | ast.ImportFrom)]
        text = render(imports, "") if imports else ""
        if rest:
            text += "\n\n" + render(rest, "") + ("\n" if end else "")
        return Edit(end + 1, end, text)

    def edited(self, edits: list[Edit]) -> str | None:
        """The new text, or None when it does not parse (a rule's mistake, dropped quietly)."""
        text = splice(self.text, edits)
        try:
            safe_ast.parse(text)
        except SyntaxError:
            return None
        return text if text != self.text else None

    # ---- what the module holds --------------------------------------------------------------

    def top_names(self) -> set[str]:
        """Names bound at module level."""
        names: set[str] = set()
        for node in self.tree.body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                names.add(node.name)
            elif isinstance(node, ast.Import | ast.ImportFrom):
                names |= {(a.asname or a.name).split(".")[0] for a in node.names}
            else:
                names |= {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
        return names

    def fresh(self, stem: str) -> str:
        """``stem``, or ``stem_2`` ... : a name nothing in the module uses yet."""
        used = {n.id for n in ast.walk(self.tree) if isinstance(n, ast.Name)} | self.top_names()
        used |= {n.attr for n in ast.walk(self.tree) if isinstance(n, ast.Attribute)}
        name, k = stem, 1
        while name in used or re.search(rf"\b{re.escape(name)}\b", self.text):
            k += 1
            name = f"{stem}_{k}"
        return name

    def module_alias(self, module: str) -> str | None:
        """The name ``import module`` is bound to at the top of this file, if it is."""
        for node in self.tree.body:
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name == module:
                        return alias.asname or module
        return None

    def functions(self) -> Iterator[FuncSite]:
        """Module-level functions and the methods of module-level classes."""
        for node in self.tree.body:
            if isinstance(node, ast.FunctionDef):
                yield node.name, node, None, node
            elif isinstance(node, ast.ClassDef):
                for item in node.body:
                    if isinstance(item, ast.FunctionDef):
                        yield f"{node.name}.{item.name}", item, node, node


def import_stmt(module: str, alias: str) -> ast.stmt:
    return ast.Import(names=[ast.alias(name=module, asname=None if alias == module else alias)])


def own_nodes(fn: ast.FunctionDef) -> Iterator[ast.AST]:
    """The nodes of ``fn``'s own body, not those of functions, lambdas or classes nested in it."""
    todo: list[ast.AST] = list(fn.body)
    while todo:
        node = todo.pop()
        yield node
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda | ast.ClassDef):
            todo.extend(ast.iter_child_nodes(node))


def is_dunder(name: str) -> bool:
    return name.startswith("__") and name.endswith("__")


def camel(qualname: str) -> str:
    """``Chart.add_account`` -> ``ChartAddAccount``."""
    return "".join(part[:1].upper() + part[1:] for part in re.split(r"[._]+", qualname) if part)


def dotted(node: ast.expr) -> str | None:
    """``a.b.C`` for a chain of attributes on a name, else None."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return ".".join([node.id, *reversed(parts)])


def is_builtin_exception(name: str) -> bool:
    value = getattr(builtins, name, None)
    return isinstance(value, type) and issubclass(value, BaseException)


def local_names(fn: ast.FunctionDef) -> set[str]:
    """Parameters and names the function's own body binds."""
    args = fn.args
    names = {a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)}
    names |= {a.arg for a in (args.vararg, args.kwarg) if a is not None}
    for node in own_nodes(fn):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.alias):
            names.add((node.asname or node.name).split(".")[0])
        elif isinstance(node, ast.ExceptHandler) and node.name:
            names.add(node.name)
    return names


def loaded_names(node: ast.AST) -> set[str]:
    """Names read anywhere under ``node`` (nested scopes included: a lambda reads its closure)."""
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def stored_names(nodes: list[ast.stmt]) -> set[str]:
    return {n.id for s in nodes for n in ast.walk(s) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}


def bound_in(nodes: list[ast.stmt]) -> set[str]:
    """Every name the statements bind: assignments, loop and ``with`` targets, ``except ... as``,
    imports, nested definitions."""
    names = stored_names(nodes)
    for stmt in nodes:
        for node in ast.walk(stmt):
            if isinstance(node, ast.ExceptHandler) and node.name:
                names.add(node.name)
            elif isinstance(node, ast.alias):
                names.add((node.asname or node.name).split(".")[0])
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                names.add(node.name)
    return names


def clone(node: _Node) -> _Node:
    return copy.deepcopy(node)


def statement_lists(fn: ast.FunctionDef) -> Iterator[list[ast.stmt]]:
    """Every statement list inside ``fn``'s own body (its body, branches, loop bodies, handlers)."""
    todo: list[list[ast.stmt]] = [fn.body]
    while todo:
        body = todo.pop(0)
        yield body
        for stmt in body:
            if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                continue
            for name in ("body", "orelse", "finalbody"):
                inner = getattr(stmt, name, None)
                if isinstance(inner, list) and inner and isinstance(inner[0], ast.stmt):
                    todo.append(inner)
            for handler in getattr(stmt, "handlers", []):
                todo.append(handler.body)
            for case in getattr(stmt, "cases", []):
                todo.append(case.body)


def clone_all(nodes: list[ast.stmt]) -> list[ast.stmt]:
    return [copy.deepcopy(n) for n in nodes]


def delete(node: ast.stmt) -> Edit:
    return Edit(first_line(node), node.end_lineno or node.lineno, "")


#: what a moved body must not contain: control flow that would leave the new scope, or names
#: whose meaning depends on the scope they are read in
_SCOPE_BOUND = (ast.Return, ast.Break, ast.Continue, ast.Yield, ast.YieldFrom, ast.Await, ast.Global,
                ast.Nonlocal, ast.NamedExpr, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def scope_safe(nodes: list[ast.AST]) -> bool:
    """Whether ``nodes`` mean the same moved into a new function scope (given the locals they read)."""
    for top in nodes:
        for node in ast.walk(top):
            if isinstance(node, _SCOPE_BOUND):
                return False
            if isinstance(node, ast.Name) and node.id in ("super", "__class__", "locals", "vars"):
                return False
            if isinstance(node, ast.Attribute) and node.attr.startswith("__") and not node.attr.endswith("__"):
                return False  # a mangled private name means something else outside the class
    return True


def uses_outside(fn: ast.FunctionDef, names: set[str], inside: list[ast.stmt]) -> bool:
    """Whether any of ``names`` appears in ``fn`` outside the statements ``inside`` as the function's
    own variable (a comprehension that binds the name itself has its own)."""
    skip = {id(s) for s in inside}

    def visit(node: ast.AST, shadowed: frozenset[str]) -> bool:
        if id(node) in skip:
            return False
        if isinstance(node, ast.ListComp | ast.SetComp | ast.DictComp | ast.GeneratorExp):
            shadowed = shadowed | {t for g in node.generators for t in target_names(g.target)}
        if isinstance(node, ast.Name) and node.id in names and node.id not in shadowed:
            return True
        return any(visit(child, shadowed) for child in ast.iter_child_nodes(node))

    return any(visit(stmt, frozenset()) for stmt in fn.body) or any(
        a.arg in names for a in (*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs))


def target_names(target: ast.expr) -> set[str]:
    return {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}
