"""First-in, first-out (FIFO) inventory costing."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from decimal import Decimal
from typing import Deque, List


@dataclass
class CostLayer:
    """A batch of units received together at one unit cost."""

    quantity: int
    unit_cost: Decimal


class FifoLedger:
    """Tracks cost layers; consumption always draws from the oldest layer."""

    def __init__(self) -> None:
        self._layers: Deque[CostLayer] = deque()

    def receive(self, quantity: int, unit_cost: Decimal) -> None:
        """Add a new layer.  ``quantity`` must be positive and the cost
        non-negative, otherwise ``ValueError`` is raised."""
        if quantity <= 0:
            raise ValueError("quantity must be positive")
        if unit_cost < 0:
            raise ValueError("unit cost must not be negative")
        self._layers.append(CostLayer(quantity, Decimal(unit_cost)))

    def consume(self, quantity: int) -> Decimal:
        """Remove ``quantity`` units, oldest first, and return their total cost.

        Raises ``ValueError`` if ``quantity`` is not positive or exceeds the
        units on hand (in which case nothing is consumed).
        """
        if quantity <= 0:
            raise ValueError("quantity must be positive")
        if quantity > self.on_hand:
            raise ValueError(f"cannot consume {quantity}; only {self.on_hand} on hand")
        cost = Decimal(0)
        remaining = quantity
        while remaining:
            layer = self._layers[0]
            take = min(remaining, layer.quantity)
            cost += take * layer.unit_cost
            layer.quantity -= take
            remaining -= take
            if layer.quantity == 0:
                self._layers.popleft()
        return cost

    @property
    def on_hand(self) -> int:
        """Total units across all layers."""
        return sum(layer.quantity for layer in self._layers)

    @property
    def value(self) -> Decimal:
        """Total cost of the units on hand."""
        return sum((layer.quantity * layer.unit_cost for layer in self._layers), Decimal(0))

    def average_cost(self) -> Decimal:
        """Weighted average unit cost, rounded to 4 decimal places (0 if empty)."""
        units = self.on_hand
        if units == 0:
            return Decimal(0)
        return (self.value / units).quantize(Decimal("0.0001"))

    def layers(self) -> List[CostLayer]:
        """A snapshot copy of the current layers, oldest first."""
        return [CostLayer(layer.quantity, layer.unit_cost) for layer in self._layers]
