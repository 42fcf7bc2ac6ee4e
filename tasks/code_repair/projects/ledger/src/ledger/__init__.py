"""A small double-entry bookkeeping ledger using Decimal amounts."""

from ledger.accounts import Account, AccountType, Chart
from ledger.errors import (
    DuplicateAccountError,
    InvalidAmountError,
    LedgerError,
    UnbalancedTransactionError,
    UnknownAccountError,
)
from ledger.journal import Journal, Posting, Transaction, to_amount
from ledger.reports import TrialBalance, balance, balances_by_type, net_income, trial_balance

__all__ = [
    "Account",
    "AccountType",
    "Chart",
    "DuplicateAccountError",
    "InvalidAmountError",
    "Journal",
    "LedgerError",
    "Posting",
    "Transaction",
    "TrialBalance",
    "UnbalancedTransactionError",
    "UnknownAccountError",
    "balance",
    "balances_by_type",
    "net_income",
    "to_amount",
    "trial_balance",
]
