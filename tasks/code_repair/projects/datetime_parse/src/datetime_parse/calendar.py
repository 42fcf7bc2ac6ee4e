"""Proleptic Gregorian calendar helpers."""

MIN_YEAR = 1

_DAYS_IN_MONTH = (31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)


def is_leap_year(year: int) -> bool:
    """Return True if ``year`` is a Gregorian leap year.

    Years divisible by 4 are leap years, except centuries, which are leap
    years only when divisible by 400 (1900 is not, 2000 is).
    """
    return year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)


def days_in_month(year: int, month: int) -> int:
    """Return the number of days in ``month`` (1-12) of ``year``.

    Raises ValueError if ``month`` is outside 1..12.
    """
    if month < 1 or month > 12:
        raise ValueError(f"month out of range: {month}")
    if month == 2 and is_leap_year(year):
        return 29
    return _DAYS_IN_MONTH[month - 1]


def days_in_year(year: int) -> int:
    """Return 366 for leap years and 365 otherwise."""
    return 366 if is_leap_year(year) else 365


def day_of_year(year: int, month: int, day: int) -> int:
    """Return the 1-based ordinal day within the year (1 Jan -> 1).

    Raises ValueError if ``day`` is not valid for the given month.
    """
    if day < 1 or day > days_in_month(year, month):
        raise ValueError(f"day out of range: {day}")
    return sum(days_in_month(year, m) for m in range(1, month)) + day


def month_day_from_ordinal(year: int, ordinal: int) -> tuple[int, int]:
    """Convert a 1-based day-of-year into ``(month, day)``.

    Raises ValueError if ``ordinal`` is outside the year (1..365 or 1..366).
    """
    if ordinal < 1 or ordinal > days_in_year(year):
        raise ValueError(f"ordinal day out of range: {ordinal}")
    month = 1
    while ordinal > days_in_month(year, month):
        ordinal -= days_in_month(year, month)
        month += 1
    return month, ordinal


def weekday(year: int, month: int, day: int) -> int:
    """Return the day of the week, Monday == 0 ... Sunday == 6."""
    prior = year - 1
    days_before_year = prior * 365 + prior // 4 - prior // 100 + prior // 400
    ordinal = days_before_year + day_of_year(year, month, day)
    # Day 1 (0001-01-01) was a Monday.
    return (ordinal - 1) % 7
