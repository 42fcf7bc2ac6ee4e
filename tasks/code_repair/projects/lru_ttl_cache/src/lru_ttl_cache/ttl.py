"""Cache whose entries expire after a time-to-live, with an injectable clock."""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any

from lru_ttl_cache.stats import CacheStats, validate_capacity


def _validate_ttl(ttl: float) -> float:
    if ttl <= 0:
        raise ValueError("ttl must be positive")
    return ttl


class TTLCache:
    """Entries expire ``ttl`` seconds after they were last stored.

    An entry stored at time ``t`` with ttl ``d`` is live while ``clock() < t + d``
    and expired from ``t + d`` on. When ``capacity`` is set and the cache is
    full, expired entries are purged first; if it is still full, the entry
    closest to expiry is evicted (the oldest one on ties).
    """

    def __init__(
        self,
        ttl: float,
        capacity: int | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.ttl = _validate_ttl(ttl)
        self.capacity = None if capacity is None else validate_capacity(capacity)
        self.stats = CacheStats()
        self._clock = clock
        self._data: OrderedDict[Hashable, tuple[Any, float]] = OrderedDict()

    def put(self, key: Hashable, value: Any, ttl: float | None = None) -> None:
        """Store ``value`` for ``ttl`` seconds (default: the cache ttl)."""
        lifetime = self.ttl if ttl is None else _validate_ttl(ttl)
        now = self._clock()
        self._data.pop(key, None)
        if self.capacity is not None and len(self._data) >= self.capacity:
            self._purge(now)
            if len(self._data) >= self.capacity:
                victim = min(self._data, key=lambda k: self._data[k][1])
                del self._data[victim]
                self.stats.evictions += 1
        self._data[key] = (value, now + lifetime)

    def _live(self, key: Hashable, now: float) -> bool:
        """Return True if ``key`` is present and unexpired; drop it if expired."""
        entry = self._data.get(key)
        if entry is None:
            return False
        if now >= entry[1]:
            del self._data[key]
            self.stats.expirations += 1
        return key in self._data

    def get(self, key: Hashable, default: Any = None) -> Any:
        """Return the live value (a hit) or ``default`` (a miss, removing an expired entry)."""
        if self._live(key, self._clock()):
            self.stats.hits += 1
            return self._data[key][0]
        self.stats.misses += 1
        return default

    def ttl_remaining(self, key: Hashable) -> float | None:
        """Seconds until ``key`` expires, or None if it is absent or expired."""
        now = self._clock()
        if not self._live(key, now):
            return None
        return self._data[key][1] - now

    def touch(self, key: Hashable) -> bool:
        """Restart a live entry's full cache ttl; return False if absent or expired."""
        now = self._clock()
        if not self._live(key, now):
            return False
        value, _ = self._data.pop(key)
        self._data[key] = (value, now + self.ttl)
        return True

    def _purge(self, now: float) -> int:
        expired = [key for key, (_, expires) in self._data.items() if expires <= now]
        for key in expired:
            del self._data[key]
        self.stats.expirations += len(expired)
        return len(expired)

    def purge(self) -> int:
        """Remove all expired entries and return how many were removed."""
        return self._purge(self._clock())

    def __contains__(self, key: Hashable) -> bool:
        return self._live(key, self._clock())

    def __len__(self) -> int:
        """Number of live (unexpired) entries."""
        now = self._clock()
        return sum(1 for _, expires in self._data.values() if now < expires)
