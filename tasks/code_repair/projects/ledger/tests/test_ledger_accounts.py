from decimal import Decimal

import pytest

from ledger import (
    AccountType,
    Chart,
    DuplicateAccountError,
    InvalidAmountError,
    LedgerError,
    UnbalancedTransactionError,
    UnknownAccountError,
    to_amount,
)


def test_debit_normal_types():
    assert AccountType.ASSET.is_debit_normal
    assert AccountType.EXPENSE.is_debit_normal
    assert not AccountType.LIABILITY.is_debit_normal
    assert not AccountType.EQUITY.is_debit_normal
    assert not AccountType.INCOME.is_debit_normal


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        ("1000", AccountType.ASSET),
        ("2100", AccountType.LIABILITY),
        ("3000", AccountType.EQUITY),
        ("4999", AccountType.INCOME),
        ("5010", AccountType.EXPENSE),
    ],
)
def test_type_inferred_from_code(code, expected):
    chart = Chart()
    account = chart.add(code, "Name")
    assert account.type is expected
    assert chart.get(code) == account


def test_add_with_matching_type_and_strips_name():
    chart = Chart()
    account = chart.add("1000", "  Cash ", AccountType.ASSET)
    assert account.name == "Cash"


@pytest.mark.parametrize("code", ["100", "10000", "0100", "6000", "9000", "1a00", "", "abcd"])
def test_invalid_codes(code):
    with pytest.raises(ValueError):
        Chart().add(code, "Name")


def test_type_mismatch_and_blank_name():
    chart = Chart()
    with pytest.raises(ValueError):
        chart.add("1000", "Cash", AccountType.EXPENSE)
    with pytest.raises(ValueError):
        chart.add("1000", "   ")
    assert len(chart) == 0


def test_duplicate_account():
    chart = Chart()
    chart.add("1000", "Cash")
    with pytest.raises(DuplicateAccountError):
        chart.add("1000", "Other")
    assert issubclass(DuplicateAccountError, LedgerError)


def test_unknown_account():
    chart = Chart()
    with pytest.raises(UnknownAccountError) as info:
        chart.get("1000")
    assert str(info.value) == "unknown account '1000'"
    assert isinstance(info.value, KeyError)
    assert isinstance(info.value, LedgerError)


def test_account_is_immutable():
    import dataclasses

    account = Chart().add("1000", "Cash")
    with pytest.raises(dataclasses.FrozenInstanceError):
        account.name = "Bank"


def test_chart_iteration_and_membership():
    chart = Chart()
    chart.add("5000", "Rent")
    chart.add("1000", "Cash")
    chart.add("3000", "Capital")
    assert [a.code for a in chart] == ["1000", "3000", "5000"]
    assert "1000" in chart
    assert "2000" not in chart
    assert len(chart) == 3


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("10", Decimal("10.00")),
        ("10.5", Decimal("10.50")),
        ("-3.25", Decimal("-3.25")),
        (7, Decimal("7.00")),
        (Decimal("0.01"), Decimal("0.01")),
        ("1e2", Decimal("100.00")),
        ("2.500", Decimal("2.50")),
    ],
)
def test_to_amount(value, expected):
    result = to_amount(value)
    assert result == expected
    assert result.as_tuple().exponent == -2


@pytest.mark.parametrize("value", ["1.005", "0.001", "abc", "", "NaN", "Infinity", Decimal("-0.125")])
def test_to_amount_invalid(value):
    with pytest.raises(InvalidAmountError):
        to_amount(value)


@pytest.mark.parametrize("value", [1.5, True, None, [1]])
def test_to_amount_type_errors(value):
    with pytest.raises(TypeError):
        to_amount(value)


def test_error_types():
    assert issubclass(InvalidAmountError, ValueError)
    err = UnbalancedTransactionError(Decimal("5.00"))
    assert err.difference == Decimal("5.00")
    assert str(err) == "transaction is unbalanced by 5.00"
    assert not issubclass(UnbalancedTransactionError, ValueError)
