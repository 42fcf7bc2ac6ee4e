import pytest

from rate_limiter import FixedWindow, KeyedLimiter, SlidingWindowCounter, SlidingWindowLog, TokenBucket


class FakeClock:
    def __init__(self, now=1000.0):
        self.now = now

    def __call__(self):
        return self.now

    def advance(self, seconds):
        self.now += seconds


# ------------------------------------------------------------- token bucket


def test_bucket_starts_full_and_drains():
    clock = FakeClock()
    bucket = TokenBucket(3, 1, clock=clock)
    assert bucket.tokens == 3
    assert [bucket.try_acquire() for _ in range(4)] == [True, True, True, False]
    assert bucket.tokens == 0


def test_bucket_refills_over_time():
    clock = FakeClock()
    bucket = TokenBucket(4, 2, clock=clock, initial_tokens=0)
    clock.advance(0.5)
    assert bucket.tokens == 1
    clock.advance(0.25)
    assert bucket.tokens == 1.5
    assert bucket.try_acquire() is True
    assert bucket.try_acquire() is False


def test_bucket_refill_capped_at_capacity():
    clock = FakeClock()
    bucket = TokenBucket(2, 10, clock=clock, initial_tokens=1)
    clock.advance(100)
    assert bucket.tokens == 2


def test_bucket_acquire_exact_amount():
    clock = FakeClock()
    bucket = TokenBucket(5, 1, clock=clock, initial_tokens=2)
    assert bucket.try_acquire(2) is True
    assert bucket.tokens == 0
    clock.advance(2.5)
    assert bucket.try_acquire(3) is False
    assert bucket.tokens == 2.5
    clock.advance(0.5)
    assert bucket.try_acquire(3) is True
    assert bucket.tokens == 0


def test_bucket_failed_acquire_keeps_tokens():
    clock = FakeClock()
    bucket = TokenBucket(5, 1, clock=clock, initial_tokens=2)
    assert bucket.try_acquire(3) is False
    assert bucket.tokens == 2


def test_bucket_clock_going_backwards_adds_nothing():
    clock = FakeClock()
    bucket = TokenBucket(5, 1, clock=clock, initial_tokens=1)
    clock.advance(-10)
    assert bucket.tokens == 1
    clock.advance(2)
    assert bucket.tokens == 3


def test_bucket_wait_time():
    clock = FakeClock()
    bucket = TokenBucket(10, 4, clock=clock, initial_tokens=1)
    assert bucket.wait_time(1) == 0.0
    assert bucket.wait_time() == 0.0
    assert bucket.try_acquire() is True
    assert bucket.wait_time() == 0.25
    clock.advance(0.25)
    assert bucket.wait_time(3) == 0.5
    assert bucket.wait_time(10) == 2.25
    clock.advance(0.5)
    assert bucket.wait_time(3) == 0.0


@pytest.mark.parametrize("amount", [0, -1, 6])
def test_bucket_invalid_amount(amount):
    bucket = TokenBucket(5, 1, clock=FakeClock())
    with pytest.raises(ValueError):
        bucket.try_acquire(amount)
    with pytest.raises(ValueError):
        bucket.wait_time(amount)


def test_bucket_amount_equal_to_capacity_allowed():
    bucket = TokenBucket(5, 1, clock=FakeClock())
    assert bucket.try_acquire(5) is True


@pytest.mark.parametrize(
    ("capacity", "rate", "initial"),
    [(0, 1, None), (-1, 1, None), (5, 0, None), (5, -1, None), (5, 1, -0.5), (5, 1, 5.5)],
)
def test_bucket_invalid_construction(capacity, rate, initial):
    with pytest.raises(ValueError):
        TokenBucket(capacity, rate, clock=FakeClock(), initial_tokens=initial)


def test_bucket_initial_bounds_allowed():
    assert TokenBucket(5, 1, clock=FakeClock(), initial_tokens=0).tokens == 0
    assert TokenBucket(5, 1, clock=FakeClock(), initial_tokens=5).tokens == 5


# ------------------------------------------------------------- fixed window


def test_fixed_window_limit_and_reset():
    clock = FakeClock(10.0)
    limiter = FixedWindow(2, 10, clock=clock)
    assert limiter.try_acquire() and limiter.try_acquire()
    assert limiter.try_acquire() is False
    assert limiter.remaining() == 0
    clock.advance(9.75)
    assert limiter.try_acquire() is False
    clock.advance(0.25)
    assert limiter.remaining() == 2
    assert limiter.try_acquire()
    assert limiter.remaining() == 1


def test_fixed_window_is_aligned():
    clock = FakeClock(19.5)
    limiter = FixedWindow(1, 10, clock=clock)
    assert limiter.try_acquire()
    clock.advance(0.5)
    assert limiter.try_acquire()


