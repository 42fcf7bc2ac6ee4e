from decimal import Decimal
from fractions import Fraction

import pytest

from money import (
    Currency,
    CurrencyMismatchError,
    Money,
    UnknownCurrencyError,
    allocate,
    get_currency,
    percent_of,
    rounding_mode,
    split_evenly,
)


def usd(amount):
    return Money(amount, "USD")


# --- currency -------------------------------------------------------------

def test_get_currency_normalizes_code():
    assert get_currency("usd") == Currency("USD", 2)
    assert get_currency("  jpy ") == Currency("JPY", 0)
    assert get_currency("KWD").exponent == 3


@pytest.mark.parametrize(
    "code, exponent",
    [("USD", 2), ("EUR", 2), ("GBP", 2), ("JPY", 0), ("KWD", 3), ("BHD", 3)],
)
def test_registered_currencies(code, exponent):
    assert get_currency(code) == Currency(code, exponent)


def test_currency_is_immutable():
    cur = get_currency("USD")
    with pytest.raises(AttributeError):
        cur.exponent = 3
    assert get_currency("USD").exponent == 2


def test_unknown_currency():
    with pytest.raises(UnknownCurrencyError):
        get_currency("XYZ")
    with pytest.raises(ValueError):
        Money("1", "ABC")


@pytest.mark.parametrize(
    "code, quantum, per_major",
    [("USD", Decimal("0.01"), 100), ("JPY", Decimal("1"), 1), ("BHD", Decimal("0.001"), 1000)],
)
def test_currency_quantum_and_minor_per_major(code, quantum, per_major):
    cur = get_currency(code)
    assert cur.quantum == quantum
    assert cur.minor_per_major == per_major


# --- construction & rounding ---------------------------------------------

@pytest.mark.parametrize(
    "amount, rounding, expected",
    [
        ("2.345", "half_even", "2.34"),
        ("2.355", "half_even", "2.36"),
        ("2.345", "half_up", "2.35"),
        ("2.345", "half_down", "2.34"),
        ("2.346", "half_down", "2.35"),
        ("2.341", "up", "2.35"),
        ("2.349", "down", "2.34"),
        ("-2.341", "floor", "-2.35"),
        ("-2.349", "ceiling", "-2.34"),
        ("-2.345", "half_up", "-2.35"),
        ("7", "half_even", "7.00"),
    ],
)
def test_construction_rounding(amount, rounding, expected):
    m = Money(amount, "USD", rounding=rounding)
    assert m.amount == Decimal(expected)
    assert str(m.amount) == expected


def test_default_rounding_is_half_even():
    assert usd("0.125").amount == Decimal("0.12")
    assert usd("0.135").amount == Decimal("0.14")


def test_rounding_mode_lookup():
    assert rounding_mode("half_up") == "ROUND_HALF_UP"
    with pytest.raises(ValueError):
        rounding_mode("banker")
    with pytest.raises(ValueError):
        Money("1", "USD", rounding="nearest")


def test_zero_exponent_currency_rounds_to_integer():
    assert Money("1234.5", "JPY").amount == Decimal("1234")
    assert Money("1235.5", "JPY").amount == Decimal("1236")
    assert Money("0.5", "JPY", rounding="half_up").amount == Decimal("1")


@pytest.mark.parametrize("bad", [1.5, True, None, [1]])
def test_rejects_float_and_other_types(bad):
    with pytest.raises(TypeError):
        Money(bad, "USD")


def test_accepts_int_decimal_str_and_currency_object():
    assert usd(5).amount == Decimal("5.00")
    assert usd(Decimal("1.1")).amount == Decimal("1.10")
    assert Money("3", get_currency("EUR")).currency.code == "EUR"


def test_money_is_immutable():
    m = usd("1")
    with pytest.raises(AttributeError):
        m.amount = Decimal("2")


# --- minor units ----------------------------------------------------------

