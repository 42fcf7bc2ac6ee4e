import datetime as dt
from decimal import Decimal as D

import pytest

from bank_statement import (
    Categorizer,
    MonthSummary,
    Rule,
    StatementParseError,
    Transaction,
    category_totals,
    first_overdraft,
    monthly_totals,
    overdraft_days,
    parse_amount,
    parse_line,
    parse_statement,
    running_balance,
)

STATEMENT = """\
# demo account
2024-01-31;2,500.00;SALARY ACME CORP
2024-01-03;-45.20;Grocery Store #12

2024-01-15;-1,200.00;RENT January
2024-02-01;-60.00;grocery store #12
2024-02-02;-1,300.00;Landlord; rent February
2024-02-02;+10.00;Refund
"""


def tx(date: str, amount: str, description: str = "x") -> Transaction:
    return Transaction(dt.date.fromisoformat(date), D(amount), description)


# --- parsing ---------------------------------------------------------------

@pytest.mark.parametrize(
    "text, expected",
    [
        ("0.99", "0.99"),
        ("12", "12.00"),
        ("+12.50", "12.50"),
        ("-12.50", "-12.50"),
        ("1,234.56", "1234.56"),
        ("-1,234,567", "-1234567.00"),
        ("  7.00 ", "7.00"),
        ("1000", "1000.00"),
    ],
)
def test_parse_amount_valid(text, expected):
    value = parse_amount(text)
    assert value == D(expected)
    assert str(value) == expected


@pytest.mark.parametrize(
    "text",
    ["", "abc", "1.5", "1.505", "12,34", "1,2345", ",123", "1,234,", "--1", "+-1", "1.", ".50", "1 000"],
)
def test_parse_amount_invalid(text):
    with pytest.raises(ValueError):
        parse_amount(text)


def test_parse_line_strips_fields_and_keeps_semicolons_in_description():
    t = parse_line(" 2024-02-02 ; -1,300.00 ;  Landlord; rent  ")
    assert t == Transaction(dt.date(2024, 2, 2), D("-1300.00"), "Landlord; rent")


@pytest.mark.parametrize(
    "line, fragment",
    [
        ("2024-01-01;5.00", "expected DATE;AMOUNT;DESCRIPTION"),
        ("2024-13-01;5.00;x", "invalid date"),
        ("01/02/2024;5.00;x", "invalid date"),
        ("2024-01-01;5,00;x", "invalid amount"),
        ("2024-01-01;5.00;   ", "empty description"),
    ],
)
def test_parse_line_errors(line, fragment):
    with pytest.raises(StatementParseError, match=fragment) as info:
        parse_line(line, line_no=7)
    assert info.value.line_no == 7
    assert str(info.value).startswith("line 7: ")


def test_parse_line_default_line_number_and_immutability():
    with pytest.raises(StatementParseError, match="^line 1: ") as info:
        parse_line("garbage")
    assert info.value.line_no == 1
    t = parse_line("2024-01-01;1.00;x")
    with pytest.raises(AttributeError):
        t.amount = D("2.00")


def test_parse_statement_skips_comments_and_blanks():
    txs = parse_statement(STATEMENT)
    assert len(txs) == 6
    assert txs[0] == tx("2024-01-31", "2500.00", "SALARY ACME CORP")
    assert txs[4].description == "Landlord; rent February"
    assert txs[5].amount == D("10.00")


def test_parse_statement_error_line_number_counts_physical_lines():
    text = "# header\n\n2024-01-01;1.00;ok\n2024-01-02;oops;bad\n"
    with pytest.raises(StatementParseError) as info:
        parse_statement(text)
    assert info.value.line_no == 4


def test_parse_statement_empty():
    assert parse_statement("") == []
    assert parse_statement("# nothing\n   \n") == []


# --- rules -----------------------------------------------------------------

def test_rule_keywords_case_insensitive():
    rule = Rule("groceries", ("grocery", "MARKET"))
    assert rule.matches(tx("2024-01-01", "-5", "GROCERY store"))
    assert rule.matches(tx("2024-01-01", "-5", "Farmers market"))
    assert not rule.matches(tx("2024-01-01", "-5", "Gas station"))


def test_rule_without_keywords_matches_everything():
    assert Rule("any").matches(tx("2024-01-01", "1", "whatever"))


@pytest.mark.parametrize(
    "amount, expected",
    [("-100.01", False), ("-100.00", True), ("-50", True), ("-10.00", True), ("-9.99", False)],
)
def test_rule_amount_bounds_inclusive(amount, expected):
    rule = Rule("mid", (), min_amount=D("-100.00"), max_amount=D("-10.00"))
    assert rule.matches(tx("2024-01-01", amount)) is expected


def test_rule_single_bounds():
    big_income = Rule("big", min_amount=D("1000"))
    assert big_income.matches(tx("2024-01-01", "1000"))
    assert not big_income.matches(tx("2024-01-01", "999.99"))
    debit = Rule("debit", max_amount=D("-0.01"))
    assert debit.matches(tx("2024-01-01", "-0.01"))
    assert not debit.matches(tx("2024-01-01", "0.00"))


def test_rule_keyword_and_amount_both_required():
    rule = Rule("rent", ("rent",), max_amount=D("0"))
    assert rule.matches(tx("2024-01-01", "-900", "Rent"))
    assert not rule.matches(tx("2024-01-01", "900", "Rent refund"))
    assert not rule.matches(tx("2024-01-01", "-900", "Mortgage"))


def test_rule_is_immutable():
    rule = Rule("x", ("a",))
    with pytest.raises(AttributeError):
        rule.category = "y"