def test_fixed_window_retry_after():
    clock = FakeClock(12.0)
    limiter = FixedWindow(1, 10, clock=clock)
    assert limiter.retry_after() == 0.0
    limiter.try_acquire()
    assert limiter.retry_after() == 8.0


@pytest.mark.parametrize("cls", [FixedWindow, SlidingWindowLog, SlidingWindowCounter])
def test_window_limiters_validate(cls):
    with pytest.raises(ValueError):
        cls(0, 10, clock=FakeClock())
    with pytest.raises(ValueError):
        cls(5, 0, clock=FakeClock())
    with pytest.raises(ValueError):
        cls(5, -1, clock=FakeClock())


# ------------------------------------------------------------- sliding log


def test_sliding_log_rolling_window():
    clock = FakeClock(0.0)
    limiter = SlidingWindowLog(3, 10, clock=clock)
    assert limiter.try_acquire()
    clock.advance(4)
    assert limiter.try_acquire()
    clock.advance(4)
    assert limiter.try_acquire()
    assert limiter.try_acquire() is False
    assert limiter.remaining() == 0
    clock.advance(2)
    assert limiter.remaining() == 1
    assert limiter.try_acquire()
    assert limiter.try_acquire() is False


def test_sliding_log_expiry_boundary():
    clock = FakeClock(0.0)
    limiter = SlidingWindowLog(1, 5, clock=clock)
    assert limiter.try_acquire()
    clock.advance(4.5)
    assert limiter.try_acquire() is False
    clock.advance(0.5)
    assert limiter.try_acquire()


def test_sliding_log_denied_requests_not_recorded():
    clock = FakeClock(0.0)
    limiter = SlidingWindowLog(1, 5, clock=clock)
    limiter.try_acquire()
    clock.advance(1)
    assert limiter.try_acquire() is False
    clock.advance(4)
    assert limiter.try_acquire()


def test_sliding_log_retry_after():
    clock = FakeClock(0.0)
    limiter = SlidingWindowLog(2, 10, clock=clock)
    assert limiter.retry_after() == 0.0
    limiter.try_acquire()
    clock.advance(3)
    limiter.try_acquire()
    clock.advance(1)
    assert limiter.retry_after() == 6.0
    clock.advance(7)
    assert limiter.retry_after() == 0.0
    assert limiter.remaining() == 1


# ------------------------------------------------------------- sliding counter


def test_sliding_counter_within_first_window():
    clock = FakeClock(100.0)
    limiter = SlidingWindowCounter(2, 10, clock=clock)
    assert limiter.try_acquire()
    assert limiter.try_acquire()
    assert limiter.try_acquire() is False
    assert limiter.estimate() == 2


def test_sliding_counter_weights_previous_window():
    clock = FakeClock(100.0)
    limiter = SlidingWindowCounter(4, 10, clock=clock)
    for _ in range(4):
        assert limiter.try_acquire()
    clock.advance(12.5)  # 25% into the next window
    assert limiter.estimate() == 3.0
    assert limiter.try_acquire()
    assert limiter.estimate() == 4.0
    assert limiter.try_acquire() is False
    clock.advance(2.5)  # 50% into the window
    assert limiter.estimate() == 3.0
    assert limiter.try_acquire()


def test_sliding_counter_resets_after_gap():
    clock = FakeClock(100.0)
    limiter = SlidingWindowCounter(2, 10, clock=clock)
    limiter.try_acquire()
    limiter.try_acquire()
    clock.advance(20)
    assert limiter.estimate() == 0
    assert limiter.try_acquire()
    assert limiter.estimate() == 1


def test_sliding_counter_window_start_exact():
    clock = FakeClock(100.0)
    limiter = SlidingWindowCounter(2, 10, clock=clock)
    limiter.try_acquire()
    limiter.try_acquire()
    clock.advance(10)
    assert limiter.estimate() == 2.0
    assert limiter.try_acquire() is False


# ------------------------------------------------------------- keyed


def test_keyed_limiter_isolated_per_key():
    clock = FakeClock()
    keyed = KeyedLimiter(lambda: FixedWindow(1, 60, clock=clock))
    assert keyed.allow("alice")
    assert keyed.allow("bob")
    assert not keyed.allow("alice")
    assert not keyed.allow("alice")
    assert keyed.denied == {"alice": 2}
    assert len(keyed) == 2


def test_keyed_limiter_creates_limiter_once():
    created = []

    def factory():
        created.append(1)
        return TokenBucket(2, 1, clock=FakeClock())

    keyed = KeyedLimiter(factory)
    assert keyed.allow("k") and keyed.allow("k")
    assert not keyed.allow("k")
    assert len(created) == 1
    assert keyed.denied == {"k": 1}
