"""Least-recently-used cache with a fixed capacity."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any

from lru_ttl_cache.stats import CacheStats, validate_capacity

_MISSING = object()


class LRUCache:
    """A mapping that keeps at most ``capacity`` items, evicting the least recently used.

    ``get`` and ``put`` mark an entry as most recently used; ``peek`` and
    ``in`` do not. ``on_evict(key, value)`` is called for every capacity
    eviction (not for explicit ``pop``).
    """

    def __init__(self, capacity: int, on_evict: Callable[[Hashable, Any], None] | None = None) -> None:
        self.capacity = validate_capacity(capacity)
        self.stats = CacheStats()
        self._on_evict = on_evict
        self._data: OrderedDict[Hashable, Any] = OrderedDict()

    def get(self, key: Hashable, default: Any = None) -> Any:
        """Return the cached value (recording a hit) or ``default`` (recording a miss)."""
        if key in self._data:
            self._data.move_to_end(key)
            self.stats.hits += 1
            return self._data[key]
        self.stats.misses += 1
        return default

    def peek(self, key: Hashable) -> Any:
        """Return the value without updating recency or stats; KeyError if absent."""
        return self._data[key]

    def put(self, key: Hashable, value: Any) -> None:
        """Insert or update ``key`` as most recently used, evicting if over capacity."""
        if key in self._data:
            self._data.move_to_end(key)
        self._data[key] = value
        self._shrink_to(self.capacity)

    def get_or_set(self, key: Hashable, factory: Callable[[], Any]) -> Any:
        """Return the cached value, or compute it with ``factory()``, store and return it."""
        value = self.get(key, _MISSING)
        if value is _MISSING:
            value = factory()
            self.put(key, value)
        return value

    def pop(self, key: Hashable, default: Any = _MISSING) -> Any:
        """Remove and return ``key``'s value; KeyError if absent and no default given."""
        if key in self._data:
            return self._data.pop(key)
        if default is _MISSING:
            raise KeyError(key)
        return default

    def resize(self, capacity: int) -> None:
        """Change the capacity, evicting least recently used entries if needed."""
        self.capacity = validate_capacity(capacity)
        self._shrink_to(capacity)

    def _shrink_to(self, capacity: int) -> None:
        while len(self._data) > capacity:
            key, value = self._data.popitem(last=False)
            self.stats.evictions += 1
            if self._on_evict is not None:
                self._on_evict(key, value)

    def keys(self) -> list[Hashable]:
        """Keys from least to most recently used."""
        return list(self._data)

    def clear(self) -> None:
        """Remove all entries (stats are kept)."""
        self._data.clear()

    def __contains__(self, key: Hashable) -> bool:
        return key in self._data

    def __len__(self) -> int:
        return len(self._data)
