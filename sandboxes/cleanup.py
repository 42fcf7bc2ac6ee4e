"""Guaranteed cleanup of live sandboxes and pools: normal exit, exceptions, SIGINT, SIGTERM, SIGHUP.

Everything that owns an outside resource (a container, a bwrap process tree, a scratch dir)
registers here while it is open. ``atexit`` closes what is left on a normal exit or an uncaught
exception. SIGTERM and SIGHUP would end the process without running ``atexit``, and SIGINT may
arrive while a caller swallows ``KeyboardInterrupt``, so each gets a handler that closes everything
and then *chains* to whatever handler was installed before ours (re-raising the default action if
that was the default), so we never change how the program itself reacts to the signal. A signal
the program ignores (``nohup`` ignores SIGHUP) gets no handler: it must not close anything either.
A command may ask for a signal to stop it as Ctrl-C does (:func:`signals_interrupt`: ``envhub
rollout`` and ``verify`` do for SIGTERM): the handler then closes everything and raises
:class:`SignalInterrupt`, a ``KeyboardInterrupt`` that names the signal, so the command says where
it stood and exits 128 + the signal's number.

Python runs signal handlers only in the main thread and only lets the main thread install
them, while rollouts, ``verify`` and the server create their sandboxes in worker threads. So the
handlers are installed eagerly: when this module is first imported from the main thread, by the
CLI entry point before any command runs, and again at any ``track`` from the main thread --
each signal at most once, so a handler someone installs after ours (uvicorn's) is left alone.
A resource is tracked *before* its outside part exists (a sandbox before its container is
created), so a signal in between still finds it.

The handler itself must not hang the process it was asked to end: it hands the work to a
reaper thread (started at the first ``track``), which closes everything in parallel -- the
interrupted main thread may hold a lock a close needs -- and waits for it at most
:data:`SIGNAL_CLEANUP_S` before chaining anyway. While a stop is under way -- a signal's cleanup,
or an interrupted run ending (:func:`begin_stop`) -- :func:`shutting_down` is true: a sandbox a
worker thread is starting meanwhile gives up, and pools neither hand out nor replace sandboxes
(the ones failing now were closed by the stop, not broken). A signal that ends the process keeps
it true for good.
Registered *sweepers* then catch what a close could not know about (the docker backend removes
this process's containers that no sandbox accounts for, e.g. one a worker thread was creating
while we were closing).

A forked child (multiprocessing) forgets the parent's resources: its SIGTERM must never tear
down the parent's sandboxes.

A ``kill -9`` cannot be caught; for that case every backend also self-destructs when the host
goes away (the executor sees EOF on its stdin; docker's ``stdin_once`` + ``auto_remove``; bwrap's
``--die-with-parent``). What cannot (a container created but not yet started when its owner
died) is removed by the next envhub process: the first ``track`` of a backend listed in
:data:`START_SWEEPS` runs that backend's sweep for dead owners' leftovers, once per process.
``envhub sandbox prune`` removes anything left by label.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import queue
import signal
import threading
import time
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any, Protocol

log = logging.getLogger(__name__)


class Closeable(Protocol):
    def close(self) -> None: ...


_live: dict[int, Closeable] = {}
#: Guards "snapshot and clear" in close_all against a concurrent track. Reentrant, because the
#: signal handler runs in the main thread, possibly while that thread is inside ``track``.
#: ``untrack`` and ``live`` take no lock (single dict operations are atomic), so a close that
#: runs in a helper thread never waits for a main thread stuck in the handler.
_lock = threading.RLock()
_previous: dict[int, Any] = {}
#: Signals we have installed our handler for once; never again over a later installer's.
_installed: set[int] = set()
_sweepers: list[Callable[[], Any]] = []
_fatal = False
_requests: queue.SimpleQueue[tuple[threading.Event, float]] = queue.SimpleQueue()
_reaper: threading.Thread | None = None
_reaper_lock = threading.Lock()
_start_swept: set[str] = set()
#: One token per stop under way (a signal's cleanup, an interrupted run's end): list operations
#: are atomic, so a signal handler can add one without a lock.
_stops: list[object] = []
#: Signals that stop the program as Ctrl-C does while a command asks for it (:func:`signals_interrupt`).
_as_interrupt: set[int] = set()
HANDLED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def _sweep_docker() -> None:
    from envhub.sandboxes.leftovers import sweep_dead_owners

    sweep_dead_owners()


def _sweep_process() -> None:
    from envhub.sandboxes.leftovers import sweep_scratch

    sweep_scratch("process")


def _sweep_landlock() -> None:
    from envhub.sandboxes.leftovers import sweep_scratch

    sweep_scratch("landlock")


#: backend -> what removes the leftovers of dead envhub processes of that backend; each imports
#: its backend only when it runs, so this module depends on none. (bwrap's leftovers are cgroups:
#: its first cgroup sweeps them, :func:`envhub.sandboxes.bwrap_cgroups.sandbox_cgroup`.)
START_SWEEPS: dict[str, Callable[[], None]] = {"docker": _sweep_docker, "process": _sweep_process,
                                               "landlock": _sweep_landlock}
#: The most a signal handler waits for the cleanup before the signal goes on regardless.
SIGNAL_CLEANUP_S = 10.0
#: The part of a bounded cleanup's time the closes get; the sweep runs after them regardless.
CLOSES_SHARE = 0.6


def track(obj: Closeable) -> None:
    """Register an open resource; also installs the signal handlers if on the main thread, and
    at the first resource of a backend in :data:`START_SWEEPS`, runs its sweep (this thread)."""
    _ensure_reaper()
    with _lock:
        _live[id(obj)] = obj
    install_signal_handlers()
    _sweep_at_first_start(getattr(obj, "backend", None))


def _sweep_at_first_start(backend: Any) -> None:
    """Run ``backend``'s start sweep if this process has not yet. Other threads do not wait for
    it: it only touches what dead processes left, never what this process is starting."""
    target = START_SWEEPS.get(backend) if isinstance(backend, str) else None
    if target is None:
        return
    with _lock:
        if backend in _start_swept:
            return
        _start_swept.add(backend)
    try:
        target()
    except Exception as exc:  # the start itself goes on (and reports a real engine problem)
        log.warning("sweeping %s leftovers of dead envhub processes failed: %r", backend, exc)


def untrack(obj: Closeable) -> None:
    _live.pop(id(obj), None)


def live() -> list[Closeable]:
    return list(_live.values())


def add_sweeper(fn: Callable[[], Any]) -> None:
    """Run ``fn`` after every :func:`close_all`: a last look for leftovers no close knew about."""
    with _lock:
        if fn not in _sweepers:
            _sweepers.append(fn)


def _take_all() -> list[Closeable]:
    """Every registered resource, newest first; the registry is empty afterwards."""
    locked = _lock.acquire(timeout=1.0)  # never hang on it (a handler): take them unlocked then
    try:
        items = list(_live.values())
        _live.clear()
    finally:
        if locked:
            _lock.release()
    return items[::-1]


def _close_one(obj: Closeable) -> None:
    try:
        obj.close()
    except Exception as exc:  # cleanup goes on for the others whatever one of them does
        log.warning("cleanup of %r failed: %r", obj, exc)


def _sweep() -> None:
    for fn in list(_sweepers):
        try:
            fn()
        except Exception as exc:
            log.warning("cleanup sweep %r failed: %r", fn, exc)


def close_all() -> int:
    """Close every registered resource, newest first, then sweep. Returns how many were closed."""
    items = _take_all()
    for obj in items:
        _close_one(obj)
    _sweep()
    return len(items)


def _close_parallel(items: list[Closeable], deadline: float) -> None:
    threads: list[threading.Thread] = []
    for obj in items:
        thread = threading.Thread(target=_close_one, args=(obj,), name="envhub-cleanup", daemon=True)
        try:
            thread.start()
        except RuntimeError:  # interpreter shutdown: no new threads; close it right here
            _close_one(obj)
            continue
        threads.append(thread)
    # The sweep always runs: it removes what a close could not finish (or a creation the closes
    # did not know of), so the closes get only part of the time.
    closes_end = time.monotonic() + CLOSES_SHARE * max(0.0, deadline - time.monotonic())
    for thread in threads:
        thread.join(max(0.0, closes_end - time.monotonic()))
    _sweep()


def _reap_forever() -> None:
    while True:
        done, timeout = _requests.get()
        try:
            _close_parallel(_take_all(), time.monotonic() + timeout)
        except Exception as exc:
            log.warning("cleanup failed: %r", exc)
        finally:
            done.set()


def _ensure_reaper() -> None:
    """Start the thread a signal handler hands its cleanup to (once per process)."""
    global _reaper
    if _reaper is not None and _reaper.is_alive():
        return
    with _reaper_lock:
        if _reaper is None or not _reaper.is_alive():
            thread = threading.Thread(target=_reap_forever, name="envhub-cleanup-reaper", daemon=True)
            thread.start()
            _reaper = thread


def close_all_bounded(timeout: float | None = None) -> None:
    """:func:`close_all` for a signal handler: it returns after at most ``timeout`` seconds,
    finished or not.

    The work runs on the reaper thread (closes in parallel, then the sweep), never on the
    interrupted main thread, which may hold a lock a close needs -- or one ``Thread.start``
    needs. Handing it over is a ``SimpleQueue.put``, which is safe inside a signal handler.
    """
    timeout = SIGNAL_CLEANUP_S if timeout is None else timeout
    reaper = _reaper
    if reaper is None or not reaper.is_alive():  # nothing was ever tracked in this process
        close_all()
        return
    done = threading.Event()
    _requests.put((done, timeout))
    if not done.wait(timeout):
        log.warning("sandbox cleanup did not finish within %.0fs; going on", timeout)


def shutting_down() -> bool:
    """True while a stop is under way (:func:`begin_stop`: a signal's cleanup, an interrupted run
    ending), and for good once a signal that ends this process is being handled: start nothing new."""
    return _fatal or bool(_stops)


def begin_stop() -> Callable[[], None]:
    """Start a stop: until the returned function is called (idempotent), :func:`shutting_down` is
    true. Call it before closing anything, and end it once the work being stopped has ended: what
    fails in between failed because of the stop, and nothing is started to replace it."""
    token = object()
    _stops.append(token)

    def end() -> None:
        with contextlib.suppress(ValueError):
            _stops.remove(token)

    return end


class SignalInterrupt(KeyboardInterrupt):
    """A ``KeyboardInterrupt`` that says which signal stopped the run: Ctrl-C's SIGINT, or one that
    a command maps to it (:func:`signals_interrupt`). A command exits with :attr:`exit_code`."""

    def __init__(self, signum: int = signal.SIGINT) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = int(signum)

    @property
    def exit_code(self) -> int:
        """128 + the signal's number, as a shell reports a process the signal ended: 130, 143."""
        return 128 + self.signum


