import pytest

from lru_ttl_cache import CacheStats, LRUCache, TTLCache


class FakeClock:
    def __init__(self, now=100.0):
        self.now = now

    def __call__(self):
        return self.now

    def advance(self, seconds):
        self.now += seconds


# ---------------------------------------------------------------- stats


def test_stats_hit_rate():
    stats = CacheStats()
    assert stats.hit_rate == 0.0
    assert stats.requests == 0
    stats.hits, stats.misses = 3, 1
    assert stats.requests == 4
    assert stats.hit_rate == 0.75
    stats.evictions, stats.expirations = 2, 5
    stats.reset()
    assert stats == CacheStats()


# ---------------------------------------------------------------- LRU


@pytest.mark.parametrize("capacity", [0, -1])
def test_lru_rejects_small_capacity(capacity):
    with pytest.raises(ValueError):
        LRUCache(capacity)


@pytest.mark.parametrize("capacity", [1.5, "2", True, None])
def test_lru_rejects_non_int_capacity(capacity):
    with pytest.raises(TypeError):
        LRUCache(capacity)


def test_lru_capacity_one():
    cache = LRUCache(1)
    cache.put("a", 1)
    cache.put("b", 2)
    assert cache.keys() == ["b"]
    assert len(cache) == 1


def test_lru_evicts_least_recently_used():
    cache = LRUCache(2)
    cache.put("a", 1)
    cache.put("b", 2)
    assert cache.get("a") == 1
    cache.put("c", 3)
    assert "b" not in cache
    assert cache.keys() == ["a", "c"]
    assert cache.stats.evictions == 1


def test_lru_fills_to_capacity_without_evicting():
    cache = LRUCache(3)
    for i, key in enumerate("abc"):
        cache.put(key, i)
    assert cache.keys() == ["a", "b", "c"]
    assert cache.stats.evictions == 0


def test_lru_put_existing_updates_and_refreshes():
    cache = LRUCache(2)
    cache.put("a", 1)
    cache.put("b", 2)
    cache.put("a", 10)
    assert len(cache) == 2
    cache.put("c", 3)
    assert cache.keys() == ["a", "c"]
    assert cache.peek("a") == 10


def test_lru_get_hits_and_misses():
    cache = LRUCache(2)
    cache.put("a", 1)
    assert cache.get("a") == 1
    assert cache.get("zzz") is None
    assert cache.get("zzz", "dflt") == "dflt"
    assert (cache.stats.hits, cache.stats.misses) == (1, 2)


def test_lru_peek_and_contains_do_not_touch():
    cache = LRUCache(2)
    cache.put("a", 1)
    cache.put("b", 2)
    assert cache.peek("a") == 1
    assert "a" in cache
    cache.put("c", 3)
    assert cache.keys() == ["b", "c"]
    assert cache.stats.requests == 0
    with pytest.raises(KeyError):
        cache.peek("a")


def test_lru_on_evict_callback():
    evicted = []
    cache = LRUCache(2, on_evict=lambda k, v: evicted.append((k, v)))
    for i, key in enumerate("abcd"):
        cache.put(key, i)
    assert evicted == [("a", 0), ("b", 1)]
    cache.pop("c")
    assert evicted == [("a", 0), ("b", 1)]


def test_lru_pop():
    cache = LRUCache(2)
    cache.put("a", 1)
    assert cache.pop("a") == 1
    assert "a" not in cache
    assert cache.pop("a", None) is None
    assert cache.pop("a", "dflt") == "dflt"
    with pytest.raises(KeyError):
        cache.pop("a")


def test_lru_get_or_set():
    cache = LRUCache(2)
    calls = []

    def factory():
        calls.append(1)
        return "computed"

    assert cache.get_or_set("k", factory) == "computed"
    assert cache.get_or_set("k", factory) == "computed"
    assert len(calls) == 1
    assert (cache.stats.hits, cache.stats.misses) == (1, 1)
    cache.put("n", None)
    assert cache.get_or_set("n", factory) is None
    assert len(calls) == 1


def test_lru_resize():
    evicted = []
    cache = LRUCache(4, on_evict=lambda k, v: evicted.append(k))
    for key in "abcd":
        cache.put(key, key)
    cache.get("a")
    cache.resize(2)
    assert cache.capacity == 2
    assert cache.keys() == ["d", "a"]
    assert evicted == ["b", "c"]
    cache.resize(5)
    cache.put("e", 1)
    assert len(cache) == 3
    with pytest.raises(ValueError):
        cache.resize(0)


def test_lru_clear_keeps_stats():
    cache = LRUCache(2)
    cache.put("a", 1)
    cache.get("a")
    cache.clear()
    assert len(cache) == 0
    assert cache.stats.hits == 1


