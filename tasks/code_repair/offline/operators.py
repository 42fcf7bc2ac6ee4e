"""The mutation operators: each lists the sites it can mutate in a function and plants one bug.

An operator changes the parsed tree in place and proposes text edits of the original source,
best first; :func:`.mutate.apply_site` keeps the first edit that re-parses to the mutated tree.
"""

from __future__ import annotations

import ast
import re
from typing import ClassVar

from envhub import safe_ast

from .sites import (
    OP_TEXT,
    Applied,
    Edit,
    FuncNode,
    Site,
    Source,
    body_and_pos,
    delete_lines,
    end_of,
    gap_edit,
    indent_of,
    int_value,
    is_docstring,
    is_int,
    is_number,
    is_str,
    remove_stmts,
    render_edits,
    replace_node,
    start_of,
    walk_function,
    whole_lines,
)


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
    old_text, new_text = OP_TEXT[type(old_op)], OP_TEXT[type(new_op)]
    node.ops[i] = new_op
    gap = gap_edit(src, left, node.comparators[i], old_text, new_text)
    return Applied(
        f"comparison `{old_text}` changed to `{new_text}`",
        ([[gap]] if gap else []) + render_edits(src, node, node),
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
            elif isinstance(node, ast.Subscript) and int_value(node.slice) is not None:
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
        return Applied(f"{what} `{src.segment(old)}` shifted by {delta:+d}", render_edits(src, old, new), old.lineno)


def _shift(expr: ast.expr, delta: int) -> ast.expr:
    """``expr + delta``, folded into an integer literal or an existing ``+ k``/``- k`` term."""
    value = int_value(expr)
    if value is not None:
        return ast.Constant(value + delta)
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Add | ast.Sub) and is_int(expr.right):
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
                if is_str(node.left) or is_str(node.right):
                    continue  # string concatenation / %-formatting: a swap is a crash, not a bug
            elif not isinstance(node, ast.AugAssign) or is_str(node.value):
                continue
            found += [Site(node, new) for new in self._SWAP.get(type(node.op), ())]
        return found

    def apply(self, site: Site, src: Source, func: FuncNode) -> Applied:
        node = site.node
        old_text, new_text = OP_TEXT[type(node.op)], OP_TEXT[site.variant]
        node.op = site.variant()
        if isinstance(node, ast.AugAssign):
            gap = gap_edit(src, node.target, node.value, old_text, new_text, suffix="=")
            fallback: list[list[Edit]] = []
        else:
            gap = gap_edit(src, node.left, node.right, old_text, new_text)
            fallback = render_edits(src, node, node)
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
            old_text = OP_TEXT[type(node.op)]
            node.op = ast.Or() if isinstance(node.op, ast.And) else ast.And()
            new_text = OP_TEXT[type(node.op)]
            gaps = [gap_edit(src, a, b, old_text, new_text) for a, b in zip(node.values, node.values[1:], strict=False)]
            exact = [[g for g in gaps if g]] if all(gaps) else []
            return Applied(f"`{old_text}` changed to `{new_text}`", exact + render_edits(src, node, node), node.lineno)
        if site.variant == "drop_not":
            replace_node(site, node.operand)
            head = src.between(start_of(node), start_of(node.operand))
            exact = [Edit(start_of(node), start_of(node.operand), re.sub(r"^not\s*", "", head))]
            return Applied(f"`not` removed from `{src.segment(node)}`", [exact, *render_edits(src, node, node.operand)],
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
        return [Site(s.node, d) for s in walk_function(func) if is_number(s.node) for d in (1, -1)]

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
        body, pos = body_and_pos(site.parent, site.field, site.index) or ([], -1)
        text = src.segment(site.node).splitlines()[0]
        edit = remove_stmts(src, body, pos, pos + 1)
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
            body, pos = body_and_pos(site.parent, site.field, site.index) or ([], -1)
            edit = remove_stmts(src, body, pos, pos + 1)
            del body[pos]
            if not body:
                body.append(ast.Pass())
            what = f"guard `{src.line(line).strip()}` removed"
        elif site.variant == "elif":
            branch: ast.If = node.orelse[0]
            what = f"branch `{src.line(branch.lineno).strip()}` removed"
            line = branch.lineno
            if src.line(branch.lineno).lstrip().startswith("elif") and whole_lines(src, branch.body[-1],
                                                                                      branch.body[-1]):
                edit = delete_lines(src, branch.lineno, branch.body[-1].end_lineno)  # type: ignore[arg-type]
            node.orelse = branch.orelse
        else:
            first, last = node.orelse[0], node.orelse[-1]
            else_line = next((n for n in range(node.body[-1].end_lineno + 1, first.lineno + 1)  # type: ignore[operator]
                              if re.match(r"\s*else\s*:", src.line(n))), None)
            what = "`else` branch removed"
            if else_line is not None and whole_lines(src, last, last):
                edit = delete_lines(src, else_line, last.end_lineno)  # type: ignore[arg-type]
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
        start = 1 if func.body and is_docstring(func.body[0]) else 0
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
        indent = indent_of(src, stmt.lineno)
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
