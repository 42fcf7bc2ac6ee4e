"""Simple calendar recurrence rules (a small subset of iCalendar RRULE).

Supported frequencies are daily, weekly and monthly, with an ``interval``,
an optional ``count`` or ``until`` limit (not both) and, for weekly rules, a
set of weekdays.  Monthly rules keep the start date's day of month and clamp
it to the last day of shorter months (Jan 31 -> Feb 29 -> Mar 31 ...).
"""

from __future__ import annotations

import calendar
import datetime as dt
from dataclasses import dataclass
from typing import Iterator, List, Optional, Tuple

DAILY = "DAILY"
WEEKLY = "WEEKLY"
MONTHLY = "MONTHLY"
FREQUENCIES = (DAILY, WEEKLY, MONTHLY)
WEEKDAY_CODES = ("MO", "TU", "WE", "TH", "FR", "SA", "SU")


class RecurrenceError(ValueError):
    """Raised for invalid recurrence rules."""


def days_in_month(year: int, month: int) -> int:
    """Number of days in ``month`` of ``year`` (leap years respected)."""
    return calendar.monthrange(year, month)[1]


def add_months(date: dt.date, months: int, day: Optional[int] = None) -> dt.date:
    """Shift ``date`` by ``months`` (may be negative).

    The result uses ``day`` (default: ``date.day``) clamped to the length of
    the target month.
    """
    index = date.year * 12 + (date.month - 1) + months
    year, month0 = divmod(index, 12)
    wanted = date.day if day is None else day
    return dt.date(year, month0 + 1, min(wanted, days_in_month(year, month0 + 1)))


@dataclass(frozen=True)
class Rule:
    """A recurrence rule; occurrences never precede ``start``."""

    freq: str
    start: dt.date
    interval: int = 1
    count: Optional[int] = None
    until: Optional[dt.date] = None
    by_weekday: Tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.freq not in FREQUENCIES:
            raise RecurrenceError(f"unsupported frequency {self.freq!r}")
        if self.interval < 1:
            raise RecurrenceError("interval must be at least 1")
        if self.count is not None and self.until is not None:
            raise RecurrenceError("count and until are mutually exclusive")
        if self.count is not None and self.count < 1:
            raise RecurrenceError("count must be at least 1")
        if self.until is not None and self.until < self.start:
            raise RecurrenceError("until must not be before start")
        if self.by_weekday and self.freq != WEEKLY:
            raise RecurrenceError("by_weekday is only supported for weekly rules")
        if any(not 0 <= day <= 6 for day in self.by_weekday):
            raise RecurrenceError("weekdays must be in 0..6 (Monday=0)")
        object.__setattr__(self, "by_weekday", tuple(sorted(set(self.by_weekday))))


def _candidates(rule: Rule) -> Iterator[dt.date]:
    """Unbounded ascending stream of dates matching the rule's pattern."""
    step = 0
    while True:
        if rule.freq == DAILY:
            yield rule.start + dt.timedelta(days=step * rule.interval)
        elif rule.freq == MONTHLY:
            yield add_months(rule.start, step * rule.interval)
        elif rule.by_weekday:
            week_start = rule.start - dt.timedelta(days=rule.start.weekday())
            week = week_start + dt.timedelta(weeks=step * rule.interval)
            for day in rule.by_weekday:
                date = week + dt.timedelta(days=day)
                if date >= rule.start:
                    yield date
        else:
            yield rule.start + dt.timedelta(weeks=step * rule.interval)
        step += 1


def occurrences(rule: Rule) -> Iterator[dt.date]:
    """Iterate over the occurrences of ``rule`` in ascending order.

    The iterator is infinite when the rule has neither ``count`` nor
    ``until``; ``until`` is inclusive.
    """
    produced = 0
    for date in _candidates(rule):
        if rule.until is not None and date > rule.until:
            return
        if rule.count is not None and produced >= rule.count:
            return
        produced += 1
        yield date


def take(rule: Rule, n: int) -> List[dt.date]:
    """Return the first ``n`` occurrences (fewer if the rule ends earlier)."""
    if n < 0:
        raise ValueError("n must be non-negative")
    result: List[dt.date] = []
    for date in occurrences(rule):
        if len(result) == n:
            break
        result.append(date)
    return result


def between(rule: Rule, after: dt.date, before: dt.date, inclusive: bool = True) -> List[dt.date]:
    """Occurrences in the range from ``after`` to ``before``.

    Both bounds are included when ``inclusive`` is true and excluded
    otherwise.  Raises ``ValueError`` if ``after`` is later than ``before``.
    """
    if after > before:
        raise ValueError("after must not be later than before")
    result: List[dt.date] = []
    for date in occurrences(rule):
        if date > before or (date == before and not inclusive):
            break
        if date > after or (date == after and inclusive):
            result.append(date)
    return result


def next_after(rule: Rule, date: dt.date) -> Optional[dt.date]:
    """The first occurrence strictly after ``date``, or ``None`` if none."""
    return next((occurrence for occurrence in occurrences(rule) if occurrence > date), None)


def parse_rule(text: str, start: dt.date) -> Rule:
    """Parse ``FREQ=WEEKLY;INTERVAL=2;BYDAY=MO,WE;COUNT=4`` style text.

    Keys are case-insensitive; ``UNTIL`` uses ``YYYYMMDD``.  Unknown keys,
    duplicate keys, malformed values and a missing ``FREQ`` raise
    :class:`RecurrenceError`.
    """
    fields = {}
    for part in filter(None, text.strip().split(";")):
        key, eq, value = part.partition("=")
        key = key.strip().upper()
        if not eq or not value.strip():
            raise RecurrenceError(f"malformed field {part!r}")
        if key in fields:
            raise RecurrenceError(f"duplicate field {key}")
        fields[key] = value.strip().upper()
    if "FREQ" not in fields:
        raise RecurrenceError("FREQ is required")
    kwargs = {}
    try:
        for key, value in fields.items():
            if key == "FREQ":
                continue
            if key == "INTERVAL":
                kwargs["interval"] = int(value)
            elif key == "COUNT":
                kwargs["count"] = int(value)
            elif key == "UNTIL":
                kwargs["until"] = dt.datetime.strptime(value, "%Y%m%d").date()
            elif key == "BYDAY":
                kwargs["by_weekday"] = tuple(WEEKDAY_CODES.index(code.strip()) for code in value.split(","))
            else:
                raise RecurrenceError(f"unknown field {key}")
    except RecurrenceError:
        raise
    except ValueError as exc:
        raise RecurrenceError(f"invalid value: {exc}") from None
    return Rule(fields["FREQ"], start, **kwargs)
