import pytest

from datetime_parse import (
    Date,
    DateTime,
    Duration,
    ParseError,
    Time,
    day_of_year,
    days_in_month,
    format_duration,
    is_leap_year,
    parse_date,
    parse_datetime,
    parse_duration,
    parse_time,
    weekday,
)
from datetime_parse.calendar import days_in_year, month_day_from_ordinal


@pytest.mark.parametrize(
    ("year", "expected"),
    [(2024, True), (2023, False), (1900, False), (2000, True), (2100, False), (2400, True), (4, True), (1, False)],
)
def test_is_leap_year(year, expected):
    assert is_leap_year(year) is expected


def test_days_in_month_all_months():
    assert [days_in_month(2023, m) for m in range(1, 13)] == [31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]
    assert days_in_month(2024, 2) == 29
    assert days_in_month(1900, 2) == 28
    assert days_in_month(2024, 3) == 31


@pytest.mark.parametrize("month", [0, 13, -1])
def test_days_in_month_rejects_bad_month(month):
    with pytest.raises(ValueError):
        days_in_month(2024, month)


def test_days_in_year():
    assert days_in_year(2024) == 366
    assert days_in_year(2023) == 365


def test_day_of_year():
    assert day_of_year(2023, 1, 1) == 1
    assert day_of_year(2023, 12, 31) == 365
    assert day_of_year(2024, 12, 31) == 366
    assert day_of_year(2024, 3, 1) == 61
    assert day_of_year(2023, 3, 1) == 60
    with pytest.raises(ValueError):
        day_of_year(2023, 2, 29)
    with pytest.raises(ValueError):
        day_of_year(2023, 1, 0)


def test_month_day_from_ordinal():
    assert month_day_from_ordinal(2023, 1) == (1, 1)
    assert month_day_from_ordinal(2023, 31) == (1, 31)
    assert month_day_from_ordinal(2023, 32) == (2, 1)
    assert month_day_from_ordinal(2024, 60) == (2, 29)
    assert month_day_from_ordinal(2023, 60) == (3, 1)
    assert month_day_from_ordinal(2024, 366) == (12, 31)
    assert month_day_from_ordinal(2023, 365) == (12, 31)
    for bad in (0, 366):
        with pytest.raises(ValueError):
            month_day_from_ordinal(2023, bad)
    with pytest.raises(ValueError):
        month_day_from_ordinal(2024, 367)


@pytest.mark.parametrize(
    ("ymd", "expected"),
    [
        ((1, 1, 1), 0),
        ((2024, 2, 29), 3),
        ((2000, 1, 1), 5),
        ((2023, 12, 31), 6),
        ((1970, 1, 1), 3),
        ((2024, 7, 15), 0),
        ((1901, 1, 1), 1),
        ((1601, 1, 1), 0),
        ((2400, 3, 1), 2),
        ((1700, 12, 31), 4),
    ],
)
def test_weekday(ymd, expected):
    assert weekday(*ymd) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2024-02-29", Date(2024, 2, 29)),
        ("20240229", Date(2024, 2, 29)),
        ("0001-01-01", Date(1, 1, 1)),
        ("9999-12-31", Date(9999, 12, 31)),
        ("2023-001", Date(2023, 1, 1)),
        ("0001-001", Date(1, 1, 1)),
        ("9999-365", Date(9999, 12, 31)),
        ("2024-060", Date(2024, 2, 29)),
        ("2023-365", Date(2023, 12, 31)),
        ("2024-366", Date(2024, 12, 31)),
        ("2023-04-30", Date(2023, 4, 30)),
    ],
)
def test_parse_date_valid(text, expected):
    assert parse_date(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "2023-02-29",
        "1900-02-29",
        "2023-13-01",
        "2023-00-10",
        "2023-04-31",
        "2023-01-00",
        "0000-01-01",
        "0000-001",
        "2023-366",
        "2023-000",
        "2023-1-01",
        "23-01-01",
        "2023/01/01",
        "",
        "2023-01-01 ",
    ],
)
def test_parse_date_invalid(text):
    with pytest.raises(ParseError):
        parse_date(text)


def test_parse_error_is_value_error():
    assert issubclass(ParseError, ValueError)


def test_date_isoformat_and_weekday():
    assert Date(5, 3, 7).isoformat() == "0005-03-07"
    assert parse_date("20240101").isoformat() == "2024-01-01"
    assert parse_date("2024-01-01").weekday == 0


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("00:00", Time(0, 0)),
        ("23:59:59", Time(23, 59, 59)),
        ("12:30:15.5", Time(12, 30, 15, 500000)),
        ("12:30:15.000123", Time(12, 30, 15, 123)),
        ("08:00Z", Time(8, 0, 0, 0, 0)),
        ("08:00:00+05:30", Time(8, 0, 0, 0, 330)),
        ("08:00:00-0230", Time(8, 0, 0, 0, -150)),
        ("08:00+14:00", Time(8, 0, 0, 0, 840)),
        ("08:00-14:00", Time(8, 0, 0, 0, -840)),
        ("08:00+00:59", Time(8, 0, 0, 0, 59)),
    ],
)
def test_parse_time_valid(text, expected):
    assert parse_time(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "24:00",
        "12:60",
        "12:00:60",
        "1:00",
        "12",
        "12:00:00.1234567",
        "12:00+14:01",
        "12:00+15:00",
        "12:00+05:60",
        "12:00+5",
        "12:00 Z",
        "12:00z",
    ],
)
def test_parse_time_invalid(text):
    with pytest.raises(ParseError):
        parse_time(text)