def exit_code(exc: BaseException) -> int:
    """The exit code of a command a ``KeyboardInterrupt`` ended: 128 + its signal (SIGINT: 130)."""
    return exc.exit_code if isinstance(exc, SignalInterrupt) else 128 + signal.SIGINT


@contextlib.contextmanager
def signals_interrupt(*signums: int) -> Iterator[None]:
    """While the block runs, each of ``signums`` (e.g. SIGTERM) stops the program as Ctrl-C does:
    everything is closed, then :class:`SignalInterrupt` is raised in the main thread (a run that
    polls, :func:`envhub.rollout.collect.ctrl_c_requests_stop`, gets a stop request instead)."""
    added = set(signums) - _as_interrupt
    _as_interrupt.update(added)
    try:
        yield
    finally:
        _as_interrupt.difference_update(added)


def interrupt_signals() -> tuple[int, ...]:
    """SIGINT, plus the signals a command has mapped to it (:func:`signals_interrupt`)."""
    return (signal.SIGINT, *sorted(_as_interrupt - {signal.SIGINT}))


def _handler(signum: int, frame: FrameType | None) -> None:
    global _fatal
    previous = _previous.get(signum, signal.SIG_DFL)
    interrupt = signum in _as_interrupt
    if not interrupt and not callable(previous) and previous != signal.SIG_IGN:
        _fatal = True  # before the close: a sandbox starting meanwhile then gives up by itself
    end_stop = begin_stop()  # likewise while the close runs, and pools replace nothing it closes
    try:
        if os.getpid() == _owner_pid:
            close_all_bounded()
    finally:
        end_stop()
    if interrupt:
        raise SignalInterrupt(signum)
    if callable(previous):
        previous(signum, frame)
    elif previous == signal.SIG_IGN:
        return
    else:  # SIG_DFL (or unknown, set from C): restore it and let the signal do what it does
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)


