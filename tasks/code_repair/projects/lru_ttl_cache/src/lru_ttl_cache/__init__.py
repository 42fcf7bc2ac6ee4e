"""In-memory caches: a capacity-bounded LRU cache and a time-to-live cache."""

from lru_ttl_cache.lru import LRUCache
from lru_ttl_cache.stats import CacheStats
from lru_ttl_cache.ttl import TTLCache

__all__ = ["CacheStats", "LRUCache", "TTLCache"]
