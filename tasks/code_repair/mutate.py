"""AST mutation operators that plant realistic bugs in small Python projects.

Every operator finds *sites* inside one function (a comparison, a call, a statement ...) in a
deterministic order, so a mutation is named by ``(file, function qualname, operator, site index)``
and can be re-applied later from that name alone.  Applying a mutation changes the parsed tree in
place and also produces a *text edit* of the original source that touches only the mutated
expression or statement lines.  Why not ``ast.unparse`` the whole module?  Unparsing drops
comments and normalises quotes, so the one reformatted function would point the agent straight at
the bug and the gold patch would be noisy.  The text edit is accepted only if re-parsing the edited
source gives exactly the mutated tree; otherwise the site is rejected (``MutationError``), so an
edit can never silently mean something other than the recorded mutation.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from envhub import safe_ast

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
        if i == 0 and _is_docstring(stmt):
            continue
        yield from visit(stmt, func, "body", i)


def _is_docstring(stmt: ast.stmt) -> bool:
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


def _replace(site: Site, new: ast.AST) -> None:
    """Put ``new`` into the slot ``site.node`` occupies in its parent."""
    if site.index is None:
        setattr(site.parent, site.field, new)
    else:
        getattr(site.parent, site.field)[site.index] = new


def _is_int(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and type(node.value) is int


def _int_value(node: ast.AST) -> int | None:
    """The value of an integer literal, including a negated one such as ``-1``."""
    if _is_int(node):
        return node.value  # type: ignore[attr-defined,no-any-return]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and _is_int(node.operand):
        return -node.operand.value  # type: ignore[attr-defined,no-any-return]
    return None


def _is_number(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and type(node.value) in (int, float)


def _is_str(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant | ast.JoinedStr) and not _is_number(node) and (
        isinstance(node, ast.JoinedStr) or isinstance(node.value, str)
    )


# ---------------------------------------------------------------------------------------------
# Edit builders shared by operators
# ---------------------------------------------------------------------------------------------

_OP_TEXT: dict[type, str] = {
    ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!=",
    ast.Is: "is", ast.IsNot: "is not", ast.In: "in", ast.NotIn: "not in",
    ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//", ast.Mod: "%",
    ast.Pow: "**", ast.And: "and", ast.Or: "or",
}


def _gap_edit(src: Source, left: ast.AST, right: ast.AST, old: str, new: str, suffix: str = "") -> Edit | None:
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


def _render_edits(src: Source, old: ast.AST, new: ast.AST) -> list[list[Edit]]:
    """Fallback candidates: re-render the (already mutated) node in the old node's span."""
    text = ast.unparse(new)
    return [[Edit(start_of(old), end_of(old), text)], [Edit(start_of(old), end_of(old), f"({text})")]]


def _body_and_pos(parent: Any, field: str, index: int | None) -> tuple[list[ast.stmt], int] | None:
    body = getattr(parent, field, None)
    if not isinstance(body, list) or index is None:
        return None
    return body, index


def _whole_lines(src: Source, first: ast.stmt, last: ast.stmt) -> tuple[int, int] | None:
    """Line span of statements that own their lines (nothing else shares them but a comment)."""
    head = src.between((first.lineno, 0), start_of(first))
    tail = src.between(end_of(last), (last.end_lineno, len(src.line(last.end_lineno).rstrip("\n").encode())))
    if head.strip() or (tail.strip() and not tail.strip().startswith("#")):
        return None
    return first.lineno, last.end_lineno  # type: ignore[return-value]


def _delete_lines(src: Source, first: int, last: int, replacement: str = "") -> Edit:
    end = (last + 1, 0) if last < len(src.line_starts) else (last, len(src.line(last).encode("utf-8")))
    return Edit((first, 0), end, replacement)


def _indent_of(src: Source, lineno: int) -> str:
    line = src.line(lineno)
    return line[: len(line) - len(line.lstrip(" \t"))]


def _remove_stmts(src: Source, body: list[ast.stmt], lo: int, hi: int) -> Edit | None:
    """Delete ``body[lo:hi]`` (whole lines), leaving ``pass`` if the block would become empty."""
    span = _whole_lines(src, body[lo], body[hi - 1])
    if span is None:
        return None
    keep = [s for i, s in enumerate(body) if not lo <= i < hi]
    filler = "" if keep else f"{_indent_of(src, span[0])}pass\n"
    return _delete_lines(src, span[0], span[1], filler)


