"""A set of integers represented as sorted, disjoint, half-open intervals ``[start, end)``."""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Iterator

Interval = tuple[int, int]


def _check(start: int, end: int) -> None:
    """Validate interval bounds: both ints (not bool) and ``start <= end``."""
    for value in (start, end):
        if not isinstance(value, int) or isinstance(value, bool):
            raise TypeError(f"interval bounds must be integers, got {value!r}")
    if start > end:
        raise ValueError(f"interval start {start} is greater than end {end}")


class IntervalSet:
    """A mutable set of integers stored as merged half-open intervals.

    Intervals that overlap or touch (``[1, 3)`` and ``[3, 5)``) are merged into
    one. Empty intervals (``start == end``) are ignored.
    """

    def __init__(self, intervals: Iterable[Interval] = ()) -> None:
        self._intervals: list[Interval] = []
        for start, end in intervals:
            self.add(start, end)

    def add(self, start: int, end: int) -> None:
        """Add ``[start, end)``, merging with any overlapping or adjacent intervals.

        Raises TypeError for non-integer bounds and ValueError if start > end.
        """
        _check(start, end)
        if start == end:
            return
        kept: list[Interval] = []
        for s, e in self._intervals:
            if e < start or s > end:
                kept.append((s, e))
            else:
                start = min(start, s)
                end = max(end, e)
        kept.append((start, end))
        kept.sort()
        self._intervals = kept

    def remove(self, start: int, end: int) -> None:
        """Remove ``[start, end)`` from the set, splitting intervals as needed.

        Removing a range that is not present is a no-op. Raises like :meth:`add`.
        """
        _check(start, end)
        if start == end:
            return
        result: list[Interval] = []
        for s, e in self._intervals:
            if s < start:
                result.append((s, min(e, start)))
            if e > end:
                result.append((max(s, end), e))
        self._intervals = result

    def find(self, point: int) -> Interval | None:
        """Return the interval containing ``point``, or None."""
        index = bisect.bisect_right(self._intervals, (point, math.inf)) - 1
        found = index >= 0 and point < self._intervals[index][1]
        return self._intervals[index] if found else None

    def __contains__(self, point: int) -> bool:
        return self.find(point) is not None

    def overlaps(self, start: int, end: int) -> bool:
        """Return True if any integer in ``[start, end)`` is in the set."""
        _check(start, end)
        return any(s < end and start < e for s, e in self._intervals)

    def total_length(self) -> int:
        """Return the number of integers contained in the set."""
        return sum(e - s for s, e in self._intervals)

    def span(self) -> Interval:
        """Return ``(min, max_end)`` covering the whole set.

        Raises ValueError when the set is empty.
        """
        if not self._intervals:
            raise ValueError("span of an empty IntervalSet")
        return self._intervals[0][0], self._intervals[-1][1]

    def gaps(self, lo: int, hi: int) -> list[Interval]:
        """Return the maximal sub-intervals of ``[lo, hi)`` not covered by the set."""
        _check(lo, hi)
        result: list[Interval] = []
        cursor = lo
        for s, e in self._intervals:
            if s >= hi:
                break
            if s > cursor:
                result.append((cursor, s))
            cursor = max(cursor, e)
        if cursor < hi:
            result.append((cursor, hi))
        return result

    def complement(self, lo: int, hi: int) -> IntervalSet:
        """Return the set of integers in ``[lo, hi)`` that are not in this set."""
        return IntervalSet(self.gaps(lo, hi))

    def union(self, other: IntervalSet) -> IntervalSet:
        """Return a new set with the integers of both sets."""
        result = IntervalSet(self)
        for start, end in other:
            result.add(start, end)
        return result

    def difference(self, other: IntervalSet) -> IntervalSet:
        """Return a new set with the integers of this set that are not in ``other``."""
        result = IntervalSet(self)
        for start, end in other:
            result.remove(start, end)
        return result

    def intersection(self, other: IntervalSet) -> IntervalSet:
        """Return a new set with the integers present in both sets."""
        a, b = self._intervals, list(other)
        i = j = 0
        out: list[Interval] = []
        while i < len(a) and j < len(b):
            lo = max(a[i][0], b[j][0])
            hi = min(a[i][1], b[j][1])
            if lo < hi:
                out.append((lo, hi))
            if a[i][1] < b[j][1]:
                i += 1
            else:
                j += 1
        result = IntervalSet()
        result._intervals = out
        return result

    def __iter__(self) -> Iterator[Interval]:
        return iter(list(self._intervals))

    def __len__(self) -> int:
        """Number of disjoint intervals (not the number of integers)."""
        return len(self._intervals)

    def __bool__(self) -> bool:
        return bool(self._intervals)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, IntervalSet):
            return NotImplemented
        return self._intervals == other._intervals

    def __repr__(self) -> str:
        return f"IntervalSet({self._intervals!r})"
