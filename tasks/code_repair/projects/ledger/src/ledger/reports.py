"""Balances and reports computed from a journal."""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from decimal import Decimal

from ledger.accounts import AccountType
from ledger.journal import Journal, Transaction

ZERO = Decimal("0.00")


def _in_range(tx: Transaction, start: datetime.date | None, end: datetime.date | None) -> bool:
    if start is not None and tx.date < start:
        return False
    return end is None or tx.date <= end


def _as_date(value: str | datetime.date | None) -> datetime.date | None:
    if value is None or isinstance(value, datetime.date):
        return value
    return datetime.date.fromisoformat(value)


def _raw_balance(journal: Journal, code: str, start: datetime.date | None, end: datetime.date | None) -> Decimal:
    """Debits minus credits for one account within ``[start, end]``."""
    total = ZERO
    for tx in journal.transactions:
        if _in_range(tx, start, end):
            total += sum((p.amount for p in tx.postings if p.account == code), ZERO)
    return total


def balance(journal: Journal, code: str, as_of: str | datetime.date | None = None) -> Decimal:
    """Balance of an account in its normal direction, including transactions up to ``as_of``.

    Debit-normal accounts (assets, expenses) report debits minus credits;
    the others report credits minus debits. Raises UnknownAccountError.
    """
    account = journal.chart.get(code)
    raw = _raw_balance(journal, code, None, _as_date(as_of))
    return raw if account.type.is_debit_normal else -raw


@dataclass(frozen=True)
class TrialBalance:
    """Rows of ``(code, debit, credit)`` for accounts with a non-zero balance."""

    rows: tuple[tuple[str, Decimal, Decimal], ...]
    total_debits: Decimal
    total_credits: Decimal

    @property
    def is_balanced(self) -> bool:
        return self.total_debits == self.total_credits


def trial_balance(journal: Journal, as_of: str | datetime.date | None = None) -> TrialBalance:
    """List every non-zero account balance in the debit or credit column, by code."""
    end = _as_date(as_of)
    rows = []
    debits = credits = ZERO
    for account in journal.chart:
        raw = _raw_balance(journal, account.code, None, end)
        if raw > 0:
            rows.append((account.code, raw, ZERO))
            debits += raw
        elif raw < 0:
            rows.append((account.code, ZERO, -raw))
            credits -= raw
    return TrialBalance(tuple(rows), debits, credits)


def balances_by_type(journal: Journal, as_of: str | datetime.date | None = None) -> dict[AccountType, Decimal]:
    """Sum of normal-direction balances per account type (every type present, zero if unused)."""
    totals = {account_type: ZERO for account_type in AccountType}
    for account in journal.chart:
        totals[account.type] += balance(journal, account.code, as_of)
    return totals


def net_income(
    journal: Journal,
    start: str | datetime.date | None = None,
    end: str | datetime.date | None = None,
) -> Decimal:
    """Income minus expenses for transactions dated within ``[start, end]`` (inclusive).

    Raises ValueError if ``start`` is after ``end``.
    """
    first, last = _as_date(start), _as_date(end)
    if first is not None and last is not None and first > last:
        raise ValueError("start date is after end date")
    total = ZERO
    for account in journal.chart:
        raw = _raw_balance(journal, account.code, first, last)
        if account.type in (AccountType.INCOME, AccountType.EXPENSE):
            total -= raw
    return total
