"""What the mutation operators work on: sites, source positions and faithful text edits.

A mutation is named by a :class:`SiteRef`; :func:`walk_function` and :func:`iter_functions` visit
a module's functions and their nodes in a fixed order, so the same name finds the same place on
every run.  :class:`Source` addresses the module text the way ``ast`` does (lines and UTF-8 byte
columns) and applies :class:`Edit` s that leave every other byte alone; the edit builders below are
shared by the operators in :mod:`.operators`.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

FuncNode = ast.FunctionDef | ast.AsyncFunctionDef


class MutationError(ValueError):
    """The requested site does not exist or cannot be applied as a faithful text edit."""


@dataclass(frozen=True, order=True)
class SiteRef:
    """Stable name of one mutation: where it is and which of the operator's sites it uses."""

    file: str
    function: str
    operator: str
    site: int


@dataclass(frozen=True)
class Edit:
    """Replace the source between two ``(lineno, byte column)`` positions with ``text``."""

    start: tuple[int, int]
    end: tuple[int, int]
    text: str


@dataclass
class Site:
    """One place an operator can mutate; ``variant`` selects among several changes there."""

    node: Any
    variant: Any = None
    parent: Any = None
    field: str = ""
    index: int | None = None


@dataclass
class Applied:
    """What an operator did: a human description and candidate text edits, best first."""

    description: str
    candidates: list[list[Edit]]
    line: int


# ---------------------------------------------------------------------------------------------
# Source text with byte-accurate positions (ast columns are UTF-8 byte offsets)
# ---------------------------------------------------------------------------------------------


class Source:
    """Module source addressed like ``ast`` positions; edits keep everything else byte-identical."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.data = text.encode("utf-8")
        self.line_starts = [0]
        for i, byte in enumerate(self.data):
            if byte == 0x0A:
                self.line_starts.append(i + 1)

    def offset(self, pos: tuple[int, int]) -> int:
        return self.line_starts[pos[0] - 1] + pos[1]

    def between(self, start: tuple[int, int], end: tuple[int, int]) -> str:
        return self.data[self.offset(start) : self.offset(end)].decode("utf-8")

    def segment(self, node: ast.AST) -> str:
        return self.between(start_of(node), end_of(node))

    def line(self, lineno: int) -> str:
        start = self.line_starts[lineno - 1]
        end = self.line_starts[lineno] if lineno < len(self.line_starts) else len(self.data)
        return self.data[start:end].decode("utf-8")

    def apply(self, edits: Sequence[Edit]) -> str:
        data = self.data
        last = len(data) + 1
        for edit in sorted(edits, key=lambda e: self.offset(e.start), reverse=True):
            a, b = self.offset(edit.start), self.offset(edit.end)
            if b > last or a > b:
                raise MutationError("overlapping edits")
            data = data[:a] + edit.text.encode("utf-8") + data[b:]
            last = a
        return data.decode("utf-8")


def start_of(node: ast.AST) -> tuple[int, int]:
    return (node.lineno, node.col_offset)  # type: ignore[attr-defined]


def end_of(node: ast.AST) -> tuple[int, int]:
    return (node.end_lineno, node.end_col_offset)  # type: ignore[attr-defined]


# ---------------------------------------------------------------------------------------------
# Walking a function deterministically
# ---------------------------------------------------------------------------------------------

_SKIP_FIELDS = frozenset({"annotation", "returns", "type_comment", "decorator_list"})


def walk_function(func: FuncNode) -> Iterator[Site]:
    """Pre-order walk of a function body (source order) with each node's parent slot.

    Annotations, decorators, argument lists (defaults belong to ``wrong_default``) and f-strings
    (whose inner positions are unreliable before Python 3.12) are skipped, as is the docstring.
    """

    def visit(node: Any, parent: Any, field: str, index: int | None) -> Iterator[Site]:
        yield Site(node, None, parent, field, index)
        if isinstance(node, ast.JoinedStr):
            return
        for name, value in ast.iter_fields(node):
            if name in _SKIP_FIELDS or isinstance(value, ast.arguments):
                continue
            if isinstance(value, list):
                for i, item in enumerate(value):
                    if isinstance(item, ast.AST):
                        yield from visit(item, node, name, i)
            elif isinstance(value, ast.AST):
                yield from visit(value, node, name, None)

    for i, stmt in enumerate(func.body):
        if i == 0 and is_docstring(stmt):
            continue
        yield from visit(stmt, func, "body", i)


def is_docstring(stmt: ast.stmt) -> bool:
    return (
        isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str)
    )


def iter_functions(tree: ast.Module) -> list[tuple[str, FuncNode]]:
    """Module functions and (nested) class methods with qualnames; duplicates get ``#n``."""
    found: list[tuple[str, FuncNode]] = []

    def visit(body: list[ast.stmt], prefix: str) -> None:
        for stmt in body:
            if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef):
                found.append((prefix + stmt.name, stmt))
            elif isinstance(stmt, ast.ClassDef):
                visit(stmt.body, f"{prefix}{stmt.name}.")

    visit(tree.body, "")
    seen: dict[str, int] = {}
    named: list[tuple[str, FuncNode]] = []
    for name, node in found:
        seen[name] = seen.get(name, 0) + 1
        named.append((name if seen[name] == 1 else f"{name}#{seen[name]}", node))
    return named


