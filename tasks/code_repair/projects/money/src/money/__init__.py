"""Money values with currencies, rounding modes and loss-free allocation."""

from .allocation import allocate, percent_of, split_evenly
from .currency import Currency, UnknownCurrencyError, get_currency
from .money import CurrencyMismatchError, Money, rounding_mode

__all__ = [
    "Currency",
    "CurrencyMismatchError",
    "Money",
    "UnknownCurrencyError",
    "allocate",
    "get_currency",
    "percent_of",
    "rounding_mode",
    "split_evenly",
]
