"""Rate limiters (token bucket, fixed window, sliding window log/counter) with injectable clocks."""

import math
import time
from collections import deque
from collections.abc import Callable, Hashable

Clock = Callable[[], float]


def _positive(name: str, value: float) -> float:
    if value <= 0:
        raise ValueError(f"{name} must be positive, got {value}")
    return value


class TokenBucket:
    """Holds up to ``capacity`` tokens, refilled continuously at ``refill_rate`` tokens/second.

    The bucket starts full unless ``initial_tokens`` is given. If the clock
    moves backwards, no tokens are added.
    """

    def __init__(
        self,
        capacity: float,
        refill_rate: float,
        clock: Clock = time.monotonic,
        initial_tokens: float | None = None,
    ) -> None:
        self.capacity = _positive("capacity", capacity)
        self.refill_rate = _positive("refill_rate", refill_rate)
        start = capacity if initial_tokens is None else initial_tokens
        if start < 0 or start > capacity:
            raise ValueError("initial_tokens must be between 0 and capacity")
        self._tokens = float(start)
        self._clock = clock
        self._last = clock()

    def _refill(self) -> None:
        now = self._clock()
        elapsed = max(0.0, now - self._last)
        self._tokens = min(self.capacity, self._tokens + elapsed * self.refill_rate)
        self._last = now

    @property
    def tokens(self) -> float:
        """Tokens currently available (after refilling)."""
        self._refill()
        return self._tokens

    def _check_amount(self, amount: float) -> None:
        if amount <= 0:
            raise ValueError("amount must be positive")
        if amount > self.capacity:
            raise ValueError("amount exceeds bucket capacity")

    def try_acquire(self, amount: float = 1) -> bool:
        """Take ``amount`` tokens if available and return True, else return False.

        Raises ValueError if ``amount`` is not positive or exceeds capacity.
        """
        self._check_amount(amount)
        self._refill()
        if self._tokens >= amount:
            self._tokens -= amount
            return True
        return False

    def wait_time(self, amount: float = 1) -> float:
        """Seconds until ``amount`` tokens will be available (0.0 if already available)."""
        self._check_amount(amount)
        self._refill()
        return max(0.0, (amount - self._tokens) / self.refill_rate)


class _Windowed:
    """Shared validation for window-based limiters."""

    def __init__(self, limit: int, window: float, clock: Clock = time.monotonic) -> None:
        self.limit = int(_positive("limit", limit))
        self.window = _positive("window", window)
        self._clock = clock

    def _window_of(self, now: float) -> int:
        """Index ``k`` of the aligned window ``[k*window, (k+1)*window)`` containing ``now``."""
        return math.floor(now / self.window)


class FixedWindow(_Windowed):
    """Allows ``limit`` requests per aligned window ``[k*window, (k+1)*window)``."""

    def __init__(self, limit: int, window: float, clock: Clock = time.monotonic) -> None:
        super().__init__(limit, window, clock)
        self._index = self._window_of(clock())
        self._count = 0

    def _sync(self, now: float) -> int:
        index = self._window_of(now)
        if index != self._index:
            self._index, self._count = index, 0
        return index

    def try_acquire(self) -> bool:
        """Count a request in the current window if under the limit."""
        self._sync(self._clock())
        if self._count < self.limit:
            self._count += 1
            return True
        return False

    def remaining(self) -> int:
        """Requests still allowed in the current window."""
        self._sync(self._clock())
        return self.limit - self._count

    def retry_after(self) -> float:
        """Seconds until a request would be allowed (0.0 if allowed now)."""
        now = self._clock()
        index = self._sync(now)
        if self._count < self.limit:
            return 0.0
        return (index + 1) * self.window - now


class SlidingWindowLog(_Windowed):
    """Allows ``limit`` requests in any rolling ``window`` seconds, remembering each timestamp.

    A request made at time ``t`` stops counting at ``t + window``.
    """

    def __init__(self, limit: int, window: float, clock: Clock = time.monotonic) -> None:
        super().__init__(limit, window, clock)
        self._log: deque[float] = deque()

    def _evict(self, now: float) -> None:
        while self._log and self._log[0] <= now - self.window:
            self._log.popleft()

    def try_acquire(self) -> bool:
        """Record a request if fewer than ``limit`` happened in the last ``window`` seconds."""
        now = self._clock()
        self._evict(now)
        if len(self._log) < self.limit:
            self._log.append(now)
            return True
        return False

    def remaining(self) -> int:
        """Requests still allowed right now."""
        self._evict(self._clock())
        return self.limit - len(self._log)

    def retry_after(self) -> float:
        """Seconds until the oldest counted request expires (0.0 if allowed now)."""
        now = self._clock()
        self._evict(now)
        if len(self._log) < self.limit:
            return 0.0
        return self._log[0] + self.window - now


class SlidingWindowCounter(_Windowed):
    """Approximate sliding window: weights the previous fixed window by its remaining overlap.

    ``estimate = previous_count * (1 - elapsed_fraction) + current_count``; a
    request is allowed when ``estimate + 1 <= limit``.
    """

    def __init__(self, limit: int, window: float, clock: Clock = time.monotonic) -> None:
        super().__init__(limit, window, clock)
        self._index = self._window_of(clock())
        self._previous = 0
        self._current = 0

    def _sync(self, now: float) -> float:
        index = self._window_of(now)
        if index == self._index + 1:
            self._previous, self._current = self._current, 0
        elif index != self._index:
            self._previous, self._current = 0, 0
        self._index = index
        return (now - index * self.window) / self.window

    def estimate(self) -> float:
        """The weighted request count for the rolling window ending now."""
        fraction = self._sync(self._clock())
        return self._previous * (1 - fraction) + self._current

    def try_acquire(self) -> bool:
        """Count a request if the estimate leaves room for it."""
        if self.estimate() + 1 > self.limit:
            return False
        self._current += 1
        return True


Limiter = TokenBucket | FixedWindow | SlidingWindowLog | SlidingWindowCounter


class KeyedLimiter:
    """One independent limiter per key, created lazily by ``factory``; counts denials per key."""

    def __init__(self, factory: Callable[[], Limiter]) -> None:
        self._factory = factory
        self._limiters: dict[Hashable, Limiter] = {}
        self.denied: dict[Hashable, int] = {}

    def allow(self, key: Hashable) -> bool:
        """Return True if the request for ``key`` is allowed by that key's limiter."""
        limiter = self._limiters.get(key)
        if limiter is None:
            limiter = self._limiters[key] = self._factory()
        allowed = limiter.try_acquire()
        if not allowed:
            self.denied[key] = self.denied.get(key, 0) + 1
        return allowed

    def __len__(self) -> int:
        """Number of keys seen."""
        return len(self._limiters)