@pytest.mark.parametrize(
    "units, code, amount",
    [(1234, "USD", "12.34"), (-5, "USD", "-0.05"), (1500, "JPY", "1500"), (1, "KWD", "0.001")],
)
def test_from_minor_and_back(units, code, amount):
    m = Money.from_minor(units, code)
    assert m.amount == Decimal(amount)
    assert m.minor_units == units


# --- arithmetic ------------------------------------------------------------

def test_add_sub_neg_abs():
    assert usd("1.10") + usd("2.25") == usd("3.35")
    assert usd("1.10") - usd("2.25") == usd("-1.15")
    assert -usd("4.20") == usd("-4.20")
    assert abs(usd("-4.20")) == usd("4.20")
    assert abs(usd("4.20")) == usd("4.20")


def test_currency_mismatch():
    with pytest.raises(CurrencyMismatchError):
        usd("1") + Money("1", "EUR")
    with pytest.raises(CurrencyMismatchError):
        usd("1") - Money("1", "EUR")
    with pytest.raises(CurrencyMismatchError):
        usd("1") < Money("1", "EUR")
    with pytest.raises(ValueError):
        usd("1") >= Money("1", "EUR")
    with pytest.raises(CurrencyMismatchError):
        usd("1") <= Money("1", "EUR")
    with pytest.raises(CurrencyMismatchError):
        usd("1") > Money("1", "EUR")


def test_add_non_money_is_type_error():
    with pytest.raises(TypeError):
        usd("1") + 1
    with pytest.raises(TypeError):
        usd("1") - Decimal("1")
    with pytest.raises(TypeError):
        usd("1") * usd("2")


@pytest.mark.parametrize(
    "amount, factor, rounding, expected",
    [
        ("10.00", 3, "half_even", "30.00"),
        ("10.00", "0.333", "half_even", "3.33"),
        ("0.05", "0.5", "half_even", "0.02"),
        ("0.05", "0.5", "half_up", "0.03"),
        ("0.15", "0.5", "half_even", "0.08"),
        ("1.00", "-1.5", "half_even", "-1.50"),
    ],
)
def test_multiply(amount, factor, rounding, expected):
    assert usd(amount).multiply(factor, rounding=rounding) == usd(expected)


def test_mul_operator_and_rmul():
    assert usd("2.50") * 4 == usd("10.00")
    assert 4 * usd("2.50") == usd("10.00")
    assert usd("0.05") * Decimal("0.5") == usd("0.02")
    with pytest.raises(TypeError):
        usd("1") * 0.5


def test_comparisons():
    assert usd("1.00") < usd("1.01")
    assert not usd("1.01") < usd("1.01")
    assert usd("1.01") <= usd("1.01")
    assert not usd("1.02") <= usd("1.01")
    assert usd("2") > usd("1.99")
    assert not usd("2") > usd("2")
    assert usd("2") >= usd("2")
    assert not usd("1.99") >= usd("2")


def test_equality_and_hash():
    assert usd("1") == usd("1.00")
    assert usd("1") != Money("1", "EUR")
    assert usd("1") != "1.00 USD"
    assert len({usd("1"), usd("1.00"), Money("1", "EUR")}) == 2


def test_predicates():
    assert usd("0").is_zero()
    assert not usd("0.01").is_zero()
    assert usd("-0.01").is_negative()
    assert not usd("0").is_negative()
    assert not usd("0.01").is_negative()


def test_repr_and_str():
    assert repr(usd("3.5")) == "Money('3.50', 'USD')"
    assert str(usd("1234567.891")) == "1,234,567.89 USD"
    assert str(usd("-1234.5")) == "-1,234.50 USD"
    assert str(Money("98765", "JPY")) == "98,765 JPY"
    assert str(Money("1.5", "KWD")) == "1.500 KWD"


# --- allocation -----------------------------------------------------------

