"""Split expression text into tokens."""

from __future__ import annotations

from dataclasses import dataclass

from expr_eval.errors import TokenizeError

OPERATORS = "+-*/%^(),"


@dataclass(frozen=True)
class Token:
    """A lexical token. ``kind`` is ``"number"``, ``"name"``, ``"op"`` or ``"end"``."""

    kind: str
    text: str
    position: int
    value: float | int | None = None


def _read_number(text: str, start: int) -> Token:
    """Read ``digits[.digits][e[+-]digits]`` (a leading ``.5`` is allowed)."""
    pos = start
    while pos < len(text) and text[pos].isdigit():
        pos += 1
    is_float = False
    if pos < len(text) and text[pos] == ".":
        is_float = True
        pos += 1
        while pos < len(text) and text[pos].isdigit():
            pos += 1
        if pos - start == 1:
            raise TokenizeError("expected digits around '.'", start)
        if pos < len(text) and text[pos] == ".":
            raise TokenizeError("malformed number", pos)
    if pos < len(text) and text[pos] in "eE":
        is_float = True
        pos += 1
        if pos < len(text) and text[pos] in "+-":
            pos += 1
        digits_start = pos
        while pos < len(text) and text[pos].isdigit():
            pos += 1
        if pos == digits_start:
            raise TokenizeError("missing exponent digits", pos)
    literal = text[start:pos]
    value = float(literal) if is_float else int(literal)
    return Token("number", literal, start, value)


def tokenize(text: str) -> list[Token]:
    """Convert ``text`` into tokens, always ending with an ``"end"`` token.

    Whitespace separates tokens. Names are ``[A-Za-z_][A-Za-z0-9_]*``.
    ``**`` is accepted as a synonym for ``^``. Raises TokenizeError for any
    other character or a malformed number.
    """
    tokens: list[Token] = []
    pos = 0
    while pos < len(text):
        char = text[pos]
        if char.isspace():
            pos += 1
        elif char.isascii() and (char.isdigit() or char == "."):
            token = _read_number(text, pos)
            tokens.append(token)
            pos += len(token.text)
        elif char.isascii() and (char.isalpha() or char == "_"):
            end = pos + 1
            while end < len(text) and text[end].isascii() and (text[end].isalnum() or text[end] == "_"):
                end += 1
            tokens.append(Token("name", text[pos:end], pos))
            pos = end
        elif text.startswith("**", pos):
            tokens.append(Token("op", "^", pos))
            pos += 2
        elif char in OPERATORS:
            tokens.append(Token("op", char, pos))
            pos += 1
        else:
            raise TokenizeError(f"unexpected character {char!r}", pos)
    tokens.append(Token("end", "", len(text)))
    return tokens