# ---------------------------------------------------------------------------------------------
# Operators
# ---------------------------------------------------------------------------------------------


class Operator:
    """Base class: ``sites`` lists mutable places in order, ``apply`` mutates one of them."""

    name: ClassVar[str] = ""
    summary: ClassVar[str] = ""

    def sites(self, func: FuncNode) -> list[Site]:
        raise NotImplementedError

    def apply(self, site: Site, src: Source, func: FuncNode) -> Applied:
        raise NotImplementedError


def _compare_op_sites(func: FuncNode, table: dict[type, type]) -> list[Site]:
    return [
        Site(s.node, i, s.parent, s.field, s.index)
        for s in walk_function(func)
        if isinstance(s.node, ast.Compare)
        for i, op in enumerate(s.node.ops)
        if type(op) in table
    ]


def _apply_compare(site: Site, src: Source, table: dict[type, type]) -> Applied:
    node: ast.Compare = site.node
    i = site.variant
    old_op = node.ops[i]
    new_op = table[type(old_op)]()
    left = node.left if i == 0 else node.comparators[i - 1]
    old_text, new_text = _OP_TEXT[type(old_op)], _OP_TEXT[type(new_op)]
    node.ops[i] = new_op
    gap = _gap_edit(src, left, node.comparators[i], old_text, new_text)
    return Applied(
        f"comparison `{old_text}` changed to `{new_text}`",
        ([[gap]] if gap else []) + _render_edits(src, node, node),
        node.lineno,
    )


class OffByOne(Operator):
    """Boundary bugs: ``<``/``<=`` relaxed or tightened, range stops and indices/slices shifted by one."""

    name = "off_by_one"
    summary = "boundary off-by-one"
    _RELAX = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt}

    def sites(self, func: FuncNode) -> list[Site]:
        found: list[Site] = []
        for s in walk_function(func):
            node = s.node
            if isinstance(node, ast.Compare):
                found += [Site(node, ("cmp", i), s.parent, s.field, s.index)
                          for i, op in enumerate(node.ops) if type(op) in self._RELAX]
            elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "range"
                  and 1 <= len(node.args) <= 3 and not node.keywords):
                stop = 0 if len(node.args) == 1 else 1
                found += [Site(node, ("range", stop, d)) for d in (-1, 1)]
            elif isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Slice):
                for part in ("lower", "upper"):
                    if getattr(node.slice, part) is not None:
                        found += [Site(node.slice, ("slice", part, d)) for d in (-1, 1)]
            elif isinstance(node, ast.Subscript) and _int_value(node.slice) is not None:
                found += [Site(node, ("index", None, d)) for d in (-1, 1)]
        return found

    def apply(self, site: Site, src: Source, func: FuncNode) -> Applied:
        kind = site.variant[0]
        if kind == "cmp":
            return _apply_compare(Site(site.node, site.variant[1]), src, self._RELAX)
        _, slot, delta = site.variant
        if kind == "range":
            old = site.node.args[slot]
            site.node.args[slot] = new = _shift(old, delta)
        elif kind == "slice":
            old = getattr(site.node, slot)
            new = _shift(old, delta)
            setattr(site.node, slot, new)
        else:
            old = site.node.slice
            site.node.slice = new = _shift(old, delta)
        what = {"range": "range() stop", "slice": f"slice {slot} bound", "index": "index"}[kind]
        return Applied(f"{what} `{src.segment(old)}` shifted by {delta:+d}", _render_edits(src, old, new), old.lineno)


def _shift(expr: ast.expr, delta: int) -> ast.expr:
    """``expr + delta``, folded into an integer literal or an existing ``+ k``/``- k`` term."""
    value = _int_value(expr)
    if value is not None:
        return ast.Constant(value + delta)
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Add | ast.Sub) and _is_int(expr.right):
        k = expr.right.value if isinstance(expr.op, ast.Add) else -expr.right.value
        k += delta
        if k == 0:
            return expr.left
        return ast.BinOp(expr.left, ast.Add() if k > 0 else ast.Sub(), ast.Constant(abs(k)))
    return ast.BinOp(expr, ast.Add() if delta > 0 else ast.Sub(), ast.Constant(abs(delta)))


