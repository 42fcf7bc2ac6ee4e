"""The :class:`Scheduler` keeps a calendar of non-conflicting events."""

from __future__ import annotations

import datetime as dt
from typing import Dict, List, Optional, Tuple

from .model import Event, WorkingHours

Slot = Tuple[dt.datetime, dt.datetime]


class ConflictError(Exception):
    """Raised when an event collides with events of equal or higher priority."""

    def __init__(self, event: Event, conflicts: List[Event]) -> None:
        names = ", ".join(c.name for c in conflicts)
        super().__init__(f"{event.name!r} conflicts with {names}")
        self.event = event
        self.conflicts = conflicts


class Scheduler:
    """A calendar of uniquely named events."""

    def __init__(self, hours: Optional[WorkingHours] = None) -> None:
        self.hours = hours if hours is not None else WorkingHours()
        self._events: Dict[str, Event] = {}

    def __len__(self) -> int:
        return len(self._events)

    def get(self, name: str) -> Event:
        """Return the event called ``name``; ``KeyError`` if unknown."""
        return self._events[name]

    def conflicts_with(self, event: Event) -> List[Event]:
        """Existing events (other than ``event`` itself) overlapping ``event``,
        sorted by start time then name."""
        found = [e for e in self._events.values() if e.name != event.name and e.overlaps(event)]
        return sorted(found, key=lambda e: (e.start, e.name))

    def add(self, event: Event, force: bool = False) -> List[Event]:
        """Add ``event`` and return the events it displaced.

        Overlapping events with a *lower* priority are removed (displaced).
        If any overlapping event has an equal or higher priority,
        :class:`ConflictError` is raised and nothing changes.  With
        ``force=True`` the event is added regardless and nothing is
        displaced.  Duplicate names raise ``ValueError``.
        """
        if event.name in self._events:
            raise ValueError(f"duplicate event name {event.name!r}")
        displaced: List[Event] = []
        if not force:
            conflicts = self.conflicts_with(event)
            blocking = [c for c in conflicts if c.priority >= event.priority]
            if blocking:
                raise ConflictError(event, blocking)
            for victim in conflicts:
                del self._events[victim.name]
            displaced = conflicts
        self._events[event.name] = event
        return displaced

    def remove(self, name: str) -> Event:
        """Remove and return the event called ``name``; ``KeyError`` if unknown."""
        return self._events.pop(name)

    def _sorted(self) -> List[Event]:
        return sorted(self._events.values(), key=lambda e: (e.start, -e.priority, e.name))

    def events_on(self, day: dt.date) -> List[Event]:
        """Events overlapping the calendar day ``day`` (midnight to midnight),
        ordered by start, then higher priority first, then name."""
        day_start = dt.datetime.combine(day, dt.time())
        day_end = day_start + dt.timedelta(days=1)
        return [e for e in self._sorted() if e.start < day_end and e.end > day_start]

    def all_conflicts(self) -> List[Tuple[str, str]]:
        """All pairs of overlapping events as ``(earlier, later)`` name pairs,
        in chronological order (possible only for events added with ``force``)."""
        events = self._sorted()
        pairs: List[Tuple[str, str]] = []
        for i, first in enumerate(events):
            for second in events[i + 1 :]:
                if second.start >= first.end:
                    break
                pairs.append((first.name, second.name))
        return pairs

    def free_slots(self, day: dt.date, min_duration: dt.timedelta = dt.timedelta(0)) -> List[Slot]:
        """Free ``(start, end)`` intervals inside the working window of ``day``.

        Events are clipped to the window; slots shorter than ``min_duration``
        are omitted.  Non-working days have no free slots.
        """
        window = self.hours.window(day)
        if window is None:
            return []
        win_start, win_end = window
        slots: List[Slot] = []
        cursor = win_start
        for event in self._sorted():
            start = max(event.start, win_start)
            end = min(event.end, win_end)
            if start >= end:
                continue  # entirely outside the window
            if start > cursor:
                slots.append((cursor, start))
            cursor = max(cursor, end)
        if cursor < win_end:
            slots.append((cursor, win_end))
        return [(s, e) for s, e in slots if e - s >= min_duration]

    def find_slot(
        self, duration: dt.timedelta, after: dt.datetime, max_days: int = 14
    ) -> Optional[dt.datetime]:
        """Earliest start time at or after ``after`` where ``duration`` fits in
        free working time, searching ``max_days`` days starting with
        ``after``'s date.  Returns ``None`` if nothing fits."""
        if duration <= dt.timedelta(0):
            raise ValueError("duration must be positive")
        starts = (
            max(start, after)
            for offset in range(max_days)
            for start, end in self.free_slots(after.date() + dt.timedelta(days=offset))
            if end - max(start, after) >= duration
        )
        return next(starts, None)

    def utilization(self, day: dt.date) -> float:
        """Fraction of ``day``'s working window that is booked (0.0 on days off)."""
        window = self.hours.window(day)
        if window is None:
            return 0.0
        total = window[1] - window[0]
        free = sum((e - s for s, e in self.free_slots(day)), dt.timedelta(0))
        return (total - free) / total
