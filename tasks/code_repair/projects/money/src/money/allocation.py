"""Split money into parts without losing or creating minor units."""

from __future__ import annotations

import math
from decimal import Decimal
from fractions import Fraction
from typing import List, Sequence, Union

from .money import Money

Ratio = Union[int, Decimal, Fraction]


def allocate(money: Money, ratios: Sequence[Ratio]) -> List[Money]:
    """Allocate ``money`` proportionally to ``ratios``.

    Uses the largest-remainder method on minor units: every part first gets
    the floor of its exact share, then the leftover units are handed out one
    at a time to the parts with the largest fractional remainder (ties go to
    the earlier part).  The parts always sum to ``money``.  Negative amounts
    are allocated by magnitude and negated.

    Raises ``ValueError`` if ``ratios`` contains a negative ratio or sums to
    zero (which includes an empty ``ratios``).
    """
    fractions = [Fraction(r) for r in ratios]
    if any(r < 0 for r in fractions):
        raise ValueError("ratios must be non-negative")
    total = sum(fractions)
    if total == 0:
        raise ValueError("ratios must not be empty or all zero")
    if money.is_negative():
        return [-part for part in allocate(-money, fractions)]
    units = money.minor_units
    exact = [units * r / total for r in fractions]
    shares = [math.floor(x) for x in exact]
    leftover = units - sum(shares)
    by_remainder = sorted(range(len(exact)), key=lambda i: (-(exact[i] - shares[i]), i))
    for index in by_remainder[:leftover]:
        shares[index] += 1
    return [Money.from_minor(share, money.currency) for share in shares]


def split_evenly(money: Money, parts: int) -> List[Money]:
    """Split into ``parts`` near-equal amounts; earlier parts get the extra
    minor units.  Negative amounts are split by magnitude and negated.
    Raises ``ValueError`` if ``parts`` is less than 1."""
    if parts < 1:
        raise ValueError("parts must be at least 1")
    if money.is_negative():
        return [-part for part in split_evenly(-money, parts)]
    base, extra = divmod(money.minor_units, parts)
    return [Money.from_minor(base + 1 if i < extra else base, money.currency) for i in range(parts)]


def percent_of(money: Money, percent: Union[Decimal, int, str], rounding: str = "half_up") -> Money:
    """Return ``percent`` % of ``money`` rounded with ``rounding`` (default half-up)."""
    return money.multiply(Decimal(percent) / 100, rounding=rounding)
