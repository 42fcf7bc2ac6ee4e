"""The :class:`Money` value type."""

from __future__ import annotations

from decimal import (
    ROUND_CEILING,
    ROUND_DOWN,
    ROUND_FLOOR,
    ROUND_HALF_DOWN,
    ROUND_HALF_EVEN,
    ROUND_HALF_UP,
    ROUND_UP,
    Decimal,
)
from typing import Union

from .currency import Currency, get_currency

_ROUNDING_MODES = {
    "half_even": ROUND_HALF_EVEN,
    "half_up": ROUND_HALF_UP,
    "half_down": ROUND_HALF_DOWN,
    "down": ROUND_DOWN,
    "up": ROUND_UP,
    "floor": ROUND_FLOOR,
    "ceiling": ROUND_CEILING,
}

Amount = Union[Decimal, int, str]


class CurrencyMismatchError(ValueError):
    """Raised when combining amounts in different currencies."""


def rounding_mode(name: str) -> str:
    """Translate a rounding-mode name such as ``"half_up"`` to a decimal constant."""
    try:
        return _ROUNDING_MODES[name]
    except KeyError:
        raise ValueError(f"unknown rounding mode {name!r}") from None


def _to_decimal(value: Amount) -> Decimal:
    if isinstance(value, bool) or not isinstance(value, (Decimal, int, str)):
        raise TypeError(f"unsupported amount type {type(value).__name__}; use Decimal, int or str")
    return Decimal(value)


class Money:
    """An immutable amount of a currency, quantized to its minor unit."""

    __slots__ = ("amount", "currency")

    def __init__(self, amount: Amount, currency: Union[str, Currency], rounding: str = "half_even") -> None:
        """Create money; ``amount`` is rounded to the currency's minor unit.

        Floats are rejected with ``TypeError`` because they cannot represent
        most decimal fractions exactly.
        """
        cur = currency if isinstance(currency, Currency) else get_currency(currency)
        value = _to_decimal(amount).quantize(cur.quantum, rounding=rounding_mode(rounding))
        object.__setattr__(self, "currency", cur)
        object.__setattr__(self, "amount", value)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("Money is immutable")

    @classmethod
    def from_minor(cls, units: int, currency: Union[str, Currency]) -> "Money":
        """Create money from an integer number of minor units (e.g. cents)."""
        cur = currency if isinstance(currency, Currency) else get_currency(currency)
        return cls(Decimal(units).scaleb(-cur.exponent), cur)

    @property
    def minor_units(self) -> int:
        """The amount as an integer number of minor units."""
        return int(self.amount.scaleb(self.currency.exponent))

    def _check(self, other: "Money") -> None:
        if self.currency != other.currency:
            raise CurrencyMismatchError(
                f"cannot combine {self.currency.code} and {other.currency.code}"
            )

    def __add__(self, other: object) -> "Money":
        if not isinstance(other, Money):
            return NotImplemented
        self._check(other)
        return Money(self.amount + other.amount, self.currency)

    def __sub__(self, other: object) -> "Money":
        if not isinstance(other, Money):
            return NotImplemented
        self._check(other)
        return Money(self.amount - other.amount, self.currency)

    def __neg__(self) -> "Money":
        return Money(-self.amount, self.currency)

    def __abs__(self) -> "Money":
        return Money(abs(self.amount), self.currency)

    def multiply(self, factor: Union[Decimal, int, str], rounding: str = "half_even") -> "Money":
        """Multiply by ``factor`` and round the result with ``rounding``."""
        return Money(self.amount * _to_decimal(factor), self.currency, rounding=rounding)

    def __mul__(self, factor: Union[Decimal, int, str]) -> "Money":
        """``money * factor`` is :meth:`multiply` with half-even rounding."""
        return self.multiply(factor)

    __rmul__ = __mul__

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Money):
            return NotImplemented
        return self.currency == other.currency and self.amount == other.amount

    def __hash__(self) -> int:
        return hash((self.currency.code, self.amount))

    def __lt__(self, other: "Money") -> bool:
        self._check(other)
        return self.amount < other.amount

    def __le__(self, other: "Money") -> bool:
        self._check(other)
        return self.amount <= other.amount

    def __gt__(self, other: "Money") -> bool:
        self._check(other)
        return self.amount > other.amount

    def __ge__(self, other: "Money") -> bool:
        self._check(other)
        return self.amount >= other.amount

    def is_zero(self) -> bool:
        """True if the amount is exactly zero."""
        return self.amount == 0

    def is_negative(self) -> bool:
        """True if the amount is below zero."""
        return self.amount < 0

    def __repr__(self) -> str:
        return f"Money('{self.amount}', '{self.currency.code}')"

    def __str__(self) -> str:
        """Format as ``'1,234.50 USD'`` with thousands separators."""
        return f"{self.amount:,.{self.currency.exponent}f} {self.currency.code}"