class ComparisonFlip(Operator):
    """Inverted comparisons: ``==``/``!=``, ``<``/``>``, ``is``/``is not``, ``in``/``not in``."""

    name = "comparison_flip"
    summary = "comparison flip"
    _FLIP = {
        ast.Eq: ast.NotEq, ast.NotEq: ast.Eq, ast.Lt: ast.Gt, ast.Gt: ast.Lt, ast.LtE: ast.GtE,
        ast.GtE: ast.LtE, ast.Is: ast.IsNot, ast.IsNot: ast.Is, ast.In: ast.NotIn, ast.NotIn: ast.In,
    }

    def sites(self, func: FuncNode) -> list[Site]:
        return _compare_op_sites(func, self._FLIP)

    def apply(self, site: Site, src: Source, func: FuncNode) -> Applied:
        return _apply_compare(site, src, self._FLIP)


class ArithmeticSwap(Operator):
    """Wrong arithmetic operator in a binary expression or augmented assignment."""

    name = "arithmetic_swap"
    summary = "arithmetic operator swap"
    _SWAP: dict[type, tuple[type, ...]] = {
        ast.Add: (ast.Sub,), ast.Sub: (ast.Add,), ast.Mult: (ast.FloorDiv, ast.Div),
        ast.Div: (ast.Mult, ast.FloorDiv), ast.FloorDiv: (ast.Div, ast.Mod), ast.Mod: (ast.FloorDiv,),
        ast.Pow: (ast.Mult,),
    }

    def sites(self, func: FuncNode) -> list[Site]:
        found: list[Site] = []
        for s in walk_function(func):
            node = s.node
            if isinstance(node, ast.BinOp):
                if _is_str(node.left) or _is_str(node.right):
                    continue  # string concatenation / %-formatting: a swap is a crash, not a bug
            elif not isinstance(node, ast.AugAssign) or _is_str(node.value):
                continue
            found += [Site(node, new) for new in self._SWAP.get(type(node.op), ())]
        return found

    def apply(self, site: Site, src: Source, func: FuncNode) -> Applied:
        node = site.node
        old_text, new_text = _OP_TEXT[type(node.op)], _OP_TEXT[site.variant]
        node.op = site.variant()
        if isinstance(node, ast.AugAssign):
            gap = _gap_edit(src, node.target, node.value, old_text, new_text, suffix="=")
            fallback: list[list[Edit]] = []
        else:
            gap = _gap_edit(src, node.left, node.right, old_text, new_text)
            fallback = _render_edits(src, node, node)
        return Applied(f"operator `{old_text}` changed to `{new_text}`", ([[gap]] if gap else []) + fallback,
                       node.lineno)


class BooleanInversion(Operator):
    """``and``/``or`` swapped, a ``not`` dropped or added, ``True``/``False`` flipped."""

    name = "boolean_inversion"
    summary = "boolean inversion"

    def sites(self, func: FuncNode) -> list[Site]:
        found: list[Site] = []
        for s in walk_function(func):
            node = s.node
            if isinstance(node, ast.BoolOp):
                found.append(Site(node, "boolop"))
            elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
                found.append(Site(node, "drop_not", s.parent, s.field, s.index))
            elif isinstance(node, ast.Constant) and isinstance(node.value, bool):
                found.append(Site(node, "flip_const"))
            elif isinstance(node, ast.If | ast.While | ast.IfExp) and not isinstance(node.test, ast.Constant) and not (
                isinstance(node.test, ast.UnaryOp) and isinstance(node.test.op, ast.Not)
            ):
                found.append(Site(node, "negate"))
        return found

    def apply(self, site: Site, src: Source, func: FuncNode) -> Applied:
        node = site.node
        if site.variant == "boolop":
            old_text = _OP_TEXT[type(node.op)]
            node.op = ast.Or() if isinstance(node.op, ast.And) else ast.And()
            new_text = _OP_TEXT[type(node.op)]
            gaps = [_gap_edit(src, a, b, old_text, new_text) for a, b in zip(node.values, node.values[1:], strict=False)]
            exact = [[g for g in gaps if g]] if all(gaps) else []
            return Applied(f"`{old_text}` changed to `{new_text}`", exact + _render_edits(src, node, node), node.lineno)
        if site.variant == "drop_not":
            _replace(site, node.operand)
            head = src.between(start_of(node), start_of(node.operand))
            exact = [Edit(start_of(node), start_of(node.operand), re.sub(r"^not\s*", "", head))]
            return Applied(f"`not` removed from `{src.segment(node)}`", [exact, *_render_edits(src, node, node.operand)],
                           node.lineno)
        if site.variant == "flip_const":
            node.value = not node.value
            return Applied(f"`{not node.value}` changed to `{node.value}`",
                           [[Edit(start_of(node), end_of(node), repr(node.value))]], node.lineno)
        test = node.test
        node.test = ast.UnaryOp(ast.Not(), test)
        text = src.segment(test)
        return Applied(
            f"condition `{text}` negated",
            [[Edit(start_of(test), end_of(test), f"not {text}")], [Edit(start_of(test), end_of(test), f"not ({text})")]],
            test.lineno,
        )