# ---------------------------------------------------------------- TTL


@pytest.mark.parametrize("ttl", [0, -5])
def test_ttl_rejects_non_positive_ttl(ttl):
    with pytest.raises(ValueError):
        TTLCache(ttl)
    cache = TTLCache(10)
    with pytest.raises(ValueError):
        cache.put("a", 1, ttl=ttl)


def test_ttl_rejects_bad_capacity():
    with pytest.raises(ValueError):
        TTLCache(10, capacity=0)


def test_ttl_expiry_boundary():
    clock = FakeClock()
    cache = TTLCache(10, clock=clock)
    cache.put("a", 1)
    clock.advance(9.999)
    assert cache.get("a") == 1
    clock.advance(0.001)
    assert cache.get("a") is None
    assert cache.stats.expirations == 1
    assert (cache.stats.hits, cache.stats.misses) == (1, 1)


def test_ttl_get_default_and_miss():
    cache = TTLCache(10, clock=FakeClock())
    assert cache.get("x", 5) == 5
    assert cache.stats.misses == 1
    assert cache.stats.expirations == 0


def test_ttl_per_item_ttl():
    clock = FakeClock()
    cache = TTLCache(10, clock=clock)
    cache.put("short", 1, ttl=2)
    cache.put("long", 2)
    clock.advance(2)
    assert "short" not in cache
    assert "long" in cache


def test_ttl_put_restarts_lifetime():
    clock = FakeClock()
    cache = TTLCache(10, clock=clock)
    cache.put("a", 1)
    clock.advance(8)
    cache.put("a", 2)
    clock.advance(8)
    assert cache.get("a") == 2


def test_ttl_remaining():
    clock = FakeClock()
    cache = TTLCache(10, clock=clock)
    cache.put("a", 1)
    clock.advance(4)
    assert cache.ttl_remaining("a") == 6
    assert cache.ttl_remaining("missing") is None
    clock.advance(6)
    assert cache.ttl_remaining("a") is None


def test_ttl_touch():
    clock = FakeClock()
    cache = TTLCache(10, clock=clock)
    cache.put("a", 1, ttl=3)
    clock.advance(2)
    assert cache.touch("a") is True
    clock.advance(9)
    assert cache.get("a") == 1
    clock.advance(1)
    assert cache.touch("a") is False
    assert cache.touch("nope") is False


def test_ttl_len_counts_live_entries_only():
    clock = FakeClock()
    cache = TTLCache(10, clock=clock)
    cache.put("a", 1, ttl=1)
    cache.put("b", 2, ttl=5)
    cache.put("c", 3)
    assert len(cache) == 3
    clock.advance(1)
    assert len(cache) == 2
    clock.advance(4)
    assert len(cache) == 1


def test_ttl_purge():
    clock = FakeClock()
    cache = TTLCache(10, clock=clock)
    cache.put("a", 1, ttl=1)
    cache.put("b", 2, ttl=2)
    cache.put("c", 3, ttl=3)
    clock.advance(2)
    assert cache.purge() == 2
    assert cache.stats.expirations == 2
    assert cache.purge() == 0
    assert "c" in cache


def test_ttl_capacity_purges_expired_first():
    clock = FakeClock()
    cache = TTLCache(10, capacity=2, clock=clock)
    cache.put("old", 1, ttl=1)
    cache.put("keep", 2)
    clock.advance(1)
    cache.put("new", 3)
    assert "keep" in cache and "new" in cache
    assert cache.stats.evictions == 0
    assert cache.stats.expirations == 1


def test_ttl_capacity_evicts_soonest_expiring():
    clock = FakeClock()
    cache = TTLCache(10, capacity=3, clock=clock)
    cache.put("a", 1, ttl=9)
    cache.put("b", 2, ttl=4)
    cache.put("c", 3, ttl=7)
    cache.put("d", 4)
    assert "b" not in cache
    assert all(k in cache for k in "acd")
    assert cache.stats.evictions == 1


def test_ttl_capacity_tie_evicts_oldest():
    clock = FakeClock()
    cache = TTLCache(5, capacity=2, clock=clock)
    cache.put("first", 1)
    cache.put("second", 2)
    cache.put("third", 3)
    assert "first" not in cache
    assert "second" in cache and "third" in cache


def test_ttl_capacity_updating_existing_key_does_not_evict():
    clock = FakeClock()
    cache = TTLCache(5, capacity=2, clock=clock)
    cache.put("a", 1)
    cache.put("b", 2)
    cache.put("a", 3)
    assert cache.get("a") == 3 and cache.get("b") == 2
    assert cache.stats.evictions == 0
