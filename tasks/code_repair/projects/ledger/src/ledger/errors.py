"""Exceptions raised by the ledger."""

from __future__ import annotations

from decimal import Decimal


class LedgerError(Exception):
    """Base class for ledger errors."""


class UnknownAccountError(LedgerError, KeyError):
    """An account code is not in the chart of accounts."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "unknown account"


class DuplicateAccountError(LedgerError):
    """An account code was added twice."""


class InvalidAmountError(LedgerError, ValueError):
    """An amount is zero, has more than two decimal places or is not a finite number."""


class UnbalancedTransactionError(LedgerError):
    """Debits and credits of a transaction differ; ``difference`` is debits minus credits."""

    def __init__(self, difference: Decimal) -> None:
        super().__init__(f"transaction is unbalanced by {difference}")
        self.difference = difference
