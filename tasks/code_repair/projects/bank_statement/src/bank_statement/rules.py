"""Rule-based categorization of transactions."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from .parser import Transaction


@dataclass(frozen=True)
class Rule:
    """Assigns ``category`` to transactions that match every given condition.

    * ``keywords``: at least one must occur in the description
      (case-insensitive); an empty tuple matches any description.
    * ``min_amount`` / ``max_amount``: inclusive bounds on the signed amount.
    """

    category: str
    keywords: Tuple[str, ...] = ()
    min_amount: Optional[Decimal] = None
    max_amount: Optional[Decimal] = None

    def __post_init__(self) -> None:
        if (
            self.min_amount is not None
            and self.max_amount is not None
            and self.min_amount > self.max_amount
        ):
            raise ValueError("min_amount must not exceed max_amount")

    def matches(self, tx: Transaction) -> bool:
        """Return True if ``tx`` satisfies all conditions of this rule."""
        if self.min_amount is not None and tx.amount < self.min_amount:
            return False
        if self.max_amount is not None and tx.amount > self.max_amount:
            return False
        if not self.keywords:
            return True
        description = tx.description.lower()
        return any(keyword.lower() in description for keyword in self.keywords)


class Categorizer:
    """Applies rules in order; the first matching rule wins."""

    def __init__(self, rules: Sequence[Rule] = (), default: str = "uncategorized") -> None:
        self.rules: List[Rule] = list(rules)
        self.default = default

    def add_rule(self, rule: Rule) -> None:
        """Append a rule (lowest precedence)."""
        self.rules.append(rule)

    def categorize(self, tx: Transaction) -> str:
        """Return the category of the first matching rule, or the default."""
        for rule in self.rules:
            if rule.matches(tx):
                return rule.category
        return self.default

    def group(self, transactions: Iterable[Transaction]) -> Dict[str, List[Transaction]]:
        """Group transactions by category, preserving input order."""
        groups: Dict[str, List[Transaction]] = {}
        for tx in transactions:
            groups.setdefault(self.categorize(tx), []).append(tx)
        return groups
