"""Account types and the chart of accounts."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from enum import Enum

from ledger.errors import DuplicateAccountError, UnknownAccountError


class AccountType(Enum):
    ASSET = "asset"
    LIABILITY = "liability"
    EQUITY = "equity"
    INCOME = "income"
    EXPENSE = "expense"

    @property
    def is_debit_normal(self) -> bool:
        """Assets and expenses increase with debits; the others with credits."""
        return self in (AccountType.ASSET, AccountType.EXPENSE)


# The first digit of an account code determines its type.
CODE_PREFIXES = {
    "1": AccountType.ASSET,
    "2": AccountType.LIABILITY,
    "3": AccountType.EQUITY,
    "4": AccountType.INCOME,
    "5": AccountType.EXPENSE,
}
CODE_LENGTH = 4


@dataclass(frozen=True)
class Account:
    code: str
    name: str
    type: AccountType


class Chart:
    """A chart of accounts keyed by four-digit codes (``1xxx`` assets ... ``5xxx`` expenses)."""

    def __init__(self) -> None:
        self._accounts: dict[str, Account] = {}

    def add(self, code: str, name: str, account_type: AccountType | None = None) -> Account:
        """Register an account and return it.

        The type is inferred from the code's first digit; if ``account_type``
        is given it must agree. Raises ValueError for a code that is not four
        digits starting with 1-5, a blank name or a type mismatch, and
        DuplicateAccountError for a code already present.
        """
        if len(code) != CODE_LENGTH or not code.isdigit() or code[0] not in CODE_PREFIXES:
            raise ValueError(f"invalid account code {code!r}")
        if not name.strip():
            raise ValueError("account name must not be blank")
        inferred = CODE_PREFIXES[code[0]]
        if account_type is not None and account_type is not inferred:
            raise ValueError(f"code {code} belongs to {inferred.value} accounts, not {account_type.value}")
        if code in self._accounts:
            raise DuplicateAccountError(f"account {code} already exists")
        account = Account(code, name.strip(), inferred)
        self._accounts[code] = account
        return account

    def get(self, code: str) -> Account:
        """Return the account for ``code``; raises UnknownAccountError."""
        try:
            return self._accounts[code]
        except KeyError:
            raise UnknownAccountError(f"unknown account {code!r}") from None

    def __contains__(self, code: str) -> bool:
        return code in self._accounts

    def __iter__(self) -> Iterator[Account]:
        """Accounts in ascending code order."""
        return iter(sorted(self._accounts.values(), key=lambda account: account.code))

    def __len__(self) -> int:
        return len(self._accounts)
