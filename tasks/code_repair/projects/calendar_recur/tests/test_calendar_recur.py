import datetime as dt

import pytest

from calendar_recur import (
    DAILY,
    MONTHLY,
    WEEKLY,
    RecurrenceError,
    Rule,
    add_months,
    between,
    days_in_month,
    next_after,
    occurrences,
    parse_rule,
    take,
)

D = dt.date


@pytest.mark.parametrize(
    "year, month, days",
    [(2024, 2, 29), (2023, 2, 28), (1900, 2, 28), (2000, 2, 29), (2024, 4, 30), (2024, 12, 31)],
)
def test_days_in_month(year, month, days):
    assert days_in_month(year, month) == days


@pytest.mark.parametrize(
    "start, months, expected",
    [
        (D(2024, 1, 31), 1, D(2024, 2, 29)),
        (D(2023, 1, 31), 1, D(2023, 2, 28)),
        (D(2024, 1, 31), 2, D(2024, 3, 31)),
        (D(2024, 1, 31), 3, D(2024, 4, 30)),
        (D(2024, 11, 15), 2, D(2025, 1, 15)),
        (D(2024, 12, 1), 1, D(2025, 1, 1)),
        (D(2024, 1, 15), -1, D(2023, 12, 15)),
        (D(2024, 3, 31), -1, D(2024, 2, 29)),
        (D(2024, 5, 5), 0, D(2024, 5, 5)),
        (D(2024, 1, 1), 24, D(2026, 1, 1)),
        (D(2024, 1, 1), -13, D(2022, 12, 1)),
    ],
)
def test_add_months(start, months, expected):
    assert add_months(start, months) == expected


def test_add_months_with_explicit_day():
    assert add_months(D(2024, 2, 29), 1, day=31) == D(2024, 3, 31)
    assert add_months(D(2024, 2, 29), 2, day=31) == D(2024, 4, 30)
    assert add_months(D(2024, 2, 10), 0, day=1) == D(2024, 2, 1)


def test_daily_with_count():
    rule = Rule(DAILY, D(2024, 2, 27), count=4)
    assert list(occurrences(rule)) == [D(2024, 2, 27), D(2024, 2, 28), D(2024, 2, 29), D(2024, 3, 1)]


def test_daily_interval_until_inclusive():
    rule = Rule(DAILY, D(2024, 1, 1), interval=3, until=D(2024, 1, 10))
    assert list(occurrences(rule)) == [D(2024, 1, 1), D(2024, 1, 4), D(2024, 1, 7), D(2024, 1, 10)]
    rule = Rule(DAILY, D(2024, 1, 1), interval=3, until=D(2024, 1, 9))
    assert list(occurrences(rule))[-1] == D(2024, 1, 7)


def test_until_equal_to_start_gives_single_occurrence():
    assert list(occurrences(Rule(DAILY, D(2024, 1, 1), until=D(2024, 1, 1)))) == [D(2024, 1, 1)]


def test_count_one():
    assert list(occurrences(Rule(MONTHLY, D(2024, 1, 31), count=1))) == [D(2024, 1, 31)]


def test_weekly_plain():
    rule = Rule(WEEKLY, D(2024, 1, 3), interval=2, count=3)
    assert list(occurrences(rule)) == [D(2024, 1, 3), D(2024, 1, 17), D(2024, 1, 31)]


def test_weekly_by_weekday_skips_days_before_start():
    # 2024-01-03 is a Wednesday; Monday of that week is before the start.
    rule = Rule(WEEKLY, D(2024, 1, 3), by_weekday=(0, 2, 4), count=5)
    assert list(occurrences(rule)) == [
        D(2024, 1, 3),
        D(2024, 1, 5),
        D(2024, 1, 8),
        D(2024, 1, 10),
        D(2024, 1, 12),
    ]


def test_weekly_by_weekday_with_interval_and_unsorted_duplicates():
    rule = Rule(WEEKLY, D(2024, 1, 1), interval=2, by_weekday=(3, 1, 3), until=D(2024, 1, 31))
    assert rule.by_weekday == (1, 3)
    assert list(occurrences(rule)) == [
        D(2024, 1, 2),
        D(2024, 1, 4),
        D(2024, 1, 16),
        D(2024, 1, 18),
        D(2024, 1, 30),
    ]


def test_weekly_by_weekday_sunday_start():
    # 2024-01-07 is a Sunday (weekday 6): only Sunday of the first week counts.
    rule = Rule(WEEKLY, D(2024, 1, 7), by_weekday=(0, 6), count=3)
    assert list(occurrences(rule)) == [D(2024, 1, 7), D(2024, 1, 8), D(2024, 1, 14)]


def test_monthly_clamps_without_drifting():
    rule = Rule(MONTHLY, D(2024, 1, 31), count=5)
    assert list(occurrences(rule)) == [
        D(2024, 1, 31),
        D(2024, 2, 29),
        D(2024, 3, 31),
        D(2024, 4, 30),
        D(2024, 5, 31),
    ]


