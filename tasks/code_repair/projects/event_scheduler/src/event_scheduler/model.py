"""Value types: events and working hours."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import FrozenSet, Optional, Tuple

MIN_PRIORITY = 0
MAX_PRIORITY = 9


@dataclass(frozen=True)
class Event:
    """A named block of time.  Higher ``priority`` values are more important."""

    name: str
    start: dt.datetime
    duration: dt.timedelta
    priority: int = 0

    def __post_init__(self) -> None:
        if not self.name.strip():
            raise ValueError("event name must not be blank")
        if self.duration <= dt.timedelta(0):
            raise ValueError("duration must be positive")
        if not MIN_PRIORITY <= self.priority <= MAX_PRIORITY:
            raise ValueError(f"priority must be between {MIN_PRIORITY} and {MAX_PRIORITY}")

    @property
    def end(self) -> dt.datetime:
        """Exclusive end time."""
        return self.start + self.duration

    def overlaps(self, other: "Event") -> bool:
        """True if the two events share any time; touching events do not overlap."""
        return self.start < other.end and other.start < self.end

    def contains(self, moment: dt.datetime) -> bool:
        """True if ``moment`` falls in ``[start, end)``."""
        return self.start <= moment < self.end


@dataclass(frozen=True)
class WorkingHours:
    """Daily working window on the given weekdays (Monday=0)."""

    start: dt.time = dt.time(9)
    end: dt.time = dt.time(17)
    weekdays: FrozenSet[int] = field(default_factory=lambda: frozenset(range(5)))

    def __post_init__(self) -> None:
        if self.start >= self.end:
            raise ValueError("working hours must start before they end")
        if any(not 0 <= day <= 6 for day in self.weekdays):
            raise ValueError("weekdays must be in 0..6")

    def is_working_day(self, day: dt.date) -> bool:
        return day.weekday() in self.weekdays

    def window(self, day: dt.date) -> Optional[Tuple[dt.datetime, dt.datetime]]:
        """The ``(start, end)`` datetimes of ``day``'s window, or ``None``."""
        if not self.is_working_day(day):
            return None
        return dt.datetime.combine(day, self.start), dt.datetime.combine(day, self.end)
