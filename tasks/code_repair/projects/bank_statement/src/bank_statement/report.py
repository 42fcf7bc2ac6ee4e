"""Aggregations over parsed transactions."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from decimal import Decimal
from typing import Dict, List, Optional, Sequence, Tuple

from .parser import Transaction
from .rules import Categorizer

ZERO = Decimal("0.00")


def _by_date(transactions: Sequence[Transaction]) -> List[Transaction]:
    """Sort by date, keeping the original order within a day."""
    return sorted(transactions, key=lambda tx: tx.date)


@dataclass
class MonthSummary:
    """Totals for one calendar month.

    ``income`` sums the positive amounts (``deposits`` counts them);
    ``expenses`` is the positive magnitude of the negative amounts
    (``withdrawals`` counts them).  Zero amounts count as neither.
    """

    income: Decimal = ZERO
    expenses: Decimal = ZERO
    deposits: int = 0
    withdrawals: int = 0

    @property
    def net(self) -> Decimal:
        """``income - expenses``."""
        return self.income - self.expenses


def monthly_totals(transactions: Sequence[Transaction]) -> Dict[Tuple[int, int], MonthSummary]:
    """Return ``{(year, month): MonthSummary}`` ordered by month."""
    totals: Dict[Tuple[int, int], MonthSummary] = {}
    for tx in _by_date(transactions):
        summary = totals.setdefault((tx.date.year, tx.date.month), MonthSummary())
        if tx.amount > 0:
            summary.income += tx.amount
            summary.deposits += 1
        elif tx.amount < 0:
            summary.expenses -= tx.amount
            summary.withdrawals += 1
    return totals


def running_balance(
    transactions: Sequence[Transaction], opening: Decimal = ZERO
) -> List[Tuple[Transaction, Decimal]]:
    """Return ``(transaction, balance_after)`` pairs in date order."""
    balance = opening
    result: List[Tuple[Transaction, Decimal]] = []
    for tx in _by_date(transactions):
        balance += tx.amount
        result.append((tx, balance))
    return result


def overdraft_days(transactions: Sequence[Transaction], opening: Decimal = ZERO) -> List[dt.date]:
    """Return the dates whose *end-of-day* balance is negative, ascending.

    A balance that dips below zero and recovers within the same day does not
    count.
    """
    end_of_day: Dict[dt.date, Decimal] = {}
    for tx, balance in running_balance(transactions, opening):
        end_of_day[tx.date] = balance
    return [day for day, balance in end_of_day.items() if balance < 0]


def first_overdraft(
    transactions: Sequence[Transaction], opening: Decimal = ZERO, limit: Decimal = ZERO
) -> Optional[Tuple[Transaction, Decimal]]:
    """Return the first ``(transaction, balance)`` that takes the balance
    below ``-limit`` (an arranged overdraft of ``limit``), or ``None``.

    Raises ``ValueError`` if ``limit`` is negative.
    """
    if limit < 0:
        raise ValueError("overdraft limit must be non-negative")
    breaches = (
        (tx, balance) for tx, balance in running_balance(transactions, opening) if balance < -limit
    )
    return next(breaches, None)


def category_totals(transactions: Sequence[Transaction], categorizer: Categorizer) -> Dict[str, Decimal]:
    """Sum amounts per category; categories are sorted by name."""
    sums: Dict[str, Decimal] = {}
    for category, txs in categorizer.group(transactions).items():
        sums[category] = sum((tx.amount for tx in txs), ZERO)
    return dict(sorted(sums.items()))