def test_monthly_interval_crosses_year():
    rule = Rule(MONTHLY, D(2024, 8, 30), interval=3, until=D(2025, 6, 1))
    assert list(occurrences(rule)) == [D(2024, 8, 30), D(2024, 11, 30), D(2025, 2, 28), D(2025, 5, 30)]


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(freq="YEARLY", start=D(2024, 1, 1)),
        dict(freq=DAILY, start=D(2024, 1, 1), interval=0),
        dict(freq=DAILY, start=D(2024, 1, 1), count=0),
        dict(freq=DAILY, start=D(2024, 1, 1), count=2, until=D(2024, 2, 1)),
        dict(freq=DAILY, start=D(2024, 1, 2), until=D(2024, 1, 1)),
        dict(freq=DAILY, start=D(2024, 1, 1), by_weekday=(1,)),
        dict(freq=MONTHLY, start=D(2024, 1, 1), by_weekday=(1,)),
        dict(freq=WEEKLY, start=D(2024, 1, 1), by_weekday=(7,)),
        dict(freq=WEEKLY, start=D(2024, 1, 1), by_weekday=(-1,)),
    ],
)
def test_invalid_rules(kwargs):
    with pytest.raises(RecurrenceError):
        Rule(**kwargs)


def test_rule_is_immutable():
    rule = Rule(DAILY, D(2024, 1, 1))
    with pytest.raises(AttributeError):
        rule.interval = 2


def test_valid_boundary_rules():
    Rule(WEEKLY, D(2024, 1, 1), by_weekday=(0, 6))
    Rule(DAILY, D(2024, 1, 1), interval=1, count=1)


def test_take_on_infinite_rule():
    rule = Rule(DAILY, D(2024, 12, 30))
    assert take(rule, 3) == [D(2024, 12, 30), D(2024, 12, 31), D(2025, 1, 1)]
    assert take(rule, 0) == []
    assert take(rule, 1) == [D(2024, 12, 30)]


def test_take_more_than_available_and_negative():
    rule = Rule(DAILY, D(2024, 1, 1), count=2)
    assert take(rule, 5) == [D(2024, 1, 1), D(2024, 1, 2)]
    with pytest.raises(ValueError):
        take(rule, -1)


def test_between_inclusive_and_exclusive():
    rule = Rule(WEEKLY, D(2024, 1, 1))
    assert between(rule, D(2024, 1, 8), D(2024, 1, 22)) == [D(2024, 1, 8), D(2024, 1, 15), D(2024, 1, 22)]
    assert between(rule, D(2024, 1, 8), D(2024, 1, 22), inclusive=False) == [D(2024, 1, 15)]
    assert between(rule, D(2024, 1, 9), D(2024, 1, 21)) == [D(2024, 1, 15)]
    assert between(rule, D(2024, 1, 8), D(2024, 1, 8)) == [D(2024, 1, 8)]
    assert between(rule, D(2024, 1, 8), D(2024, 1, 8), inclusive=False) == []


def test_between_before_start_and_invalid_range():
    rule = Rule(DAILY, D(2024, 1, 10), count=3)
    assert between(rule, D(2023, 1, 1), D(2024, 12, 31)) == [D(2024, 1, 10), D(2024, 1, 11), D(2024, 1, 12)]
    assert between(rule, D(2023, 1, 1), D(2024, 1, 9)) == []
    with pytest.raises(ValueError):
        between(rule, D(2024, 1, 2), D(2024, 1, 1))


def test_next_after():
    rule = Rule(MONTHLY, D(2024, 1, 31), count=3)
    assert next_after(rule, D(2023, 12, 1)) == D(2024, 1, 31)
    assert next_after(rule, D(2024, 1, 31)) == D(2024, 2, 29)
    assert next_after(rule, D(2024, 2, 28)) == D(2024, 2, 29)
    assert next_after(rule, D(2024, 3, 31)) is None


def test_parse_rule_full():
    rule = parse_rule("FREQ=WEEKLY;INTERVAL=2;BYDAY=MO,WE;COUNT=4", D(2024, 1, 1))
    assert rule == Rule(WEEKLY, D(2024, 1, 1), interval=2, count=4, by_weekday=(0, 2))
    assert list(occurrences(rule)) == [D(2024, 1, 1), D(2024, 1, 3), D(2024, 1, 15), D(2024, 1, 17)]


def test_parse_rule_case_whitespace_and_until():
    rule = parse_rule(" freq=monthly; until=20240430 ;", D(2024, 1, 31))
    assert rule.freq == MONTHLY
    assert rule.until == D(2024, 4, 30)
    assert rule.interval == 1
    assert rule.count is None
    assert list(occurrences(rule))[-1] == D(2024, 4, 30)


@pytest.mark.parametrize(
    "text, message",
    [
        ("INTERVAL=2", "FREQ is required"),
        ("FREQ=DAILY;FOO=1", "unknown field FOO"),
        ("FREQ=DAILY;COUNT", "malformed"),
        ("FREQ=DAILY;COUNT=", "malformed"),
        ("FREQ=DAILY;FREQ=WEEKLY", "duplicate"),
        ("FREQ=DAILY;COUNT=two", "invalid value"),
        ("FREQ=WEEKLY;BYDAY=XX", "invalid value"),
        ("FREQ=DAILY;UNTIL=2024-01-05", "invalid value"),
        ("FREQ=HOURLY", "unsupported frequency"),
        ("FREQ=DAILY;INTERVAL=0", "interval"),
    ],
)
def test_parse_rule_errors(text, message):
    with pytest.raises(RecurrenceError, match=message):
        parse_rule(text, D(2024, 1, 1))
