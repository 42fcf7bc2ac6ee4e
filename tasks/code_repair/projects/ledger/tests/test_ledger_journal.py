import datetime
from decimal import Decimal

import pytest

from ledger import (
    AccountType,
    Chart,
    InvalidAmountError,
    Journal,
    LedgerError,
    Posting,
    UnbalancedTransactionError,
    UnknownAccountError,
    balance,
    balances_by_type,
    net_income,
    trial_balance,
)

D = Decimal


@pytest.fixture
def journal():
    chart = Chart()
    chart.add("1000", "Cash")
    chart.add("1200", "Receivables")
    chart.add("2000", "Loan")
    chart.add("3000", "Capital")
    chart.add("4000", "Sales")
    chart.add("5000", "Rent")
    chart.add("5100", "Supplies")
    return Journal(chart)


def populate(j):
    j.post("2024-01-01", "Owner investment", [("1000", "1000"), ("3000", "-1000")])
    j.post("2024-01-05", "Bank loan", [("1000", "500"), ("2000", "-500")])
    j.post("2024-01-10", "Rent", [("5000", "300"), ("1000", "-300")])
    j.post("2024-02-01", "Sale on credit", [("1200", "250.50"), ("4000", "-250.50")])
    j.post("2024-02-15", "Supplies", [("5100", "49.99"), ("1000", "-49.99")])
    return j


def test_post_returns_transaction(journal):
    tx = journal.post("2024-01-01", "Invest", [("1000", 100), ("3000", -100)])
    assert tx.id == 1
    assert tx.date == datetime.date(2024, 1, 1)
    assert tx.description == "Invest"
    assert tx.postings == (Posting("1000", D("100.00")), Posting("3000", D("-100.00")))
    assert tx.reverses is None
    assert journal.post(datetime.date(2024, 1, 2), "x", [("1000", 1), ("3000", -1)]).id == 2


def test_posting_debit_credit():
    assert Posting("1000", D("5.00")).debit == D("5.00")
    assert Posting("1000", D("5.00")).credit == D("0.00")
    assert Posting("1000", D("-5.00")).credit == D("5.00")
    assert Posting("1000", D("-5.00")).debit == D("0.00")


def test_records_are_immutable(journal):
    import dataclasses

    tx = journal.post("2024-01-01", "Invest", [("1000", 100), ("3000", -100)])
    with pytest.raises(dataclasses.FrozenInstanceError):
        tx.description = "changed"
    with pytest.raises(dataclasses.FrozenInstanceError):
        tx.postings[0].amount = D("1.00")
    with pytest.raises(dataclasses.FrozenInstanceError):
        trial_balance(journal).total_debits = D("0.00")


def test_multi_leg_transaction(journal):
    tx = journal.post("2024-01-01", "Split", [("1000", "70"), ("1200", "30"), ("4000", "-100")])
    assert len(tx.postings) == 3


def test_unbalanced(journal):
    with pytest.raises(UnbalancedTransactionError) as info:
        journal.post("2024-01-01", "Bad", [("1000", "100"), ("3000", "-99.99")])
    assert info.value.difference == D("0.01")
    with pytest.raises(UnbalancedTransactionError) as info:
        journal.post("2024-01-01", "Bad", [("1000", "100"), ("3000", "-150")])
    assert info.value.difference == D("-50.00")
    assert journal.transactions == []


def test_too_few_postings(journal):
    with pytest.raises(LedgerError):
        journal.post("2024-01-01", "None", [])
    with pytest.raises(LedgerError, match="at least 2"):
        journal.post("2024-01-01", "One", [("1000", "10")])


def test_zero_amount_rejected(journal):
    with pytest.raises(InvalidAmountError):
        journal.post("2024-01-01", "Zero", [("1000", "0"), ("3000", "0")])


def test_unknown_account_in_posting(journal):
    with pytest.raises(UnknownAccountError):
        journal.post("2024-01-01", "X", [("1000", "5"), ("9999", "-5")])


def test_bad_date(journal):
    with pytest.raises(ValueError):
        journal.post("2024-02-30", "X", [("1000", "5"), ("3000", "-5")])


def test_backdating_rejected_same_day_allowed(journal):
    journal.post("2024-03-01", "A", [("1000", "5"), ("3000", "-5")])
    journal.post("2024-03-01", "B", [("1000", "5"), ("3000", "-5")])
    with pytest.raises(LedgerError):
        journal.post("2024-02-29", "C", [("1000", "5"), ("3000", "-5")])
    assert len(journal.transactions) == 2


def test_get_transaction(journal):
    populate(journal)
    assert journal.get(1).description == "Owner investment"
    assert journal.get(5).description == "Supplies"
    for bad in (0, 6, -1):
        with pytest.raises(LedgerError):
            journal.get(bad)