def replace_node(site: Site, new: ast.AST) -> None:
    """Put ``new`` into the slot ``site.node`` occupies in its parent."""
    if site.index is None:
        setattr(site.parent, site.field, new)
    else:
        getattr(site.parent, site.field)[site.index] = new


def is_int(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and type(node.value) is int


def int_value(node: ast.AST) -> int | None:
    """The value of an integer literal, including a negated one such as ``-1``."""
    if is_int(node):
        return node.value  # type: ignore[attr-defined,no-any-return]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and is_int(node.operand):
        return -node.operand.value  # type: ignore[attr-defined,no-any-return]
    return None


def is_number(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and type(node.value) in (int, float)


def is_str(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant | ast.JoinedStr) and not is_number(node) and (
        isinstance(node, ast.JoinedStr) or isinstance(node.value, str)
    )


# ---------------------------------------------------------------------------------------------
# Edit builders shared by operators
# ---------------------------------------------------------------------------------------------

OP_TEXT: dict[type, str] = {
    ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!=",
    ast.Is: "is", ast.IsNot: "is not", ast.In: "in", ast.NotIn: "not in",
    ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//", ast.Mod: "%",
    ast.Pow: "**", ast.And: "and", ast.Or: "or",
}


def gap_edit(src: Source, left: ast.AST, right: ast.AST, old: str, new: str, suffix: str = "") -> Edit | None:
    """Swap the operator token between two operands, touching nothing else.

    The gap may hold only the operator, whitespace, parentheses and line continuations; anything
    else (a comment, say) makes the caller fall back to re-rendering the expression.
    """
    gap = src.between(end_of(left), start_of(right))
    if re.sub(r"[\s()\\]", "", gap) != (old + suffix).replace(" ", ""):
        return None
    pattern = r"\s+".join(re.escape(word) for word in (old + suffix).split())
    if old[0].isalpha():
        pattern = r"(?<![A-Za-z0-9_])" + pattern + r"(?![A-Za-z0-9_])"
    new_gap, count = re.subn(pattern, (new + suffix).replace("\\", "\\\\"), gap, count=1)
    return Edit(end_of(left), start_of(right), new_gap) if count else None


def render_edits(src: Source, old: ast.AST, new: ast.AST) -> list[list[Edit]]:
    """Fallback candidates: re-render the (already mutated) node in the old node's span."""
    text = ast.unparse(new)
    return [[Edit(start_of(old), end_of(old), text)], [Edit(start_of(old), end_of(old), f"({text})")]]


def body_and_pos(parent: Any, field: str, index: int | None) -> tuple[list[ast.stmt], int] | None:
    body = getattr(parent, field, None)
    if not isinstance(body, list) or index is None:
        return None
    return body, index


def whole_lines(src: Source, first: ast.stmt, last: ast.stmt) -> tuple[int, int] | None:
    """Line span of statements that own their lines (nothing else shares them but a comment)."""
    head = src.between((first.lineno, 0), start_of(first))
    tail = src.between(end_of(last), (last.end_lineno, len(src.line(last.end_lineno).rstrip("\n").encode())))
    if head.strip() or (tail.strip() and not tail.strip().startswith("#")):
        return None
    return first.lineno, last.end_lineno  # type: ignore[return-value]


def delete_lines(src: Source, first: int, last: int, replacement: str = "") -> Edit:
    end = (last + 1, 0) if last < len(src.line_starts) else (last, len(src.line(last).encode("utf-8")))
    return Edit((first, 0), end, replacement)


def indent_of(src: Source, lineno: int) -> str:
    line = src.line(lineno)
    return line[: len(line) - len(line.lstrip(" \t"))]


def remove_stmts(src: Source, body: list[ast.stmt], lo: int, hi: int) -> Edit | None:
    """Delete ``body[lo:hi]`` (whole lines), leaving ``pass`` if the block would become empty."""
    span = whole_lines(src, body[lo], body[hi - 1])
    if span is None:
        return None
    keep = [s for i, s in enumerate(body) if not lo <= i < hi]
    filler = "" if keep else f"{indent_of(src, span[0])}pass\n"
    return delete_lines(src, span[0], span[1], filler)
