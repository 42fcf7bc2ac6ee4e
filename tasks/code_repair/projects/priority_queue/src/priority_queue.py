"""Addressable binary min-heap priority queue.

Items are hashable and unique within a queue.  Lower priority values come out
first; items with equal priority come out in the order they were first
pushed (FIFO), even after their priority has been changed.
"""

from __future__ import annotations

import itertools
from typing import Dict, Generic, Hashable, Iterable, List, Tuple, TypeVar

K = TypeVar("K", bound=Hashable)


class EmptyQueueError(IndexError):
    """Raised when popping or peeking an empty queue."""


class PriorityQueue(Generic[K]):
    """Min-heap with decrease-key, removal and stable ordering of ties."""

    def __init__(self, items: Iterable[Tuple[K, float]] = ()) -> None:
        """Create a queue, pushing each ``(item, priority)`` pair in order."""
        # Each heap entry is [priority, sequence, item].
        self._heap: List[list] = []
        self._index: Dict[K, int] = {}
        self._seq = itertools.count()
        for item, priority in items:
            self.push(item, priority)

    # -- internal helpers -------------------------------------------------
    def _less(self, i: int, j: int) -> bool:
        a, b = self._heap[i], self._heap[j]
        return (a[0], a[1]) < (b[0], b[1])

    def _swap(self, i: int, j: int) -> None:
        heap = self._heap
        heap[i], heap[j] = heap[j], heap[i]
        self._index[heap[i][2]] = i
        self._index[heap[j][2]] = j

    def _sift_up(self, pos: int) -> None:
        while pos > 0:
            parent = (pos - 1) // 2
            if not self._less(pos, parent):
                break
            self._swap(pos, parent)
            pos = parent

    def _sift_down(self, pos: int) -> None:
        size = len(self._heap)
        while True:
            left = 2 * pos + 1
            right = left + 1
            smallest = pos
            if left < size and self._less(left, smallest):
                smallest = left
            if right < size and self._less(right, smallest):
                smallest = right
            if smallest == pos:
                return
            self._swap(pos, smallest)
            pos = smallest

    def _remove_at(self, pos: int) -> list:
        self._swap(pos, len(self._heap) - 1)
        entry = self._heap.pop()
        del self._index[entry[2]]
        if pos < len(self._heap):
            self._sift_down(pos)
            self._sift_up(pos)
        return entry

    # -- public API ---------------------------------------------------------
    def push(self, item: K, priority: float) -> None:
        """Add ``item``; raises ``ValueError`` if it is already queued."""
        if item in self._index:
            raise ValueError(f"{item!r} is already in the queue")
        self._heap.append([priority, next(self._seq), item])
        self._index[item] = len(self._heap) - 1
        self._sift_up(len(self._heap) - 1)

    def pop(self) -> Tuple[K, float]:
        """Remove and return the ``(item, priority)`` with lowest priority."""
        if not self._heap:
            raise EmptyQueueError("pop from an empty priority queue")
        priority, _, item = self._remove_at(0)
        return item, priority

    def peek(self) -> Tuple[K, float]:
        """Return the lowest ``(item, priority)`` without removing it."""
        if not self._heap:
            raise EmptyQueueError("peek at an empty priority queue")
        priority, _, item = self._heap[0]
        return item, priority

    def priority(self, item: K) -> float:
        """Return the priority of ``item``; ``KeyError`` if not queued."""
        return self._heap[self._index[item]][0]

    def decrease_key(self, item: K, priority: float) -> None:
        """Lower the priority of ``item``.

        Raises ``KeyError`` if the item is not queued and ``ValueError`` if
        ``priority`` is greater than the current priority.  Setting an equal
        priority is allowed and changes nothing.
        """
        pos = self._index[item]
        if priority > self._heap[pos][0]:
            raise ValueError("new priority is greater than the current one")
        self._heap[pos][0] = priority
        self._sift_up(pos)

    def update(self, item: K, priority: float) -> None:
        """Set the priority of ``item`` in either direction, pushing if new."""
        if item in self._index:
            pos = self._index[item]
            self._heap[pos][0] = priority
            self._sift_up(pos)
            self._sift_down(self._index[item])
        else:
            self.push(item, priority)

    def remove(self, item: K) -> float:
        """Remove ``item`` and return its priority; ``KeyError`` if absent."""
        entry = self._remove_at(self._index[item])
        return entry[0]

    def nsmallest(self, n: int) -> List[Tuple[K, float]]:
        """Return the ``n`` first ``(item, priority)`` pairs in pop order
        without modifying the queue.  ``n`` larger than the size is fine;
        a negative ``n`` raises ``ValueError``."""
        if n < 0:
            raise ValueError("n must be non-negative")
        clone = self.copy()
        return [clone.pop() for _ in range(min(n, len(clone)))]

    def copy(self) -> "PriorityQueue[K]":
        """Return an independent queue with the same contents and tie order."""
        clone: PriorityQueue[K] = PriorityQueue()
        for entry in sorted(self._heap, key=lambda e: e[1]):
            clone.push(entry[2], entry[0])
        return clone

    def merge(self, other: "PriorityQueue[K]") -> "PriorityQueue[K]":
        """Return a new queue holding the items of both queues.

        For equal priorities, items of ``self`` come before items of
        ``other``.  Raises ``ValueError`` if the queues share an item.
        """
        merged = self.copy()
        for entry in sorted(other._heap, key=lambda e: e[1]):
            merged.push(entry[2], entry[0])
        return merged

    def drain(self) -> List[K]:
        """Pop every item, returning them in priority order."""
        return [self.pop()[0] for _ in range(len(self))]

    def is_valid_heap(self) -> bool:
        """Check the heap invariant and index consistency (for debugging)."""
        for pos, entry in enumerate(self._heap):
            if self._index.get(entry[2]) != pos:
                return False
            if pos > 0 and self._less(pos, (pos - 1) // 2):
                return False
        return len(self._index) == len(self._heap)

    def __len__(self) -> int:
        return len(self._heap)

    def __bool__(self) -> bool:
        return bool(self._heap)

    def __contains__(self, item: object) -> bool:
        return item in self._index

    def __repr__(self) -> str:
        return f"PriorityQueue({self.nsmallest(len(self))!r})"
