from decimal import Decimal as D

import pytest

from inventory import (
    CostLayer,
    FifoLedger,
    InsufficientStockError,
    Inventory,
    InventoryError,
    LowStockLine,
    UnknownSkuError,
)


# --- FIFO ledger ------------------------------------------------------------

def test_ledger_receive_and_totals():
    ledger = FifoLedger()
    ledger.receive(10, D("2.00"))
    ledger.receive(5, D("3.00"))
    assert ledger.on_hand == 15
    assert ledger.value == D("35.00")
    assert ledger.layers() == [CostLayer(10, D("2.00")), CostLayer(5, D("3.00"))]


def test_ledger_consume_fifo_across_layers():
    ledger = FifoLedger()
    ledger.receive(10, D("2.00"))
    ledger.receive(5, D("3.00"))
    ledger.receive(5, D("4.00"))
    assert ledger.consume(4) == D("8.00")
    assert ledger.consume(8) == D("12.00") + D("6.00")
    assert ledger.layers() == [CostLayer(3, D("3.00")), CostLayer(5, D("4.00"))]
    assert ledger.consume(8) == D("29.00")
    assert ledger.on_hand == 0
    assert ledger.layers() == []


def test_ledger_consume_exact_layer_removes_it():
    ledger = FifoLedger()
    ledger.receive(3, D("1.50"))
    ledger.receive(2, D("9.00"))
    assert ledger.consume(3) == D("4.50")
    assert ledger.layers() == [CostLayer(2, D("9.00"))]


def test_ledger_consume_errors_leave_state_unchanged():
    ledger = FifoLedger()
    ledger.receive(5, D("1.00"))
    with pytest.raises(ValueError):
        ledger.consume(6)
    with pytest.raises(ValueError):
        ledger.consume(0)
    with pytest.raises(ValueError):
        ledger.consume(-1)
    assert ledger.on_hand == 5
    assert ledger.consume(5) == D("5.00")


@pytest.mark.parametrize("quantity, cost", [(0, D("1")), (-3, D("1")), (1, D("-0.01"))])
def test_ledger_receive_validation(quantity, cost):
    ledger = FifoLedger()
    with pytest.raises(ValueError):
        ledger.receive(quantity, cost)
    assert ledger.on_hand == 0


def test_ledger_zero_cost_allowed():
    ledger = FifoLedger()
    ledger.receive(1, D("0"))
    assert ledger.value == 0
    assert ledger.consume(1) == 0


def test_ledger_layers_is_a_copy():
    ledger = FifoLedger()
    ledger.receive(2, D("1"))
    ledger.layers()[0].quantity = 99
    assert ledger.on_hand == 2


def test_average_cost():
    ledger = FifoLedger()
    assert ledger.average_cost() == D("0")
    ledger.receive(1, D("1.00"))
    ledger.receive(2, D("2.00"))
    assert ledger.average_cost() == D("1.6667")
    ledger.consume(1)
    assert ledger.average_cost() == D("2.0000")
    assert str(ledger.average_cost()) == "2.0000"


# --- inventory --------------------------------------------------------------

def make_inventory() -> Inventory:
    inv = Inventory()
    inv.add_item("A-1", "Widget", reorder_point=5)
    inv.add_item("B-2", "Gadget", reorder_point=2)
    inv.receive("A-1", 10, D("1.00"))
    inv.receive("A-1", 10, D("1.50"))
    inv.receive("B-2", 3, D("10.00"))
    return inv


def test_add_item_validation():
    inv = make_inventory()
    with pytest.raises(ValueError):
        inv.add_item("A-1", "Again")
    with pytest.raises(ValueError):
        inv.add_item("C-3", "Bad", reorder_point=-1)
    inv.add_item("C-3", "Zero point", reorder_point=0)
    assert inv.on_hand("C-3") == 0


def test_unknown_sku_errors():
    inv = make_inventory()
    for call in (
        lambda: inv.on_hand("nope"),
        lambda: inv.available("nope"),
        lambda: inv.reserve("nope", 1),
        lambda: inv.receive("nope", 1, D("1")),
        lambda: inv.ship("nope", 1),
        lambda: inv.reserved("nope"),
    ):
        with pytest.raises(UnknownSkuError):
            call()
    with pytest.raises(KeyError):
        inv.stock_value("nope")
    assert issubclass(UnknownSkuError, InventoryError)


def test_reserve_reduces_available_not_on_hand():
    inv = make_inventory()
    inv.reserve("A-1", 7)
    assert inv.on_hand("A-1") == 20
    assert inv.reserved("A-1") == 7
    assert inv.available("A-1") == 13


