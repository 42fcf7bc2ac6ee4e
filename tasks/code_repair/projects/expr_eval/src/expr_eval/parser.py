"""Recursive-descent parser producing a small AST.

Grammar (lowest to highest precedence)::

    expr    := term (("+" | "-") term)*
    term    := unary (("*" | "/" | "%") unary)*
    unary   := ("+" | "-") unary | power
    power   := primary ("^" unary)?          # right-associative
    primary := NUMBER | NAME | NAME "(" [expr ("," expr)*] ")" | "(" expr ")"

So ``-2^2 == -(2^2)`` and ``2^3^2 == 2^(3^2)``.
"""

from __future__ import annotations

from dataclasses import dataclass

from expr_eval.errors import ParseError
from expr_eval.tokenizer import Token, tokenize


@dataclass(frozen=True)
class Number:
    value: float | int
    position: int


@dataclass(frozen=True)
class Name:
    name: str
    position: int


@dataclass(frozen=True)
class Unary:
    op: str
    operand: Node
    position: int


@dataclass(frozen=True)
class Binary:
    op: str
    left: Node
    right: Node
    position: int


@dataclass(frozen=True)
class Call:
    name: str
    args: tuple[Node, ...]
    position: int


Node = Number | Name | Unary | Binary | Call


class _Parser:
    def __init__(self, tokens: list[Token]) -> None:
        self.tokens = tokens
        self.index = 0

    @property
    def current(self) -> Token:
        return self.tokens[self.index]

    def accept(self, *ops: str) -> Token | None:
        token = self.current
        matched = token.kind == "op" and token.text in ops
        if matched:
            self.index += 1
        return token if matched else None

    def expect(self, op: str) -> None:
        if self.accept(op) is None:
            found = self.current.text or "end of input"
            raise ParseError(f"expected {op!r} but found {found!r}", self.current.position)

    def expr(self) -> Node:
        node = self.term()
        while (token := self.accept("+", "-")) is not None:
            node = Binary(token.text, node, self.term(), token.position)
        return node

    def term(self) -> Node:
        node = self.unary()
        while (token := self.accept("*", "/", "%")) is not None:
            node = Binary(token.text, node, self.unary(), token.position)
        return node

    def unary(self) -> Node:
        token = self.accept("+", "-")
        if token is not None:
            return Unary(token.text, self.unary(), token.position)
        return self.power()

    def power(self) -> Node:
        base = self.primary()
        token = self.accept("^")
        if token is not None:
            return Binary("^", base, self.unary(), token.position)
        return base

    def primary(self) -> Node:
        token = self.current
        if token.kind == "number":
            self.index += 1
            return Number(token.value, token.position)  # type: ignore[arg-type]
        if token.kind == "name":
            self.index += 1
            if self.accept("(") is None:
                return Name(token.text, token.position)
            args: list[Node] = []
            if self.accept(")") is None:
                args.append(self.expr())
                while self.accept(",") is not None:
                    args.append(self.expr())
                self.expect(")")
            return Call(token.text, tuple(args), token.position)
        if self.accept("(") is not None:
            node = self.expr()
            self.expect(")")
            return node
        found = token.text or "end of input"
        raise ParseError(f"unexpected {found!r}", token.position)


def parse(text: str) -> Node:
    """Parse ``text`` into an AST. Raises TokenizeError or ParseError."""
    parser = _Parser(tokenize(text))
    node = parser.expr()
    if parser.current.kind != "end":
        raise ParseError(f"unexpected {parser.current.text!r}", parser.current.position)
    return node


def format_expr(node: Node) -> str:
    """Render an AST fully parenthesised, e.g. ``1+2*3`` -> ``(1 + (2 * 3))``."""
    if isinstance(node, Number):
        return repr(node.value)
    if isinstance(node, Name):
        return node.name
    if isinstance(node, Unary):
        return f"({node.op}{format_expr(node.operand)})"
    if isinstance(node, Binary):
        return f"({format_expr(node.left)} {node.op} {format_expr(node.right)})"
    return f"{node.name}({', '.join(format_expr(arg) for arg in node.args)})"