class WrongConstant(Operator):
    """A numeric literal off by one (thresholds, bases, widths, rates)."""

    name = "wrong_constant"
    summary = "wrong constant"

    def sites(self, func: FuncNode) -> list[Site]:
        return [Site(s.node, d) for s in walk_function(func) if _is_number(s.node) for d in (1, -1)]

    def apply(self, site: Site, src: Source, func: FuncNode) -> Applied:
        node = site.node
        old = node.value
        node.value = old + site.variant
        return Applied(f"constant `{old!r}` changed to `{node.value!r}`",
                       [[Edit(start_of(node), end_of(node), repr(node.value))]], node.lineno)


class RemoveStatement(Operator):
    """A forgotten assignment, augmented assignment or call statement."""

    name = "remove_statement"
    summary = "removed statement"

    def sites(self, func: FuncNode) -> list[Site]:
        return [
            s for s in walk_function(func)
            if s.index is not None and isinstance(getattr(s.parent, s.field, None), list)
            and (isinstance(s.node, ast.Assign | ast.AugAssign)
                 or (isinstance(s.node, ast.AnnAssign) and s.node.value is not None)
                 or (isinstance(s.node, ast.Expr) and isinstance(s.node.value, ast.Call)))
        ]

    def apply(self, site: Site, src: Source, func: FuncNode) -> Applied:
        body, pos = _body_and_pos(site.parent, site.field, site.index) or ([], -1)
        text = src.segment(site.node).splitlines()[0]
        edit = _remove_stmts(src, body, pos, pos + 1)
        del body[pos]
        if not body:
            body.append(ast.Pass())
        return Applied(f"statement `{text}` removed", [[edit]] if edit else [], site.node.lineno)


class RemoveBranch(Operator):
    """A dropped ``elif``/``else`` branch or a dropped guard clause (``if ...: raise/return``)."""

    name = "remove_branch"
    summary = "removed branch"

    def sites(self, func: FuncNode) -> list[Site]:
        found: list[Site] = []
        elifs = {id(s.node.orelse[0]) for s in walk_function(func) if isinstance(s.node, ast.If)
                 and len(s.node.orelse) == 1 and isinstance(s.node.orelse[0], ast.If)}
        for s in walk_function(func):
            node = s.node
            if not isinstance(node, ast.If):
                continue
            if node.orelse:
                found.append(Site(node, "elif" if id(node.orelse[0]) in elifs else "else"))
            elif id(node) not in elifs and s.index is not None and isinstance(
                    node.body[-1], ast.Raise | ast.Return | ast.Continue | ast.Break):
                found.append(Site(node, "guard", s.parent, s.field, s.index))
        return found

    def apply(self, site: Site, src: Source, func: FuncNode) -> Applied:
        node: ast.If = site.node
        line = node.lineno
        edit: Edit | None = None
        if site.variant == "guard":
            body, pos = _body_and_pos(site.parent, site.field, site.index) or ([], -1)
            edit = _remove_stmts(src, body, pos, pos + 1)
            del body[pos]
            if not body:
                body.append(ast.Pass())
            what = f"guard `{src.line(line).strip()}` removed"
        elif site.variant == "elif":
            branch: ast.If = node.orelse[0]
            what = f"branch `{src.line(branch.lineno).strip()}` removed"
            line = branch.lineno
            if src.line(branch.lineno).lstrip().startswith("elif") and _whole_lines(src, branch.body[-1],
                                                                                      branch.body[-1]):
                edit = _delete_lines(src, branch.lineno, branch.body[-1].end_lineno)  # type: ignore[arg-type]
            node.orelse = branch.orelse
        else:
            first, last = node.orelse[0], node.orelse[-1]
            else_line = next((n for n in range(node.body[-1].end_lineno + 1, first.lineno + 1)  # type: ignore[operator]
                              if re.match(r"\s*else\s*:", src.line(n))), None)
            what = "`else` branch removed"
            if else_line is not None and _whole_lines(src, last, last):
                edit = _delete_lines(src, else_line, last.end_lineno)  # type: ignore[arg-type]
                line = else_line
            node.orelse = []
        return Applied(what, [[edit]] if edit else [], line)