def test_rule_invalid_bounds():
    with pytest.raises(ValueError):
        Rule("bad", min_amount=D("5"), max_amount=D("4.99"))
    Rule("ok", min_amount=D("5"), max_amount=D("5"))


def make_categorizer() -> Categorizer:
    return Categorizer(
        [
            Rule("income", ("salary",), min_amount=D("0.01")),
            Rule("housing", ("rent", "landlord")),
            Rule("groceries", ("grocery",)),
        ]
    )


def test_categorizer_first_match_wins_and_default():
    cat = make_categorizer()
    assert cat.categorize(tx("2024-01-01", "-5", "grocery rent")) == "housing"
    assert cat.categorize(tx("2024-01-01", "-5", "salary correction")) == "uncategorized"
    assert Categorizer(default="misc").categorize(tx("2024-01-01", "1")) == "misc"


def test_categorizer_add_rule_has_lowest_precedence():
    cat = make_categorizer()
    cat.add_rule(Rule("refunds", ("refund",)))
    cat.add_rule(Rule("catch-all"))
    assert cat.categorize(tx("2024-01-01", "5", "Refund")) == "refunds"
    assert cat.categorize(tx("2024-01-01", "5", "rent refund")) == "housing"
    assert cat.categorize(tx("2024-01-01", "5", "other")) == "catch-all"


def test_categorizer_group_preserves_order():
    groups = make_categorizer().group(parse_statement(STATEMENT))
    assert list(groups) == ["income", "groceries", "housing", "uncategorized"]
    assert [t.description for t in groups["housing"]] == ["RENT January", "Landlord; rent February"]


# --- reports ---------------------------------------------------------------

def test_monthly_totals():
    totals = monthly_totals(parse_statement(STATEMENT))
    assert list(totals) == [(2024, 1), (2024, 2)]
    assert totals[(2024, 1)] == MonthSummary(D("2500.00"), D("1245.20"), 1, 2)
    assert totals[(2024, 1)].net == D("1254.80")
    assert totals[(2024, 2)] == MonthSummary(D("10.00"), D("1360.00"), 1, 2)
    assert totals[(2024, 2)].net == D("-1350.00")


def test_monthly_totals_zero_amount_and_year_boundary():
    totals = monthly_totals([tx("2024-01-05", "0"), tx("2023-12-31", "-1.00"), tx("2023-12-01", "3.00")])
    assert list(totals) == [(2023, 12), (2024, 1)]
    assert totals[(2024, 1)] == MonthSummary(D("0"), D("0"), 0, 0)
    assert totals[(2024, 1)].net == 0
    assert totals[(2023, 12)] == MonthSummary(D("3.00"), D("1.00"), 1, 1)
    assert totals[(2023, 12)].net == D("2.00")


def test_monthly_totals_small_amounts():
    totals = monthly_totals([tx("2024-05-01", "0.50"), tx("2024-05-02", "-0.25"), tx("2024-05-03", "0.01")])
    assert totals == {(2024, 5): MonthSummary(D("0.51"), D("0.25"), 2, 1)}


def test_month_summary_defaults():
    summary = MonthSummary()
    assert (summary.income, summary.expenses, summary.deposits, summary.withdrawals) == (0, 0, 0, 0)
    assert summary.net == 0


def test_running_balance_sorted_and_stable():
    txs = [tx("2024-01-02", "-5", "b"), tx("2024-01-01", "10", "a"), tx("2024-01-02", "1", "c")]
    result = running_balance(txs, opening=D("100"))
    assert [(t.description, bal) for t, bal in result] == [("a", D("110")), ("b", D("105")), ("c", D("106"))]
    assert running_balance([]) == []


def test_running_balance_default_opening_is_zero():
    assert running_balance([tx("2024-01-01", "-3")])[0][1] == D("-3")


def test_overdraft_days_uses_end_of_day_balance():
    txs = [
        tx("2024-03-01", "-50"),  # dips to -50 ...
        tx("2024-03-01", "80"),   # ... but ends the day at +30
        tx("2024-03-02", "-30"),  # exactly zero: not overdrawn
        tx("2024-03-03", "-0.01"),
        tx("2024-03-05", "-10"),
        tx("2024-03-06", "20.01"),
    ]
    assert overdraft_days(txs) == [dt.date(2024, 3, 3), dt.date(2024, 3, 5)]
    assert overdraft_days(txs, opening=D("0.01")) == [dt.date(2024, 3, 5)]


def test_first_overdraft_with_limit():
    txs = [tx("2024-01-01", "-40", "a"), tx("2024-01-02", "-60", "b"), tx("2024-01-03", "-0.01", "c")]
    assert first_overdraft(txs, opening=D("100")) == (txs[2], D("-0.01"))
    assert first_overdraft(txs, opening=D("0")) == (txs[0], D("-40"))
    assert first_overdraft(txs, opening=D("0"), limit=D("100")) == (txs[2], D("-100.01"))
    assert first_overdraft(txs, opening=D("0"), limit=D("100.01")) is None
    assert first_overdraft([], opening=D("0")) is None


def test_first_overdraft_negative_limit_rejected():
    with pytest.raises(ValueError):
        first_overdraft([], limit=D("-1"))


def test_category_totals_sorted_by_name():
    totals = category_totals(parse_statement(STATEMENT), make_categorizer())
    assert list(totals) == ["groceries", "housing", "income", "uncategorized"]
    assert totals == {
        "groceries": D("-105.20"),
        "housing": D("-2500.00"),
        "income": D("2500.00"),
        "uncategorized": D("10.00"),
    }