def test_transactions_returns_copy(journal):
    populate(journal)
    journal.transactions.clear()
    assert len(journal.transactions) == 5


def test_balances(journal):
    populate(journal)
    assert balance(journal, "1000") == D("1150.01")
    assert balance(journal, "1200") == D("250.50")
    assert balance(journal, "2000") == D("500.00")
    assert balance(journal, "3000") == D("1000.00")
    assert balance(journal, "4000") == D("250.50")
    assert balance(journal, "5000") == D("300.00")
    with pytest.raises(UnknownAccountError):
        balance(journal, "1999")


def test_balance_as_of_is_inclusive(journal):
    populate(journal)
    assert balance(journal, "1000", as_of="2024-01-04") == D("1000.00")
    assert balance(journal, "1000", as_of="2024-01-05") == D("1500.00")
    assert balance(journal, "1000", as_of=datetime.date(2024, 1, 10)) == D("1200.00")
    assert balance(journal, "1000", as_of="2023-12-31") == D("0.00")


def test_trial_balance(journal):
    populate(journal)
    tb = trial_balance(journal)
    assert tb.rows == (
        ("1000", D("1150.01"), D("0.00")),
        ("1200", D("250.50"), D("0.00")),
        ("2000", D("0.00"), D("500.00")),
        ("3000", D("0.00"), D("1000.00")),
        ("4000", D("0.00"), D("250.50")),
        ("5000", D("300.00"), D("0.00")),
        ("5100", D("49.99"), D("0.00")),
    )
    assert tb.total_debits == D("1750.50")
    assert tb.total_credits == D("1750.50")
    assert tb.is_balanced


def test_trial_balance_skips_zero_and_as_of(journal):
    journal.post("2024-01-01", "In", [("1000", "10"), ("3000", "-10")])
    journal.post("2024-01-02", "Out", [("3000", "10"), ("1000", "-10")])
    assert trial_balance(journal).rows == ()
    tb = trial_balance(journal, as_of="2024-01-01")
    assert tb.rows == (("1000", D("10.00"), D("0.00")), ("3000", D("0.00"), D("10.00")))
    journal.post("2024-01-03", "Small sale", [("1200", "0.50"), ("4000", "-0.50")])
    tb = trial_balance(journal)
    assert tb.rows == (("1200", D("0.50"), D("0.00")), ("4000", D("0.00"), D("0.50")))
    assert (tb.total_debits, tb.total_credits) == (D("0.50"), D("0.50"))


def test_trial_balance_is_balanced_property():
    from ledger import TrialBalance

    assert not TrialBalance((), D("1.00"), D("2.00")).is_balanced


def test_balances_by_type(journal):
    populate(journal)
    totals = balances_by_type(journal)
    assert totals == {
        AccountType.ASSET: D("1400.51"),
        AccountType.LIABILITY: D("500.00"),
        AccountType.EQUITY: D("1000.00"),
        AccountType.INCOME: D("250.50"),
        AccountType.EXPENSE: D("349.99"),
    }
    income_minus_expense = totals[AccountType.INCOME] - totals[AccountType.EXPENSE]
    assert totals[AccountType.ASSET] == totals[AccountType.LIABILITY] + totals[AccountType.EQUITY] + income_minus_expense
    assert balances_by_type(journal, as_of="2024-01-01")[AccountType.ASSET] == D("1000.00")


def test_net_income(journal):
    populate(journal)
    assert net_income(journal) == D("-99.49")
    assert net_income(journal, start="2024-02-01") == D("200.51")
    assert net_income(journal, end="2024-01-31") == D("-300.00")
    assert net_income(journal, "2024-02-01", "2024-02-01") == D("250.50")
    assert net_income(journal, "2024-01-11", "2024-01-31") == D("0.00")
    with pytest.raises(ValueError):
        net_income(journal, "2024-02-02", "2024-02-01")


def test_reverse(journal):
    populate(journal)
    reversal = journal.reverse(3, "2024-03-01")
    assert reversal.id == 6
    assert reversal.reverses == 3
    assert reversal.description == "Reversal of #3"
    assert reversal.postings == (Posting("5000", D("-300.00")), Posting("1000", D("300.00")))
    assert balance(journal, "5000") == D("0.00")
    assert balance(journal, "1000") == D("1450.01")


def test_reverse_errors(journal):
    populate(journal)
    journal.reverse(1, "2024-03-01")
    with pytest.raises(LedgerError, match="already reversed"):
        journal.reverse(1, "2024-03-02")
    with pytest.raises(LedgerError, match="cannot be reversed"):
        journal.reverse(6, "2024-03-02")
    with pytest.raises(LedgerError):
        journal.reverse(99, "2024-03-02")
    with pytest.raises(LedgerError):
        journal.reverse(2, "2024-01-01")
    assert len(journal.transactions) == 6
    journal.reverse(2, "2024-03-02")
    assert len(journal.transactions) == 7
