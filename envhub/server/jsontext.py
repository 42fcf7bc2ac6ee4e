"""JSON in and out of the server, for input an attacker wrote.

``json.loads`` alone lets two things through that break a server later, far from the input: a
document nested so deep that parsing or validating it overflows the stack (a ``RecursionError``,
then a 500 or a dropped socket), and lone surrogates (``"\\ud800"``), valid JSON that no UTF-8
response can carry. :func:`parse` refuses both with a reason, so the caller answers with its
ordinary bad-input error; :class:`AsciiJSONResponse` writes replies that survive any string.
"""

from __future__ import annotations

import json
from typing import Any

from fastapi.responses import JSONResponse

#: deeper than any message of the protocol (an action's arguments included)
MAX_DEPTH = 64


def parse(data: str | bytes) -> Any:
    """The JSON value of ``data``; ValueError (with a reason) for malformed JSON, nesting deeper
    than MAX_DEPTH and strings that are not valid Unicode text (lone surrogates)."""
    try:
        value = json.loads(data)
    except RecursionError:
        raise ValueError(f"nested deeper than {MAX_DEPTH} levels") from None
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            _check_text(item)
            continue
        if not isinstance(item, dict | list):
            continue
        if depth > MAX_DEPTH:
            raise ValueError(f"nested deeper than {MAX_DEPTH} levels")
        if isinstance(item, dict):
            for key in item:
                _check_text(key)
            stack.extend((v, depth + 1) for v in item.values())
        else:
            stack.extend((v, depth + 1) for v in item)
    return value


def _check_text(text: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("a string holds a lone surrogate (not valid Unicode text)") from None


class AsciiJSONResponse(JSONResponse):
    """A JSON response escaped to ASCII: any string the server echoes (a lone surrogate included)
    encodes, where UTF-8 output would raise while the reply is being sent."""

    def render(self, content: Any) -> bytes:
        return json.dumps(content, ensure_ascii=True, allow_nan=False, separators=(",", ":")).encode("ascii")
