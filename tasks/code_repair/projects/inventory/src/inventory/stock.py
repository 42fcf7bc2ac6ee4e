"""Stock items, reservations and shipments."""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal
from typing import Dict, List, NamedTuple

from .costing import FifoLedger


class InventoryError(Exception):
    """Base class for inventory problems."""


class UnknownSkuError(InventoryError, KeyError):
    """Raised when a SKU is not registered."""


class InsufficientStockError(InventoryError):
    """Raised when a request exceeds the available (or reserved) quantity."""


class LowStockLine(NamedTuple):
    sku: str
    available: int
    reorder_point: int
    shortfall: int


@dataclass
class _Item:
    sku: str
    name: str
    reorder_point: int
    reserved: int = 0
    ledger: FifoLedger = field(default_factory=FifoLedger)


class Inventory:
    """A set of SKUs with on-hand stock, reservations and FIFO costing.

    ``available = on_hand - reserved``.  Reserving never changes ``on_hand``;
    shipping removes units from ``on_hand`` (and from ``reserved`` when
    shipping against a reservation).
    """

    def __init__(self) -> None:
        self._items: Dict[str, _Item] = {}

    def _get(self, sku: str) -> _Item:
        try:
            return self._items[sku]
        except KeyError:
            raise UnknownSkuError(sku) from None

    @staticmethod
    def _check_quantity(quantity: int) -> None:
        if quantity <= 0:
            raise ValueError("quantity must be positive")

    def add_item(self, sku: str, name: str, reorder_point: int = 0) -> None:
        """Register a SKU.  Duplicate SKUs and negative reorder points raise ``ValueError``."""
        if sku in self._items:
            raise ValueError(f"duplicate SKU {sku!r}")
        if reorder_point < 0:
            raise ValueError("reorder point must not be negative")
        self._items[sku] = _Item(sku, name, reorder_point)

    def receive(self, sku: str, quantity: int, unit_cost: Decimal) -> None:
        """Receive ``quantity`` units at ``unit_cost`` (creates a cost layer)."""
        self._get(sku).ledger.receive(quantity, unit_cost)

    def on_hand(self, sku: str) -> int:
        """Units physically in stock."""
        return self._get(sku).ledger.on_hand

    def reserved(self, sku: str) -> int:
        """Units promised to orders but not yet shipped."""
        return self._get(sku).reserved

    def available(self, sku: str) -> int:
        """Units that can still be reserved: ``on_hand - reserved``."""
        item = self._get(sku)
        return item.ledger.on_hand - item.reserved

    def reserve(self, sku: str, quantity: int) -> None:
        """Reserve units; raises :class:`InsufficientStockError` if more than
        the available quantity is requested."""
        self._check_quantity(quantity)
        available = self.available(sku)
        if quantity > available:
            raise InsufficientStockError(
                f"cannot reserve {quantity} of {sku}; {available} available"
            )
        self._items[sku].reserved += quantity

    def release(self, sku: str, quantity: int) -> None:
        """Cancel part of a reservation; cannot release more than is reserved."""
        self._check_quantity(quantity)
        item = self._get(sku)
        if quantity > item.reserved:
            raise InventoryError(f"cannot release {quantity}; only {item.reserved} reserved")
        item.reserved -= quantity

    def ship(self, sku: str, quantity: int, from_reservation: bool = True) -> Decimal:
        """Ship units and return their FIFO cost of goods sold.

        With ``from_reservation`` (the default) the units must already be
        reserved and the reservation is reduced.  Otherwise only unreserved
        (available) units may be shipped.
        """
        self._check_quantity(quantity)
        item = self._get(sku)
        if from_reservation:
            if quantity > item.reserved:
                raise InsufficientStockError(
                    f"cannot ship {quantity} of {sku}; only {item.reserved} reserved"
                )
            item.reserved -= quantity
        elif quantity > self.available(sku):
            raise InsufficientStockError(
                f"cannot ship {quantity} of {sku}; {self.available(sku)} available"
            )
        return item.ledger.consume(quantity)

    def stock_value(self, sku: str) -> Decimal:
        """FIFO value of the units on hand for ``sku``."""
        return self._get(sku).ledger.value

    def total_value(self) -> Decimal:
        """FIFO value of all stock."""
        return sum((item.ledger.value for item in self._items.values()), Decimal(0))

    def low_stock_report(self) -> List[LowStockLine]:
        """SKUs whose *available* quantity is at or below their reorder point.

        Sorted by shortfall (``reorder_point - available``), largest first,
        then by SKU.  Items with a reorder point of 0 are included only when
        their available quantity is 0.
        """
        lines = [
            LowStockLine(sku, avail, item.reorder_point, item.reorder_point - avail)
            for sku, item in self._items.items()
            for avail in [item.ledger.on_hand - item.reserved]
            if avail <= item.reorder_point
        ]
        return sorted(lines, key=lambda line: (-line.shortfall, line.sku))
