"""Guaranteed cleanup of live sandboxes and pools: normal exit, exceptions, SIGINT, SIGTERM.

Everything that owns an outside resource (a container, a bwrap process tree, a scratch dir)
registers here while it is open. ``atexit`` closes what is left on a normal exit or an uncaught
exception. SIGTERM would end the process without running ``atexit``, and SIGINT may arrive while
a caller swallows ``KeyboardInterrupt``, so both get a handler that closes everything and then
*chains* to whatever handler was installed before ours (re-raising the default action if that
was the default), so we never change how the program itself reacts to the signal.

A ``kill -9`` cannot be caught; for that case every backend also self-destructs when the host
goes away (the executor sees EOF on its stdin; docker's ``stdin_once`` + ``auto_remove``; bwrap's
``--die-with-parent``) and ``envhub sandbox prune`` removes anything left by label.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import signal
import threading
from types import FrameType
from typing import Any, Protocol

log = logging.getLogger(__name__)


class Closeable(Protocol):
    def close(self) -> None: ...


_live: dict[int, Closeable] = {}
_lock = threading.RLock()
_previous: dict[int, Any] = {}
HANDLED_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def track(obj: Closeable) -> None:
    """Register an open resource; also installs the signal handlers on first use."""
    with _lock:
        _live[id(obj)] = obj
    install_signal_handlers()


def untrack(obj: Closeable) -> None:
    with _lock:
        _live.pop(id(obj), None)


def live() -> list[Closeable]:
    with _lock:
        return list(_live.values())


def close_all() -> int:
    """Close every registered resource, newest first. Returns how many were closed."""
    with _lock:
        items = list(_live.values())[::-1]
        _live.clear()
    for obj in items:
        try:
            obj.close()
        except Exception as exc:  # cleanup goes on for the others whatever one of them does
            log.warning("cleanup of %r failed: %r", obj, exc)
    return len(items)


def _handler(signum: int, frame: FrameType | None) -> None:
    close_all()
    previous = _previous.get(signum, signal.SIG_DFL)
    if callable(previous):
        previous(signum, frame)
    elif previous == signal.SIG_IGN:
        return
    else:  # SIG_DFL (or unknown, set from C): restore it and let the signal do what it does
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)


def install_signal_handlers() -> bool:
    """Install the chaining handlers once. Only possible from the main thread; returns success."""
    if threading.current_thread() is not threading.main_thread():
        return False
    with _lock:
        for signum in HANDLED_SIGNALS:
            current = signal.getsignal(signum)
            if current is _handler:
                continue
            with contextlib.suppress(ValueError, OSError):
                _previous[signum] = current
                signal.signal(signum, _handler)
    return True


atexit.register(close_all)
