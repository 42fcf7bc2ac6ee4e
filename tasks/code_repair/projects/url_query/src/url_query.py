"""Parse and build URL query strings (``application/x-www-form-urlencoded``).

Decoding rules: ``+`` means a space, ``%XX`` is a percent-escaped byte, and
the resulting bytes are decoded as UTF-8.  In non-strict mode malformed
escapes are kept literally and invalid UTF-8 becomes U+FFFD; in strict mode
both raise :class:`QueryError`.
"""

from __future__ import annotations

from typing import Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

HEXDIGITS = "0123456789abcdefABCDEF"
UNRESERVED = frozenset(
    b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~"
)

Scalar = Union[str, int, float, None]
Params = Union[Mapping[str, Union[Scalar, Sequence[Scalar]]], Iterable[Tuple[str, Scalar]]]


class QueryError(ValueError):
    """Raised for malformed query strings in strict mode or over-long input."""


def unquote(text: str, plus_as_space: bool = True, strict: bool = False) -> str:
    """Percent-decode ``text``.

    ``+`` becomes a space when ``plus_as_space`` is true.  A ``%`` not
    followed by two hex digits is kept as-is unless ``strict`` is set, in
    which case :class:`QueryError` is raised (as it is for invalid UTF-8).
    """
    if plus_as_space:
        text = text.replace("+", " ")
    out = bytearray()
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "%":
            pair = text[i + 1 : i + 3]
            if len(pair) == 2 and all(c in HEXDIGITS for c in pair):
                out.append(int(pair, 16))
                i += 3
                continue
            if strict:
                raise QueryError(f"invalid percent-escape at position {i}")
        out += ch.encode("utf-8")
        i += 1
    try:
        return out.decode("utf-8")
    except UnicodeDecodeError as exc:
        if strict:
            raise QueryError("percent-escapes do not form valid UTF-8") from exc
        return out.decode("utf-8", errors="replace")


def quote(text: str, safe: str = "", space_as_plus: bool = True) -> str:
    """Percent-encode ``text`` as UTF-8.

    Unreserved ASCII characters (letters, digits, ``-._~``) and characters in
    ``safe`` are kept.  A space becomes ``+`` (or ``%20`` when
    ``space_as_plus`` is false).  Escapes use upper-case hex digits.
    """
    keep = UNRESERVED | frozenset(safe.encode("ascii"))
    parts: List[str] = []
    for byte in text.encode("utf-8"):
        if byte in keep:
            parts.append(chr(byte))
        elif byte == 0x20 and space_as_plus:
            parts.append("+")
        else:
            parts.append(f"%{byte:02X}")
    return "".join(parts)


def parse_qsl(
    query: str,
    keep_blank: bool = False,
    strict: bool = False,
    separator: str = "&",
    max_fields: Optional[int] = None,
) -> List[Tuple[str, str]]:
    """Parse ``query`` into a list of ``(key, value)`` pairs, in order.

    A leading ``?`` is ignored, as are empty fields (``a=1&&b=2``).  A field
    without ``=`` has an empty value; in strict mode it raises
    :class:`QueryError`.  Pairs with an empty value are dropped unless
    ``keep_blank`` is true.  If ``max_fields`` is given and the query has more
    non-empty fields than that, :class:`QueryError` is raised.  An empty
    ``separator`` raises ``ValueError``.
    """
    if query.startswith("?"):
        query = query[1:]
    fields = [field for field in query.split(separator) if field]
    if max_fields is not None and len(fields) > max_fields:
        raise QueryError(f"too many fields: {len(fields)} > {max_fields}")
    pairs: List[Tuple[str, str]] = []
    for field in fields:
        key, eq, value = field.partition("=")
        if not eq and strict:
            raise QueryError(f"field {field!r} has no '='")
        if not value and not keep_blank:
            continue
        pairs.append((unquote(key, strict=strict), unquote(value, strict=strict)))
    return pairs


def parse_qs(query: str, keep_blank: bool = False, strict: bool = False) -> Dict[str, List[str]]:
    """Parse ``query`` into ``{key: [values...]}`` preserving value order."""
    result: Dict[str, List[str]] = {}
    for key, value in parse_qsl(query, keep_blank=keep_blank, strict=strict):
        result.setdefault(key, []).append(value)
    return result


def get_first(query: str, key: str, default: Optional[str] = None) -> Optional[str]:
    """Return the first value for ``key`` (blank values count) or ``default``."""
    for k, value in parse_qsl(query, keep_blank=True):
        if k == key:
            return value
    return default


def _format_value(value: Scalar) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def build_query(params: Params, space_as_plus: bool = True) -> str:
    """Build a query string from a mapping or a sequence of pairs.

    List and tuple values expand into repeated keys.  ``None`` produces a
    bare key without ``=``; booleans become ``true``/``false``.  Keys and
    values are percent-encoded with :func:`quote`.
    """
    items = params.items() if isinstance(params, Mapping) else params
    parts: List[str] = []
    for key, value in items:
        values = value if isinstance(value, (list, tuple)) else [value]
        for single in values:
            encoded_key = quote(str(key), space_as_plus=space_as_plus)
            if single is None:
                parts.append(encoded_key)
            else:
                encoded_value = quote(_format_value(single), space_as_plus=space_as_plus)
                parts.append(f"{encoded_key}={encoded_value}")
    return "&".join(parts)
