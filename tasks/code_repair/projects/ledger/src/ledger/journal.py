"""Balanced transactions recorded in chronological order."""

from __future__ import annotations

import datetime
from collections.abc import Iterable
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

from ledger.accounts import Chart
from ledger.errors import InvalidAmountError, LedgerError, UnbalancedTransactionError

CENT = Decimal("0.01")
ZERO = Decimal("0.00")
MIN_POSTINGS = 2


def to_amount(value: Decimal | int | str) -> Decimal:
    """Convert ``value`` to a Decimal with exactly two decimal places.

    Accepts Decimal, int or numeric strings; floats (and bools) raise
    TypeError to avoid binary rounding. Raises InvalidAmountError for values
    with more than two decimal places, non-numeric strings, NaN or infinity.
    """
    if isinstance(value, (float, bool)) or not isinstance(value, (Decimal, int, str)):
        raise TypeError(f"unsupported amount type {type(value).__name__}")
    try:
        amount = Decimal(value)
    except InvalidOperation:
        raise InvalidAmountError(f"not a number: {value!r}") from None
    if not amount.is_finite():
        raise InvalidAmountError(f"amount must be finite: {value!r}")
    quantized = amount.quantize(CENT)
    if quantized != amount:
        raise InvalidAmountError(f"more than two decimal places: {value!r}")
    return quantized


@dataclass(frozen=True)
class Posting:
    """One line of a transaction; ``amount`` > 0 is a debit, < 0 a credit."""

    account: str
    amount: Decimal

    @property
    def debit(self) -> Decimal:
        """The debit side (``0.00`` for a credit)."""
        return max(self.amount, ZERO)

    @property
    def credit(self) -> Decimal:
        """The credit side as a positive number (``0.00`` for a debit)."""
        return max(-self.amount, ZERO)


@dataclass(frozen=True)
class Transaction:
    id: int
    date: datetime.date
    description: str
    postings: tuple[Posting, ...]
    reverses: int | None = None


class Journal:
    """An append-only list of balanced transactions against a chart of accounts."""

    def __init__(self, chart: Chart) -> None:
        self.chart = chart
        self._transactions: list[Transaction] = []
        self._reversed: set[int] = set()

    @property
    def transactions(self) -> list[Transaction]:
        return list(self._transactions)

    def post(
        self,
        date: str | datetime.date,
        description: str,
        entries: Iterable[tuple[str, Decimal | int | str]],
        *,
        reverses: int | None = None,
    ) -> Transaction:
        """Record a transaction and return it (ids start at 1).

        ``entries`` are ``(account_code, signed_amount)`` pairs: positive for
        debits, negative for credits. Requires at least two entries, non-zero
        amounts, known accounts, debits equal to credits, and a date not
        earlier than the previous transaction's. Raises ValueError for a bad
        date, LedgerError for too few entries or a backdated transaction,
        InvalidAmountError, UnknownAccountError or UnbalancedTransactionError.
        """
        day = date if isinstance(date, datetime.date) else datetime.date.fromisoformat(date)
        postings = []
        for code, value in entries:
            self.chart.get(code)
            amount = to_amount(value)
            if amount == 0:
                raise InvalidAmountError(f"zero amount for account {code}")
            postings.append(Posting(code, amount))
        if len(postings) < MIN_POSTINGS:
            raise LedgerError(f"a transaction needs at least {MIN_POSTINGS} postings")
        difference = sum((p.amount for p in postings), ZERO)
        if difference != 0:
            raise UnbalancedTransactionError(difference)
        if self._transactions and day < self._transactions[-1].date:
            raise LedgerError(f"{day} is earlier than the last transaction")
        transaction = Transaction(len(self._transactions) + 1, day, description, tuple(postings), reverses)
        self._transactions.append(transaction)
        return transaction

    def get(self, transaction_id: int) -> Transaction:
        """Return a transaction by id; raises LedgerError if it does not exist."""
        if transaction_id < 1 or transaction_id > len(self._transactions):
            raise LedgerError(f"no transaction {transaction_id}")
        return self._transactions[transaction_id - 1]

    def reverse(self, transaction_id: int, date: str | datetime.date) -> Transaction:
        """Post a transaction that undoes ``transaction_id``.

        Raises LedgerError if it was already reversed or is itself a reversal.
        """
        original = self.get(transaction_id)
        if transaction_id in self._reversed:
            raise LedgerError(f"transaction {transaction_id} was already reversed")
        if original.reverses is not None:
            raise LedgerError("a reversal cannot be reversed")
        entries = [(p.account, -p.amount) for p in original.postings]
        reversal = self.post(date, f"Reversal of #{transaction_id}", entries, reverses=transaction_id)
        self._reversed.add(transaction_id)
        return reversal
