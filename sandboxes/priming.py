"""The first sandbox start of each backend in a process runs alone; the rest run side by side.

A backend's first start fills per-process caches that every later start reads: bwrap's scan of
``/usr`` for copies of envhub to hide (a few hundred milliseconds of CPU), its seccomp program
and cgroup plan, the Docker client, the sweep of dead owners' leftovers. ``functools.cache``
does not make concurrent callers wait for the one computing a value, so 64 sandboxes started
at once by a burst of sessions each computed all of it themselves, under the GIL: bwrap's 64
start-ups took 20-30 s instead of 2-3 s. Here the other starts of that backend wait until the
first has finished (succeeded or not) and then proceed concurrently.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator

_primed: set[str] = set()
_gates: dict[str, threading.Lock] = {}
_gates_lock = threading.Lock()


def _gate(backend: str) -> threading.Lock:
    with _gates_lock:
        return _gates.setdefault(backend, threading.Lock())


@contextlib.contextmanager
def first_start(backend: str) -> Iterator[None]:
    """Wrap a sandbox start: the first of ``backend`` in this process holds the others back."""
    if backend in _primed:
        yield
        return
    gate = _gate(backend)
    gate.acquire()
    if backend in _primed:  # the first start ended while this one waited
        gate.release()
        yield
        return
    try:
        yield
    finally:
        _primed.add(backend)  # a failed first start filled what it could; the others go on
        gate.release()


def forget(backend: str | None = None) -> None:
    """Make the next start of ``backend`` (of every backend: None) a first start again (tests)."""
    if backend is None:
        _primed.clear()
    else:
        _primed.discard(backend)


def _forget_after_fork() -> None:
    """A forked child may have inherited a gate held by another thread of its parent, and some of
    its parent's caches are dropped at a fork (the Docker client)."""
    global _gates_lock
    _gates_lock = threading.Lock()
    _gates.clear()
    _primed.clear()


os.register_at_fork(after_in_child=_forget_after_fork)
