"""ISO-4217-style currency definitions."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Dict


class UnknownCurrencyError(ValueError):
    """Raised when a currency code is not registered."""


@dataclass(frozen=True)
class Currency:
    """A currency code and the number of digits in its minor unit."""

    code: str
    exponent: int

    @property
    def quantum(self) -> Decimal:
        """The smallest representable amount, e.g. ``Decimal('0.01')``."""
        return Decimal(1).scaleb(-self.exponent)

    @property
    def minor_per_major(self) -> int:
        """How many minor units make one major unit (100 for USD)."""
        return 10 ** self.exponent


_REGISTRY: Dict[str, Currency] = {
    code: Currency(code, exponent)
    for code, exponent in [("USD", 2), ("EUR", 2), ("GBP", 2), ("JPY", 0), ("KWD", 3), ("BHD", 3)]
}


def get_currency(code: str) -> Currency:
    """Look up a currency by code (case-insensitive, surrounding spaces ignored)."""
    normalized = code.strip().upper()
    try:
        return _REGISTRY[normalized]
    except KeyError:
        raise UnknownCurrencyError(f"unknown currency {code!r}") from None
