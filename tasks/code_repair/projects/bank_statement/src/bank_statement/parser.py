"""Parsing of ``DATE;AMOUNT;DESCRIPTION`` statement lines."""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass
from decimal import Decimal
from typing import List

_AMOUNT_RE = re.compile(r"^([+-]?)(\d{1,3}(?:,\d{3})+|\d+)(?:\.(\d{2}))?$")


class StatementParseError(ValueError):
    """Raised for a malformed statement line; ``line_no`` is 1-based."""

    def __init__(self, message: str, line_no: int) -> None:
        super().__init__(f"line {line_no}: {message}")
        self.line_no = line_no


@dataclass(frozen=True)
class Transaction:
    """A single booked transaction; negative amounts are debits."""

    date: dt.date
    amount: Decimal
    description: str


def parse_amount(text: str) -> Decimal:
    """Parse an amount such as ``-1,234.50``, ``+12`` or ``0.99``.

    Thousands separators must group exactly three digits; a fractional part,
    if present, must have exactly two digits.  Raises ``ValueError`` for
    anything else.
    """
    match = _AMOUNT_RE.match(text.strip())
    if match is None:
        raise ValueError(f"invalid amount {text!r}")
    sign, whole, cents = match.groups()
    value = Decimal(whole.replace(",", "") + "." + (cents or "00"))
    return -value if sign == "-" else value


def parse_line(line: str, line_no: int = 1) -> Transaction:
    """Parse one ``YYYY-MM-DD;amount;description`` line.

    Whitespace around fields is stripped and the description may itself
    contain ``;``.  Raises :class:`StatementParseError` when a field is
    missing, the date or amount is invalid, or the description is empty.
    """
    parts = line.split(";", 2)
    if len(parts) < 3:
        raise StatementParseError("expected DATE;AMOUNT;DESCRIPTION", line_no)
    date_text, amount_text, description = (p.strip() for p in parts)
    try:
        date = dt.date.fromisoformat(date_text)
    except ValueError:
        raise StatementParseError(f"invalid date {date_text!r}", line_no) from None
    try:
        amount = parse_amount(amount_text)
    except ValueError:
        raise StatementParseError(f"invalid amount {amount_text!r}", line_no) from None
    if not description:
        raise StatementParseError("empty description", line_no)
    return Transaction(date, amount, description)


def parse_statement(text: str) -> List[Transaction]:
    """Parse a whole statement; blank lines and ``#`` comments are skipped.

    Line numbers in errors count every physical line, starting at 1.
    """
    transactions: List[Transaction] = []
    for line_no, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        transactions.append(parse_line(line, line_no))
    return transactions
