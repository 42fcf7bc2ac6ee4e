"""Parsers for calendar dates, times of day and combined datetimes."""

from __future__ import annotations

import re
from dataclasses import dataclass

from datetime_parse.calendar import MIN_YEAR, days_in_month, month_day_from_ordinal, weekday
from datetime_parse.errors import ParseError

_EXTENDED_DATE = re.compile(r"(\d{4})-(\d{2})-(\d{2})")
_BASIC_DATE = re.compile(r"(\d{4})(\d{2})(\d{2})")
_ORDINAL_DATE = re.compile(r"(\d{4})-(\d{3})")
_TIME = re.compile(r"(\d{2}):(\d{2})(?::(\d{2})(?:\.(\d{1,6}))?)?")
_OFFSET = re.compile(r"([+-])(\d{2}):?(\d{2})")

MAX_OFFSET_MINUTES = 14 * 60


@dataclass(frozen=True)
class Date:
    """A calendar date."""

    year: int
    month: int
    day: int

    def isoformat(self) -> str:
        """Return the date as ``YYYY-MM-DD``."""
        return f"{self.year:04d}-{self.month:02d}-{self.day:02d}"

    @property
    def weekday(self) -> int:
        """Day of the week, Monday == 0."""
        return weekday(self.year, self.month, self.day)


@dataclass(frozen=True)
class Time:
    """A time of day with optional UTC offset (in minutes; None means local time)."""

    hour: int
    minute: int
    second: int = 0
    microsecond: int = 0
    offset_minutes: int | None = None

    def isoformat(self) -> str:
        """Return ``HH:MM:SS[.ffffff][Z|+HH:MM]``."""
        text = f"{self.hour:02d}:{self.minute:02d}:{self.second:02d}"
        if self.microsecond:
            text += f".{self.microsecond:06d}"
        if self.offset_minutes is None:
            return text
        if self.offset_minutes == 0:
            return text + "Z"
        sign = "+" if self.offset_minutes > 0 else "-"
        hours, minutes = divmod(abs(self.offset_minutes), 60)
        return f"{text}{sign}{hours:02d}:{minutes:02d}"


@dataclass(frozen=True)
class DateTime:
    """A date combined with a time of day."""

    date: Date
    time: Time

    def isoformat(self) -> str:
        """Return ``<date>T<time>``."""
        return f"{self.date.isoformat()}T{self.time.isoformat()}"


def _make_date(year: int, month: int, day: int, text: str) -> Date:
    if year < MIN_YEAR:
        raise ParseError(f"year out of range in {text!r}")
    if month < 1 or month > 12:
        raise ParseError(f"month out of range in {text!r}")
    if day < 1 or day > days_in_month(year, month):
        raise ParseError(f"day out of range in {text!r}")
    return Date(year, month, day)


def parse_date(text: str) -> Date:
    """Parse a date in one of the forms ``YYYY-MM-DD``, ``YYYYMMDD`` or ``YYYY-DDD``.

    ``YYYY-DDD`` is an ordinal date (day of year). Raises ParseError for any
    malformed text or out-of-range component (e.g. ``2023-02-29``).
    """
    for pattern in (_EXTENDED_DATE, _BASIC_DATE):
        match = pattern.fullmatch(text)
        if match:
            year, month, day = (int(group) for group in match.groups())
            return _make_date(year, month, day, text)
    match = _ORDINAL_DATE.fullmatch(text)
    if match:
        year, ordinal = int(match.group(1)), int(match.group(2))
        if year < MIN_YEAR:
            raise ParseError(f"year out of range in {text!r}")
        try:
            month, day = month_day_from_ordinal(year, ordinal)
        except ValueError as exc:
            raise ParseError(f"ordinal day out of range in {text!r}") from exc
        return Date(year, month, day)
    raise ParseError(f"invalid date: {text!r}")


def _parse_offset(text: str, full: str) -> int | None:
    if text == "":
        return None
    if text == "Z":
        return 0
    match = _OFFSET.fullmatch(text)
    if not match:
        raise ParseError(f"invalid UTC offset in {full!r}")
    sign, hours, minutes = match.group(1), int(match.group(2)), int(match.group(3))
    if minutes >= 60:
        raise ParseError(f"offset minutes out of range in {full!r}")
    total = hours * 60 + minutes
    if total > MAX_OFFSET_MINUTES:
        raise ParseError(f"offset out of range in {full!r}")
    return -total if sign == "-" else total


def parse_time(text: str) -> Time:
    """Parse ``HH:MM[:SS[.ffffff]]`` followed by an optional ``Z`` or ``±HH[:]MM`` offset.

    Hours must be 0-23, minutes and seconds 0-59, and offsets at most 14:00.
    A fractional part of 1-6 digits is scaled to microseconds (``.5`` ->
    500000). Raises ParseError on malformed or out-of-range input.
    """
    match = _TIME.match(text)
    if not match:
        raise ParseError(f"invalid time: {text!r}")
    hour, minute = int(match.group(1)), int(match.group(2))
    second = int(match.group(3)) if match.group(3) else 0
    fraction = match.group(4) or ""
    microsecond = int(fraction.ljust(6, "0")) if fraction else 0
    if hour > 23:
        raise ParseError(f"hour out of range in {text!r}")
    if minute > 59:
        raise ParseError(f"minute out of range in {text!r}")
    if second > 59:
        raise ParseError(f"second out of range in {text!r}")
    offset = _parse_offset(text[match.end():], text)
    return Time(hour, minute, second, microsecond, offset)


def parse_datetime(text: str) -> DateTime:
    """Parse ``<date>T<time>`` (a single space is also accepted as separator).

    The date and time parts follow :func:`parse_date` and :func:`parse_time`.
    Raises ParseError when the separator is missing or either part is invalid.
    """
    for separator in ("T", " "):
        if text.count(separator) == 1:
            date_text, time_text = text.split(separator)
            return DateTime(parse_date(date_text), parse_time(time_text))
    raise ParseError(f"invalid datetime: {text!r}")