def install_signal_handlers() -> bool:
    """Install the chaining handlers, once per signal. Only possible from the main thread;
    returns whether ours are in place (False off the main thread, or where someone replaced
    ours after we installed them: theirs is left alone)."""
    if threading.current_thread() is not threading.main_thread():
        return False
    ok = True
    with _lock:
        for signum in HANDLED_SIGNALS:
            current = signal.getsignal(signum)
            if current is _handler or current == signal.SIG_IGN:  # ignored (nohup): nothing to clean up for
                continue
            if signum in _installed and current not in (signal.SIG_DFL, signal.default_int_handler):
                ok = False  # installed after ours (and maybe chaining to it): not ours to replace
                continue
            try:
                signal.signal(signum, _handler)
            except (ValueError, OSError):
                ok = False
                continue
            _previous[signum] = current
            _installed.add(signum)
    return ok


_owner_pid = os.getpid()


def _forget_after_fork() -> None:
    """In a forked child: the parent's resources are not ours to close."""
    global _lock, _owner_pid, _fatal, _reaper, _reaper_lock, _requests
    _lock = threading.RLock()  # another thread may have held it at the fork
    _reaper_lock = threading.Lock()
    _reaper = None  # threads do not survive a fork
    _requests = queue.SimpleQueue()
    _live.clear()
    _stops.clear()  # the parent's stop is the parent's
    _fatal = False
    _owner_pid = os.getpid()


os.register_at_fork(after_in_child=_forget_after_fork)
atexit.register(close_all)
with contextlib.suppress(Exception):  # imported from the main thread: install right away
    install_signal_handlers()
