"""Conversion between integers and Roman numerals (1..3999) with strict validation."""

from __future__ import annotations

MIN_VALUE = 1
MAX_VALUE = 3999

_TABLE = (
    (1000, "M"),
    (900, "CM"),
    (500, "D"),
    (400, "CD"),
    (100, "C"),
    (90, "XC"),
    (50, "L"),
    (40, "XL"),
    (10, "X"),
    (9, "IX"),
    (5, "V"),
    (4, "IV"),
    (1, "I"),
)
_SYMBOLS = {"I": 1, "V": 5, "X": 10, "L": 50, "C": 100, "D": 500, "M": 1000}
# (one, five, ten) symbols for thousands, hundreds, tens and units.
_DECADES = (("M", "", ""), ("C", "D", "M"), ("X", "L", "C"), ("I", "V", "X"))
MAX_REPEAT = 3


def _check_int(number: int) -> None:
    if not isinstance(number, int) or isinstance(number, bool):
        raise TypeError(f"expected an int, got {type(number).__name__}")
    if number < MIN_VALUE or number > MAX_VALUE:
        raise ValueError(f"{number} is outside {MIN_VALUE}..{MAX_VALUE}")


def to_roman(number: int) -> str:
    """Return the canonical Roman numeral for ``number``.

    Raises TypeError for non-integers (bool included) and ValueError outside
    1..3999.
    """
    _check_int(number)
    parts = []
    for value, symbol in _TABLE:
        count, number = divmod(number, value)
        parts.append(symbol * count)
    return "".join(parts)


def _parse_decade(text: str, pos: int, one: str, five: str, ten: str) -> tuple[int, int]:
    """Read one decimal digit's worth of numeral at ``pos``; return ``(digit, new_pos)``."""
    if ten and text.startswith(one + ten, pos):
        return 9, pos + 2
    if five and text.startswith(one + five, pos):
        return 4, pos + 2
    digit = 0
    if five and text.startswith(five, pos):
        digit = 5
        pos += 1
    count = 0
    while pos < len(text) and text[pos] == one and count < MAX_REPEAT:
        count += 1
        pos += 1
    return digit + count, pos


def from_roman(text: str, allow_lowercase: bool = False) -> int:
    """Parse a canonical Roman numeral strictly.

    Only canonical forms are accepted: at most three repeats of I, X, C, M;
    subtractive pairs only IV, IX, XL, XC, CD, CM; no V/L/D repeats; symbols
    in descending order. Lowercase input is accepted only when
    ``allow_lowercase`` is true. Raises TypeError for non-strings and
    ValueError (mentioning the offending position) for anything malformed.
    """
    if not isinstance(text, str):
        raise TypeError(f"expected a str, got {type(text).__name__}")
    if not text:
        raise ValueError("empty numeral")
    if allow_lowercase:
        text = text.upper()
    for index, char in enumerate(text):
        if char not in _SYMBOLS:
            raise ValueError(f"invalid character {char!r} at position {index}")
    total, pos = 0, 0
    for one, five, ten in _DECADES:
        digit, pos = _parse_decade(text, pos, one, five, ten)
        total = total * 10 + digit
    if pos != len(text):
        raise ValueError(f"malformed numeral {text!r} at position {pos}")
    return total


def is_valid(text: str) -> bool:
    """Return True if ``text`` is a canonical uppercase Roman numeral."""
    try:
        from_roman(text)
    except (TypeError, ValueError):
        return False
    return True


def from_roman_lenient(text: str) -> int:
    """Parse a possibly non-canonical numeral additively (``IIII`` -> 4, ``IC`` -> 99).

    Each symbol is added, except that a symbol smaller than the one after it
    is subtracted. Case-insensitive. Raises ValueError for empty input or
    unknown symbols.
    """
    values = []
    for index, char in enumerate(text.upper()):
        if char not in _SYMBOLS:
            raise ValueError(f"invalid character {char!r} at position {index}")
        values.append(_SYMBOLS[char])
    if not values:
        raise ValueError("empty numeral")
    total = values[-1]
    for current, following in zip(values, values[1:]):
        total += -current if current < following else current
    return total


def add(a: str, b: str) -> str:
    """Add two canonical numerals; raises ValueError if the sum exceeds 3999."""
    return to_roman(from_roman(a) + from_roman(b))


def subtract(a: str, b: str) -> str:
    """Subtract numeral ``b`` from ``a``; raises ValueError unless the result is positive."""
    return to_roman(from_roman(a) - from_roman(b))
