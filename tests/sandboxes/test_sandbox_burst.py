"""A burst of sandbox start-ups: the first of a backend runs alone (it fills the per-process caches
every later start reads), the rest overlap, at most ``START_PARALLEL`` at once, and a pool prewarms
to the size asked for and keeps it. Behaviour from start/end timestamps; the only timing bound is
a hang guard."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from envhub.sandboxes import pool as pool_module
from envhub.sandboxes import priming
from envhub.sandboxes.pool import SandboxPool
from envhub.sandboxes.process_backend import ProcessSandbox

#: the burst takes 1-2 s (five starts of LAUNCH_S, the first alone): a hang guard, not a speed bound
HANG_GUARD_S = 60.0
LAUNCH_S = 0.3


class Recorder:
    def __init__(self) -> None:
        self.spans: list[tuple[float, float]] = []
        self.lock = threading.Lock()

    def sandbox_class(self) -> type[ProcessSandbox]:
        recorder = self

        class SlowLaunch(ProcessSandbox):
            def _launch(self) -> Any:
                t0 = time.monotonic()
                time.sleep(LAUNCH_S)  # a start-up that takes a while: overlapping ones show it
                transport = super()._launch()
                with recorder.lock:
                    recorder.spans.append((t0, time.monotonic()))
                return transport

        return SlowLaunch


def slow_pool(recorder: Recorder) -> SandboxPool:
    pool = SandboxPool("process", size=1, prestart=False)
    cls = recorder.sandbox_class()
    pool._new = lambda: cls(pool.spec)  # type: ignore[method-assign]
    return pool


@pytest.fixture
def first_start_again() -> Any:
    priming.forget("process")
    yield
    priming.forget("process")


def test_first_start_runs_alone_then_the_rest_overlap(first_start_again: Any) -> None:
    recorder = Recorder()
    t0 = time.monotonic()
    with slow_pool(recorder) as pool:
        assert pool.prewarm(5) == 5
        assert pool.idle == 5 and pool.size == 5
    assert time.monotonic() - t0 < HANG_GUARD_S
    first, *rest = sorted(recorder.spans)
    assert len(rest) == 4
    assert all(start >= first[1] for start, _ in rest), "a start began before the first one had finished"
    assert max(start for start, _ in rest) < min(end for _, end in rest), "the later starts ran one after another"


def test_a_pool_starts_at_most_start_parallel_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pool_module, "START_PARALLEL", 2)
    recorder = Recorder()
    with slow_pool(recorder) as pool:
        assert pool.prewarm(4) == 4
    events = sorted([(s, 1) for s, _ in recorder.spans] + [(e, -1) for _, e in recorder.spans])
    running = peak = 0
    for _, step in events:
        running += step
        peak = max(peak, running)
    assert peak == 2


def test_prewarm_raises_what_the_pool_keeps_idle() -> None:
    with SandboxPool("process", size=1, prestart=False) as pool:
        assert pool.prewarm(3) == 3
        leases = [pool.acquire() for _ in range(3)]
        assert pool.stats.reused == 3 and pool.stats.created == 3
        for lease in leases:
            lease.release()
        assert pool.idle == 3  # all kept: the next burst of 3 finds them warm
        assert pool.prewarm(2) == 0  # already holds that many