def test_reserve_boundary_and_over_reserve():
    inv = make_inventory()
    inv.reserve("B-2", 2)
    inv.reserve("B-2", 1)
    assert inv.available("B-2") == 0
    with pytest.raises(InsufficientStockError, match="0 available"):
        inv.reserve("B-2", 1)
    assert inv.reserved("B-2") == 3


@pytest.mark.parametrize("quantity", [0, -2])
def test_non_positive_quantities_rejected(quantity):
    inv = make_inventory()
    inv.reserve("A-1", 3)
    with pytest.raises(ValueError):
        inv.reserve("A-1", quantity)
    with pytest.raises(ValueError):
        inv.release("A-1", quantity)
    with pytest.raises(ValueError):
        inv.ship("A-1", quantity)
    assert inv.reserved("A-1") == 3


def test_release():
    inv = make_inventory()
    inv.reserve("A-1", 5)
    inv.release("A-1", 2)
    assert inv.reserved("A-1") == 3
    inv.release("A-1", 3)
    assert inv.reserved("A-1") == 0
    with pytest.raises(InventoryError):
        inv.release("A-1", 1)


def test_release_more_than_reserved_is_not_insufficient_stock():
    inv = make_inventory()
    inv.reserve("A-1", 1)
    with pytest.raises(InventoryError) as info:
        inv.release("A-1", 2)
    assert not isinstance(info.value, InsufficientStockError)
    assert inv.reserved("A-1") == 1


def test_ship_from_reservation_uses_fifo_cost():
    inv = make_inventory()
    inv.reserve("A-1", 12)
    assert inv.ship("A-1", 12) == D("13.00")
    assert inv.on_hand("A-1") == 8
    assert inv.reserved("A-1") == 0
    assert inv.stock_value("A-1") == D("12.00")


def test_ship_from_reservation_requires_reservation():
    inv = make_inventory()
    inv.reserve("A-1", 2)
    with pytest.raises(InsufficientStockError, match="only 2 reserved"):
        inv.ship("A-1", 3)
    assert inv.reserved("A-1") == 2
    assert inv.on_hand("A-1") == 20
    assert inv.ship("A-1", 2) == D("2.00")


def test_ship_without_reservation_only_from_available():
    inv = make_inventory()
    inv.reserve("B-2", 1)
    with pytest.raises(InsufficientStockError, match="2 available"):
        inv.ship("B-2", 3, from_reservation=False)
    assert inv.ship("B-2", 2, from_reservation=False) == D("20.00")
    assert inv.on_hand("B-2") == 1
    assert inv.reserved("B-2") == 1
    assert inv.available("B-2") == 0


def test_total_value():
    inv = make_inventory()
    assert inv.total_value() == D("55.00")
    inv.ship("A-1", 15, from_reservation=False)
    assert inv.total_value() == D("7.50") + D("30.00")
    assert Inventory().total_value() == 0


def test_low_stock_report():
    inv = make_inventory()
    inv.add_item("C-3", "Gizmo", reorder_point=0)
    inv.add_item("D-4", "Doohickey", reorder_point=4)
    inv.receive("D-4", 10, D("1"))
    inv.reserve("D-4", 6)          # available 4 == reorder point -> listed
    inv.reserve("B-2", 3)          # available 0, point 2 -> shortfall 2
    inv.reserve("A-1", 14)         # available 6 > 5 -> not listed
    report = inv.low_stock_report()
    assert report == [
        LowStockLine("B-2", 0, 2, 2),
        LowStockLine("C-3", 0, 0, 0),
        LowStockLine("D-4", 4, 4, 0),
    ]


def test_default_reorder_point_is_zero():
    inv = Inventory()
    inv.add_item("X", "x")
    inv.receive("X", 1, D("1"))
    assert inv.low_stock_report() == []
    inv.reserve("X", 1)
    assert inv.low_stock_report() == [LowStockLine("X", 0, 0, 0)]


def test_low_stock_report_order_by_shortfall_then_sku():
    inv = Inventory()
    inv.add_item("Z", "z", reorder_point=10)
    inv.add_item("M", "m", reorder_point=3)
    inv.add_item("A", "a", reorder_point=10)
    inv.receive("A", 5, D("1"))
    inv.receive("Z", 5, D("1"))
    inv.receive("M", 4, D("1"))
    assert [line.sku for line in inv.low_stock_report()] == ["A", "Z"]
    inv.reserve("M", 4)
    report = inv.low_stock_report()
    assert [(line.sku, line.shortfall) for line in report] == [("A", 5), ("Z", 5), ("M", 3)]
