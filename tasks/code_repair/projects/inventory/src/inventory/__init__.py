"""Stock keeping with reservations and FIFO cost layers."""

from .costing import CostLayer, FifoLedger
from .stock import (
    InsufficientStockError,
    Inventory,
    InventoryError,
    LowStockLine,
    UnknownSkuError,
)

__all__ = [
    "CostLayer",
    "FifoLedger",
    "InsufficientStockError",
    "Inventory",
    "InventoryError",
    "LowStockLine",
    "UnknownSkuError",
]