class SwapArguments(Operator):
    """Two adjacent positional arguments of a call passed in the wrong order."""

    name = "swap_arguments"
    summary = "swapped arguments"
    _SYMMETRIC = frozenset({"max", "min", "print", "set", "frozenset", "hash", "zip"})

    def sites(self, func: FuncNode) -> list[Site]:
        found: list[Site] = []
        for s in walk_function(func):
            node = s.node
            if not isinstance(node, ast.Call) or any(isinstance(a, ast.Starred) for a in node.args):
                continue
            if isinstance(node.func, ast.Name) and node.func.id in self._SYMMETRIC:
                continue
            found += [Site(node, i) for i in range(len(node.args) - 1)
                      if ast.dump(node.args[i]) != ast.dump(node.args[i + 1])]
        return found

    def apply(self, site: Site, src: Source, func: FuncNode) -> Applied:
        node: ast.Call = site.node
        i = site.variant
        a, b = node.args[i], node.args[i + 1]
        node.args[i], node.args[i + 1] = b, a
        text = src.segment(b) + src.between(end_of(a), start_of(b)) + src.segment(a)
        return Applied(f"arguments `{src.segment(a)}` and `{src.segment(b)}` swapped",
                       [[Edit(start_of(a), end_of(b), text)]], node.lineno)


class WrongDefault(Operator):
    """A parameter default changed (a flag flipped, a number off by one, a string emptied)."""

    name = "wrong_default"
    summary = "wrong default"

    def sites(self, func: FuncNode) -> list[Site]:
        found: list[Site] = []
        for default in [*func.args.defaults, *(d for d in func.args.kw_defaults if d is not None)]:
            if not isinstance(default, ast.Constant):
                continue
            value = default.value
            if isinstance(value, bool | str):
                found.append(Site(default, None))
            elif type(value) in (int, float):
                found += [Site(default, d) for d in (1, -1)]
        return found

    def apply(self, site: Site, src: Source, func: FuncNode) -> Applied:
        node: ast.Constant = site.node
        old = node.value
        if isinstance(old, bool):
            node.value = not old
        elif isinstance(old, str):
            node.value = "" if old else " "
        else:
            node.value = old + site.variant
        return Applied(f"default `{old!r}` changed to `{node.value!r}`",
                       [[Edit(start_of(node), end_of(node), repr(node.value))]], node.lineno)


class EarlyReturn(Operator):
    """A premature ``return`` of a type-appropriate default before one of the last statements."""

    name = "early_return"
    summary = "early return"
    _DEFAULTS = {"int": "0", "float": "0.0", "str": "''", "bool": "False", "list": "[]", "dict": "{}",
                 "set": "set()", "tuple": "()", "bytes": "b''"}

    def sites(self, func: FuncNode) -> list[Site]:
        start = 1 if func.body and _is_docstring(func.body[0]) else 0
        positions = [i for i in range(len(func.body) - 2, len(func.body)) if i > start]
        return [Site(func.body[i], i) for i in positions]

    def default_for(self, func: FuncNode) -> str:
        if any(isinstance(n, ast.Yield | ast.YieldFrom) for n in ast.walk(func)):
            return ""
        ann = func.returns
        if ann is None or (isinstance(ann, ast.BinOp) and isinstance(ann.op, ast.BitOr)):
            return "None"
        root = ann.value if isinstance(ann, ast.Subscript) else ann
        name = root.attr if isinstance(root, ast.Attribute) else getattr(root, "id", "")
        if isinstance(ann, ast.Constant) and isinstance(ann.value, str):
            name = ann.value.split("[")[0]
        return self._DEFAULTS.get(name.lower(), "None")

    def apply(self, site: Site, src: Source, func: FuncNode) -> Applied:
        stmt: ast.stmt = site.node
        value = self.default_for(func)
        text = f"return {value}".rstrip()
        func.body.insert(site.variant, safe_ast.parse(text).body[0])
        indent = _indent_of(src, stmt.lineno)
        ok = src.line(stmt.lineno)[: stmt.col_offset].strip() == ""
        edit = [Edit((stmt.lineno, 0), (stmt.lineno, 0), f"{indent}{text}\n")] if ok else []
        return Applied(f"premature `{text}` inserted", [edit] if ok else [], stmt.lineno)


