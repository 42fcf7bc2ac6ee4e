"""Run-length encoding (RLE) for text and bytes.

Text format
-----------
Every run of identical characters is written as ``<count><char>``; the count
is omitted when the run has length 1.  Characters that would be ambiguous --
ASCII digits and the escape character ``\\`` itself -- are prefixed with a
backslash.  Examples::

    "aaab"  encodes as  3ab
    "1111"  encodes as  4\\1     (count 4, escaped digit 1)

Bytes format
------------
A flat sequence of ``(count, value)`` byte pairs, with ``1 <= count <= 255``.
Longer runs are split into several pairs.
"""

from __future__ import annotations

from typing import Iterable, List, Optional, Tuple, TypeVar

ESCAPE = "\\"
DIGITS = "0123456789"
MAX_BYTE_RUN = 255

T = TypeVar("T")


class RLEDecodeError(ValueError):
    """Raised when encoded input is malformed.

    The ``position`` attribute is the index in the encoded input where the
    problem was detected.
    """

    def __init__(self, message: str, position: int) -> None:
        super().__init__(f"{message} at position {position}")
        self.position = position


def runs(items: Iterable[T]) -> List[Tuple[T, int]]:
    """Group consecutive equal items into ``(item, count)`` pairs.

    >>> runs("aab")
    [('a', 2), ('b', 1)]
    """
    result: List[Tuple[T, int]] = []
    for item in items:
        if result and result[-1][0] == item:
            result[-1] = (item, result[-1][1] + 1)
        else:
            result.append((item, 1))
    return result


def _chunks(count: int, limit: Optional[int]) -> List[int]:
    """Split a run length into chunks of at most ``limit`` (None = no limit)."""
    if limit is None:
        return [count]
    full, rest = divmod(count, limit)
    return [limit] * full + ([rest] if rest else [])


def _escape(ch: str) -> str:
    """Return ``ch`` with a leading escape if it is a digit or the escape."""
    if ch in DIGITS or ch == ESCAPE:
        return ESCAPE + ch
    return ch


def encode(text: str, max_run: Optional[int] = None) -> str:
    """Run-length encode ``text``.

    ``max_run`` optionally limits the length of a single encoded run; longer
    runs are emitted as several consecutive runs.  It must be at least 1.
    """
    if max_run is not None and max_run < 1:
        raise ValueError("max_run must be at least 1")
    parts: List[str] = []
    for ch, count in runs(text):
        token = _escape(ch)
        for chunk in _chunks(count, max_run):
            parts.append(token if chunk == 1 else f"{chunk}{token}")
    return "".join(parts)


def decode(data: str) -> str:
    """Decode text produced by :func:`encode`.

    Raises :class:`RLEDecodeError` for: a count with a leading zero, a count
    not followed by a character, a dangling escape at the end of input, or an
    escape followed by something other than a digit or a backslash.
    """
    out: List[str] = []
    i = 0
    n = len(data)
    while i < n:
        start = i
        while i < n and data[i] in DIGITS:
            i += 1
        digits = data[start:i]
        if digits.startswith("0"):
            raise RLEDecodeError("count must not start with zero", start)
        count = int(digits) if digits else 1
        if i >= n:
            raise RLEDecodeError("count without a character", start)
        ch = data[i]
        if ch == ESCAPE:
            if i + 1 >= n:
                raise RLEDecodeError("dangling escape", i)
            ch = data[i + 1]
            if ch not in DIGITS and ch != ESCAPE:
                raise RLEDecodeError(f"invalid escape {ch!r}", i)
            i += 2
        else:
            i += 1
        out.append(ch * count)
    return "".join(out)


def encode_bytes(data: bytes) -> bytes:
    """Encode ``data`` as ``(count, value)`` byte pairs (count 1..255)."""
    out = bytearray()
    for value, count in runs(data):
        for chunk in _chunks(count, MAX_BYTE_RUN):
            out += bytes((chunk, value))
    return bytes(out)


def decode_bytes(data: bytes) -> bytes:
    """Decode the output of :func:`encode_bytes`.

    Raises :class:`RLEDecodeError` when the input has an odd length (a
    truncated pair) or contains a zero run length.
    """
    if len(data) % 2 != 0:
        raise RLEDecodeError("truncated pair", len(data) - 1)
    out = bytearray()
    for i in range(0, len(data), 2):
        count, value = data[i], data[i + 1]
        if count == 0:
            raise RLEDecodeError("zero run length", i)
        out += bytes((value,)) * count
    return bytes(out)


def is_valid(data: str) -> bool:
    """Return True if ``data`` is well-formed encoded text."""
    try:
        decode(data)
    except RLEDecodeError:
        return False
    return True


def compression_ratio(text: str) -> float:
    """Return ``len(encode(text)) / len(text)``; an empty text gives 1.0."""
    if not text:
        return 1.0
    return len(encode(text)) / len(text)