@pytest.mark.parametrize(
    "amount, ratios, expected",
    [
        ("100.00", [1, 1, 1], ["33.34", "33.33", "33.33"]),
        ("0.05", [3, 7], ["0.02", "0.03"]),
        ("10.00", [1, 0, 1], ["5.00", "0.00", "5.00"]),
        ("0.01", [1, 1], ["0.01", "0.00"]),
        ("1.00", [1, 2, 3], ["0.17", "0.33", "0.50"]),
        ("0.10", [Decimal("0.3"), Decimal("0.7")], ["0.03", "0.07"]),
        ("0.07", [1, 1, 1, 1], ["0.02", "0.02", "0.02", "0.01"]),
    ],
)
def test_allocate(amount, ratios, expected):
    parts = allocate(usd(amount), ratios)
    assert parts == [usd(x) for x in expected]
    assert sum((p for p in parts), usd("0")) == usd(amount)


def test_allocate_largest_remainder_not_first():
    # exact cents: 1.1, 4.4, 5.5 -> floors 1, 4, 5 (sum 10) -> the single
    # leftover cent goes to the part with the largest remainder (5.5).
    parts = allocate(usd("0.11"), [1, 4, 5])
    assert parts == [usd("0.01"), usd("0.04"), usd("0.06")]


def test_allocate_negative_amount():
    parts = allocate(usd("-100.00"), [1, 1, 1])
    assert parts == [usd("-33.34"), usd("-33.33"), usd("-33.33")]
    assert allocate(usd("-0.05"), [3, 7]) == [usd("-0.02"), usd("-0.03")]


def test_allocate_zero_amount():
    assert allocate(usd("0"), [1, 2]) == [usd("0"), usd("0")]


def test_allocate_zero_exponent_currency():
    parts = allocate(Money("100", "JPY"), [Fraction(1, 3), Fraction(1, 3), Fraction(1, 3)])
    assert [p.amount for p in parts] == [Decimal("34"), Decimal("33"), Decimal("33")]
    assert all(p.currency.code == "JPY" for p in parts)


@pytest.mark.parametrize("ratios", [[], [0, 0], [1, -1], [Decimal("-0.5")]])
def test_allocate_invalid_ratios(ratios):
    with pytest.raises(ValueError):
        allocate(usd("1"), ratios)


def test_split_evenly():
    assert split_evenly(usd("10.00"), 3) == [usd("3.34"), usd("3.33"), usd("3.33")]
    assert split_evenly(usd("10.00"), 1) == [usd("10.00")]
    assert split_evenly(usd("0.02"), 3) == [usd("0.01"), usd("0.01"), usd("0.00")]
    assert split_evenly(usd("0.05"), 5) == [usd("0.01")] * 5
    assert split_evenly(Money("7", "JPY"), 2) == [Money("4", "JPY"), Money("3", "JPY")]


def test_split_evenly_negative_and_zero():
    assert split_evenly(usd("-10.00"), 3) == [usd("-3.34"), usd("-3.33"), usd("-3.33")]
    assert split_evenly(usd("0"), 2) == [usd("0"), usd("0")]


@pytest.mark.parametrize("parts", [0, -1])
def test_split_evenly_invalid_parts(parts):
    with pytest.raises(ValueError):
        split_evenly(usd("1"), parts)


@pytest.mark.parametrize(
    "amount, percent, rounding, expected",
    [
        ("200.00", 15, "half_up", "30.00"),
        ("19.99", "7.5", "half_up", "1.50"),
        ("0.10", 25, "half_up", "0.03"),
        ("0.10", 25, "half_even", "0.02"),
        ("50.00", 0, "half_up", "0.00"),
        ("50.00", 100, "half_up", "50.00"),
    ],
)
def test_percent_of(amount, percent, rounding, expected):
    assert percent_of(usd(amount), percent, rounding=rounding) == usd(expected)


def test_percent_of_default_rounding_is_half_up():
    assert percent_of(usd("0.10"), 25) == usd("0.03")
