"""Hit/miss accounting shared by the cache implementations."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class CacheStats:
    """Counters describing cache usage."""

    hits: int = 0
    misses: int = 0
    evictions: int = 0
    expirations: int = 0

    @property
    def requests(self) -> int:
        """Total lookups (hits plus misses)."""
        return self.hits + self.misses

    @property
    def hit_rate(self) -> float:
        """Fraction of lookups that were hits; 0.0 before any lookup."""
        if self.requests == 0:
            return 0.0
        return self.hits / self.requests

    def reset(self) -> None:
        """Set every counter back to zero."""
        self.hits = self.misses = self.evictions = self.expirations = 0


def validate_capacity(capacity: int) -> int:
    """Return ``capacity`` if it is an int >= 1, else raise.

    Raises TypeError for non-integers (including bool) and ValueError for
    values below 1.
    """
    if not isinstance(capacity, int) or isinstance(capacity, bool):
        raise TypeError("capacity must be an integer")
    if capacity < 1:
        raise ValueError("capacity must be at least 1")
    return capacity