def test_time_isoformat():
    assert Time(7, 5).isoformat() == "07:05:00"
    assert Time(7, 5, 9, 250000).isoformat() == "07:05:09.250000"
    assert Time(7, 5, offset_minutes=0).isoformat() == "07:05:00Z"
    assert Time(7, 5, offset_minutes=330).isoformat() == "07:05:00+05:30"
    assert Time(7, 5, offset_minutes=-90).isoformat() == "07:05:00-01:30"
    assert Time(7, 5, offset_minutes=1).isoformat() == "07:05:00+00:01"


def test_parse_datetime():
    value = parse_datetime("2024-02-29T13:45:00+01:00")
    assert value == DateTime(Date(2024, 2, 29), Time(13, 45, 0, 0, 60))
    assert value.isoformat() == "2024-02-29T13:45:00+01:00"
    assert parse_datetime("2023-001 00:00") == DateTime(Date(2023, 1, 1), Time(0, 0))


@pytest.mark.parametrize("text", ["2024-02-29", "2024-02-29T", "2024-02-30T10:00", "2024-02-29T10:00T", "x T10:00"])
def test_parse_datetime_invalid(text):
    with pytest.raises(ParseError):
        parse_datetime(text)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("P3DT4H", Duration(days=3, hours=4)),
        ("P1Y2M3W4DT5H6M7S", Duration(1, 2, 3, 4, 5, 6, 7)),
        ("PT1M", Duration(minutes=1)),
        ("P1M", Duration(months=1)),
        ("PT1.5S", Duration(seconds=1.5)),
        ("-P2D", Duration(days=2, negative=True)),
        ("P0D", Duration()),
        ("PT36H", Duration(hours=36)),
    ],
)
def test_parse_duration_valid(text, expected):
    assert parse_duration(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "P",
        "PT",
        "P1DT",
        "3D",
        "P1H",
        "PT1D",
        "P1D2D",
        "P1M1Y",
        "PT1S1M",
        "P1",
        "PD",
        "P1.5D",
        "PT1.5M",
        "PT1..5S",
        "PT.S",
        "PT.5S",
        "PT5.S",
        "P1DTT1H",
        "P1T",
        "-PT",
        "--P1D",
    ],
)
def test_parse_duration_invalid(text):
    with pytest.raises(ParseError):
        parse_duration(text)


def test_parse_duration_error_messages():
    with pytest.raises(ParseError, match="must start with 'P'"):
        parse_duration("3D")
    with pytest.raises(ParseError, match="out-of-order unit 'Y'"):
        parse_duration("P1M1Y")
    with pytest.raises(ParseError, match="'T' without time components"):
        parse_duration("P1DT")
    with pytest.raises(ParseError, match="'T' without time components"):
        parse_duration("PT")
    with pytest.raises(ParseError, match="empty duration"):
        parse_duration("-P")
    with pytest.raises(ParseError, match="expected a number at position 3"):
        parse_duration("P1DD")


def test_parse_duration_months_vs_minutes():
    assert parse_duration("P2M") == Duration(months=2)
    assert parse_duration("PT2M") == Duration(minutes=2)
    assert parse_duration("P1MT1M") == Duration(months=1, minutes=1)
    assert parse_duration("P1Y1D") == Duration(years=1, days=1)
    assert parse_duration("P1WT1S") == Duration(weeks=1, seconds=1)


def test_values_are_immutable_and_hashable():
    import dataclasses

    for value in (Date(2024, 1, 1), Time(1, 2), DateTime(Date(2024, 1, 1), Time(1, 2)), Duration(days=1)):
        assert hash(value) == hash(dataclasses.replace(value))
        field = dataclasses.fields(value)[0].name
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(value, field, 0)


def test_duration_total_seconds():
    assert parse_duration("P1W").total_seconds() == 604800
    assert parse_duration("P1D").total_seconds() == 86400
    assert parse_duration("PT1H").total_seconds() == 3600
    assert parse_duration("PT1M").total_seconds() == 60
    assert parse_duration("PT1.25S").total_seconds() == 1.25
    assert parse_duration("P1DT2H3M4S").total_seconds() == 93784
    assert parse_duration("-PT90S").total_seconds() == -90


def test_duration_total_seconds_rejects_calendar_units():
    with pytest.raises(ValueError):
        parse_duration("P1Y").total_seconds()
    with pytest.raises(ValueError):
        parse_duration("P1M").total_seconds()


@pytest.mark.parametrize(
    ("seconds", "expected"),
    [
        (0, "PT0S"),
        (1, "PT1S"),
        (60, "PT1M"),
        (3600, "PT1H"),
        (86400, "P1D"),
        (90061, "P1DT1H1M1S"),
        (86460, "P1DT1M"),
        (-3661, "-PT1H1M1S"),
        (59, "PT59S"),
    ],
)
def test_format_duration(seconds, expected):
    assert format_duration(seconds) == expected


def test_format_parse_round_trip():
    for seconds in (1, 59, 61, 3599, 3601, 86399, 90061, 200000, -7200):
        assert parse_duration(format_duration(seconds)).total_seconds() == seconds
