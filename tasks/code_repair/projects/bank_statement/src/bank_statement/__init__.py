"""Parse bank statements, categorize transactions and build reports."""

from .parser import StatementParseError, Transaction, parse_amount, parse_line, parse_statement
from .report import (
    MonthSummary,
    category_totals,
    first_overdraft,
    monthly_totals,
    overdraft_days,
    running_balance,
)
from .rules import Categorizer, Rule

__all__ = [
    "Categorizer",
    "MonthSummary",
    "Rule",
    "StatementParseError",
    "Transaction",
    "category_totals",
    "first_overdraft",
    "monthly_totals",
    "overdraft_days",
    "parse_amount",
    "parse_line",
    "parse_statement",
    "running_balance",
]
