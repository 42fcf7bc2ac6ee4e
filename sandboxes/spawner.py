"""The host's child processes: started from one long-lived thread (:func:`popen`), and stopped
(:func:`stop`).

Why one thread: bwrap's ``--die-with-parent`` uses ``PR_SET_PDEATHSIG``, which fires when the *thread*
that forked the child exits -- not the process. A sandbox started from a pool's refill thread
or a caller's worker thread would be SIGKILLed the moment that thread finished. Forking from a
daemon thread that lives as long as the process keeps "dies with its parent" meaning "dies
with this process".
"""

from __future__ import annotations

import ctypes
import os
import queue
import signal
import subprocess
import threading
from concurrent.futures import Future
from typing import Any

_requests: queue.SimpleQueue[tuple[Future[subprocess.Popen[bytes]], tuple[Any, ...], dict[str, Any]]] = \
    queue.SimpleQueue()
_thread: threading.Thread | None = None
_lock = threading.Lock()


def _serve() -> None:
    while True:
        future, args, kwargs = _requests.get()
        if not future.set_running_or_notify_cancel():
            continue
        try:
            future.set_result(subprocess.Popen(*args, **kwargs))
        except BaseException as exc:  # handed to the caller, whatever it is
            future.set_exception(exc)


def _forget_after_fork() -> None:
    """A forked child has no spawner thread, and the lock or queue may be mid-use: start afresh."""
    global _requests, _thread, _lock
    _requests, _thread, _lock = queue.SimpleQueue(), None, threading.Lock()


os.register_at_fork(after_in_child=_forget_after_fork)


_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """A ``preexec_fn``: the child gets SIGKILL when the thread that forked it exits -- with
    :func:`popen`, when this process exits, ``kill -9`` included."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def popen(*args: Any, **kwargs: Any) -> subprocess.Popen[bytes]:
    """``subprocess.Popen(*args, **kwargs)``, forked from the process-lifetime spawner thread."""
    global _thread
    with _lock:
        if _thread is None or not _thread.is_alive():
            _thread = threading.Thread(target=_serve, name="envhub-spawner", daemon=True)
            _thread.start()
    future: Future[subprocess.Popen[bytes]] = Future()
    _requests.put((future, args, kwargs))
    return future.result()


def stop(proc: subprocess.Popen[Any], grace_s: float, *, terminate: bool = True) -> None:
    """End ``proc`` and reap it: SIGTERM (unless ``terminate`` is False: the caller asked it to
    exit some other way, such as closing its stdin), ``grace_s`` seconds to exit, then SIGKILL."""
    if terminate and proc.poll() is None:
        proc.terminate()
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