class ExceptionType(Operator):
    """The wrong exception class raised, or caught, by name."""

    name = "exception_type"
    summary = "changed exception type"
    _SWAP = {
        "ValueError": "TypeError", "TypeError": "ValueError", "KeyError": "ValueError",
        "IndexError": "ValueError", "ZeroDivisionError": "ValueError", "RuntimeError": "ValueError",
        "AttributeError": "KeyError", "LookupError": "ValueError", "OverflowError": "ValueError",
        "NotImplementedError": "RuntimeError", "StopIteration": "ValueError",
    }

    def sites(self, func: FuncNode) -> list[Site]:
        found: list[Site] = []
        for s in walk_function(func):
            node = s.node
            target: ast.AST | None = None
            if isinstance(node, ast.Raise) and node.exc is not None:
                target = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
            elif isinstance(node, ast.ExceptHandler):
                target = node.type
            if isinstance(target, ast.Name):
                found.append(Site(target))
        return found

    def apply(self, site: Site, src: Source, func: FuncNode) -> Applied:
        node: ast.Name = site.node
        old = node.id
        node.id = self._SWAP.get(old, "RuntimeError")
        return Applied(f"exception `{old}` changed to `{node.id}`", [[Edit(start_of(node), end_of(node), node.id)]],
                       node.lineno)


OPERATORS: dict[str, Operator] = {
    op.name: op
    for op in (OffByOne(), ComparisonFlip(), ArithmeticSwap(), BooleanInversion(), WrongConstant(),
               RemoveStatement(), RemoveBranch(), SwapArguments(), WrongDefault(), EarlyReturn(),
               ExceptionType())
}


# ---------------------------------------------------------------------------------------------
# Public API
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MutationResult:
    """The mutated sources (only changed files) and one description per applied site."""

    files: dict[str, str]
    descriptions: tuple[str, ...]


def enumerate_sites(source: str, file: str, operators: Sequence[str] | None = None) -> list[SiteRef]:
    """Every candidate site of every operator in every function, in a fixed order."""
    tree = safe_ast.parse(source)
    names = list(operators or OPERATORS)
    return [
        SiteRef(file, qualname, name, i)
        for qualname, func in iter_functions(tree)
        for name in names
        for i in range(len(OPERATORS[name].sites(func)))
    ]


def _find_function(tree: ast.Module, qualname: str) -> FuncNode:
    for name, node in iter_functions(tree):
        if name == qualname:
            return node
    raise MutationError(f"no function {qualname!r}")


def apply_site(source: str, ref: SiteRef) -> tuple[str, str]:
    """Apply one mutation to one module; returns ``(new source, description)``.

    Raises ``MutationError`` when the site is gone, the text edit would not reproduce the mutated
    tree exactly, or the mutation changes nothing.
    """
    tree = safe_ast.parse(source)
    original = normalized(source)
    func = _find_function(tree, ref.function)
    sites = OPERATORS[ref.operator].sites(func)
    if not 0 <= ref.site < len(sites):
        raise MutationError(f"{ref}: site out of range ({len(sites)} sites)")
    src = Source(source)
    try:
        applied = OPERATORS[ref.operator].apply(sites[ref.site], src, func)
    except (AttributeError, IndexError, KeyError, TypeError, ValueError) as exc:
        raise MutationError(f"{ref}: {exc}") from exc
    # Re-parsing the unparsed tree folds spellings the parser never produces (``Constant(-1)``).
    expected = normalized(ast.unparse(tree))
    if expected == original:
        raise MutationError(f"{ref}: mutation changes nothing")
    for edits in applied.candidates:
        try:
            text = src.apply(edits)
            if normalized(text) == expected:
                return text, f"{ref.file}:{applied.line} in {ref.function}: {applied.description}"
        except (SyntaxError, MutationError, ValueError):
            continue
    raise MutationError(f"{ref}: no faithful text edit")


def apply_mutations(read: Callable[[str], str], refs: Sequence[SiteRef]) -> MutationResult:
    """Apply several mutations (in distinct functions) in order; ``read(file)`` gives originals.

    Sites are counted inside one function only, so a mutation in one function never shifts the
    site indices of another, and applying them one after the other on re-parsed text is exact.
    """
    files: dict[str, str] = {}
    descriptions: list[str] = []
    for ref in refs:
        current = files[ref.file] if ref.file in files else read(ref.file)
        files[ref.file], description = apply_site(current, ref)
        descriptions.append(description)
    return MutationResult(files, tuple(descriptions))


def normalized(source: str) -> str:
    """Formatting-independent identity of a module, used to drop duplicate mutants."""
    return ast.dump(safe_ast.parse(source))
