"""Many episodes over per-thread envs: :class:`EnvWorkers`, :class:`EpisodeCollector`, :func:`collect`.

:class:`EnvWorkers` is the one per-thread env pool: worker threads that each make an env on first
use and keep it as long as the pool lives; closing the pool closes every env it made, however the
work ended. :class:`EpisodeCollector` runs planned episodes (:mod:`envhub.rollout.episodes`) on it: for
``run_rollouts`` and the trainer. The verifier suite and ``grade_submissions`` run their scripted
plays on it.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import signal
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Generic, TypeVar

from envhub.episode import EpisodeEnv
from envhub.policies import Policy
from envhub.rollout.episodes import (
    EpisodePlan,
    crash_detail,
    describe_policy,
    env_versions,
    infra_record,
    plan_episodes,
    run_episode,
)
from envhub.sandboxes import cleanup
from envhub.sandboxes.cleanup import SignalInterrupt, close_all_bounded
from envhub.types import TrajectoryRecord

log = logging.getLogger(__name__)

T = TypeVar("T")
R = TypeVar("R")
E = TypeVar("E", bound=EpisodeEnv)

#: How often a waiting iterator looks at its ``abandon`` event (seconds).
POLL_S = 0.2


# ---- the per-thread env pool ------------------------------------------------------------------


class _LoopEnded:
    """Put on a run's queue once per worker loop, however the loop ended (even never started)."""


class EnvWorkers(Generic[E]):
    """Up to ``concurrency`` worker threads, each with its own env from ``env_factory`` (any
    :class:`~envhub.episode.EpisodeEnv`: a local env or a served one).

    A thread makes its env on first use and keeps it as long as the pool lives; :meth:`close`
    (or leaving the ``with`` block) waits for the work in flight and closes every env made,
    however the work ended. Thread-safe; runs started at the same time share the threads (one
    run's items start when another's threads are free).
    """

    def __init__(self, env_factory: Callable[[], E], *, concurrency: int = 4,
                 thread_name_prefix: str = "envhub-env") -> None:
        check_concurrency(concurrency)
        self.concurrency = concurrency
        self._factory = env_factory
        self._pool = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix=thread_name_prefix)
        self._local = threading.local()
        self._envs: list[E] = []
        self._lock = threading.Lock()
        self._closed = threading.Event()

    def env(self) -> E:
        """The calling thread's env, made on first use. What the factory raises is raised here,
        and the thread's next call tries again."""
        env = getattr(self._local, "env", None)
        if env is None:
            env = self._factory()
            with self._lock:
                self._envs.append(env)
            self._local.env = env
        return env

    @property
    def envs(self) -> list[E]:
        """Every env made so far (for describing a run; each belongs to its thread)."""
        with self._lock:
            return list(self._envs)

    def as_completed(self, fn: Callable[[E, T], R], items: Iterable[T], *,
                     stop: threading.Event | None = None, abandon: threading.Event | None = None,
                     on_env_error: Callable[[T, Exception], R] | None = None) -> Iterator[R]:
        """``fn(env, item)`` for each item on the worker threads; results in completion order.

        ``on_env_error(item, exc)`` answers for an item whose thread could not make its env
        (without it, the factory's exception is raised from the iterator). An exception of ``fn``
        is raised from the iterator and ends the run. When ``stop`` is set, no further item starts:
        the items in flight finish and are yielded, then the iterator ends. When ``abandon`` is
        set, or the iterator is closed early (``break``, ``close()``), it ends within
        :data:`POLL_S`: no further item starts and the items in flight are dropped -- they run on
        in their threads until they end (:meth:`close` waits for them).
        """
        if self._closed.is_set():
            raise RuntimeError("these env workers are closed")
        return self._iterate(fn, iter(items), stop, abandon, on_env_error)

    def _iterate(self, fn: Callable[[E, T], R], items: Iterator[T], stop: threading.Event | None,
                 abandon: threading.Event | None, on_env_error: Callable[[T, Exception], R] | None) -> Iterator[R]:
        results: queue.SimpleQueue[tuple[bool, Any] | type[_LoopEnded]] = queue.SimpleQueue()
        ended = threading.Event()  # the iterator is done: take no further item
        take = threading.Lock()
        halts = [e for e in (ended, stop, abandon, self._closed) if e is not None]

        def one(item: T) -> tuple[bool, Any]:
            try:
                env = self.env()
            except Exception as exc:
                if on_env_error is None:
                    return False, exc
                return _call(on_env_error, item, exc)
            return _call(fn, env, item)

        def loop() -> None:
            while True:
                with take:
                    if any(e.is_set() for e in halts):
                        return
                    try:
                        item = next(items, _LoopEnded)
                    except Exception as exc:  # the items' own iterator broke: that ends the run
                        results.put((False, exc))
                        return
                if item is _LoopEnded:
                    return
                try:
                    results.put(one(item))  # type: ignore[arg-type]
                except BaseException as exc:  # SystemExit and the like: raised to the consumer, not lost
                    results.put((False, exc))
                    return

        loops = 0
        try:
            for _ in range(self.concurrency):
                future: Future[None] = self._pool.submit(loop)
                future.add_done_callback(lambda _f: results.put(_LoopEnded))
                loops += 1
        except RuntimeError:  # the pool was shut down meanwhile (close() from another thread)
            if not loops:
                raise RuntimeError("these env workers are closed") from None
        try:
            while loops:
                if abandon is not None and abandon.is_set():
                    return
                try:
                    message = results.get(timeout=POLL_S)
                except queue.Empty:
                    continue
                if message is _LoopEnded:
                    loops -= 1
                    continue
                ok, value = message  # type: ignore[misc]
                if not ok:
                    raise value
                yield value
        finally:
            ended.set()

    def map(self, fn: Callable[[E, T], R], items: Iterable[T], *,
            on_env_error: Callable[[T, Exception], R] | None = None) -> list[R]:
        """:meth:`as_completed`, collected in the order of ``items``."""
        indexed = list(enumerate(items))
        fallback = (lambda pair, exc: (pair[0], on_env_error(pair[1], exc))) if on_env_error else None
        done = dict(self.as_completed(lambda env, pair: (pair[0], fn(env, pair[1])), indexed,
                                      on_env_error=fallback))
        return [done[i] for i, _ in indexed]

    def close(self) -> None:
        """Wait for the work in flight (queued work never starts), then close every env made.
        Idempotent. A failing env close is logged and the others are still closed."""
        with self._lock:
            if self._closed.is_set():
                return
            self._closed.set()
        self._pool.shutdown(wait=True, cancel_futures=True)
        for env in self.envs:
            try:
                env.close()
            except Exception as exc:
                log.warning("closing env %s failed: %r", getattr(env, "env_id", env), exc)

    def __enter__(self) -> EnvWorkers[E]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _call(fn: Callable[..., Any], *args: Any) -> tuple[bool, Any]:
    try:
        return True, fn(*args)
    except Exception as exc:
        return False, exc


def check_concurrency(concurrency: Any, name: str = "--concurrency") -> None:
    """ValueError unless ``concurrency`` is a positive integer."""
    if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
        raise ValueError(f"{name} must be a positive integer, got {concurrency!r}")


# ---- the episode collector --------------------------------------------------------------------


class EpisodeCollector:
    """Runs planned episodes over per-thread envs that live as long as the collector (closed
    however it ends: :meth:`close`, or leaving the ``with`` block).

    ``policy_info`` (default :func:`describe_policy`) goes into every record. ``env_id`` names
    the env in the records of episodes whose env could not be made, until one env was.
    """

    def __init__(self, env_factory: Callable[[], EpisodeEnv], policy: Policy, *, concurrency: int = 4,
                 policy_info: dict[str, Any] | None = None, env_id: str = "") -> None:
        self.policy = policy
        self.policy_info = dict(policy_info) if policy_info is not None else describe_policy(policy)
        self.env_id = env_id
        self.workers: EnvWorkers[EpisodeEnv] = EnvWorkers(env_factory, concurrency=concurrency,
                                                          thread_name_prefix="envhub-episode")

    def run(self, plans: Sequence[EpisodePlan], *, stop: threading.Event | None = None,
            abandon: threading.Event | None = None) -> Iterator[TrajectoryRecord]:
        """One record per plan, in completion order. It never raises for an episode's failure:
        an env that cannot be made, a crash or an engine error is that episode's infra record,
        with the traceback (:func:`run_episode`).

        When ``stop`` is set, no further episode starts; the episodes in flight finish and are
        yielded, then the iterator ends. When ``abandon`` is set, or the iterator is closed early
        (``break``, ``close()``), it ends at once: queued episodes never start and those in flight
        are dropped (they end in their threads; :meth:`close` waits for them).
        """
        return self.workers.as_completed(self._episode, plans, stop=stop, abandon=abandon,
                                         on_env_error=self._no_env)

    def _episode(self, env: EpisodeEnv, plan: EpisodePlan) -> TrajectoryRecord:
        return run_episode(env, self.policy, plan, self.policy_info)

    def _no_env(self, plan: EpisodePlan, exc: Exception) -> TrajectoryRecord:
        made = self.workers.envs
        env = made[0] if made else None
        versions = None
        if env is not None:
            with contextlib.suppress(Exception):
                versions = env_versions(env, self.policy_info, [])
        return infra_record(plan, self.policy_info, crash_detail(exc, "env construction failed"),
                            env_id=env.env_id if env is not None else self.env_id, versions=versions)

    def close(self) -> None:
        """Wait for the episodes in flight, then close every env made. Idempotent."""
        self.workers.close()

    def __enter__(self) -> EpisodeCollector:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def collect(plans: Sequence[EpisodePlan], env_factory: Callable[[], EpisodeEnv], policy: Policy, *,
            concurrency: int = 4, policy_info: dict[str, Any] | None = None,
            stop: threading.Event | None = None, abandon: threading.Event | None = None,
            env_id: str = "") -> Iterator[TrajectoryRecord]:
    """:meth:`EpisodeCollector.run` of a collector made for these plans and closed when the
    iterator ends (exhausted, closed early, or garbage-collected)."""
    collector = EpisodeCollector(env_factory, policy, concurrency=concurrency, policy_info=policy_info,
                                 env_id=env_id)
    try:
        yield from collector.run(plans, stop=stop, abandon=abandon)
    finally:
        collector.close()


# ---- interrupting a run -----------------------------------------------------------------------

def end_episodes_in_flight() -> None:
    """For an interrupted run: its episodes in flight end now (their sandboxes are closed, within
    the bounded time a signal handler allows) and are not kept."""
    try:
        close_all_bounded()
    except Exception as exc:
        log.warning("closing the sandboxes of an interrupted run failed: %r", exc)


class StopRequest(threading.Event):
    """Set when a signal asked the run to stop; :attr:`signum` says which (SIGINT for Ctrl-C)."""

    signum: int = signal.SIGINT


@contextlib.contextmanager
def ctrl_c_requests_stop() -> Iterator[StopRequest]:
    """While the block runs, Ctrl-C -- and each signal the command maps to it
    (:func:`envhub.sandboxes.cleanup.signals_interrupt`, e.g. SIGTERM) -- sets the event instead of
    raising ``KeyboardInterrupt`` wherever the main thread happens to be: raised inside
    ``concurrent.futures``' or a queue's lock handling, it can leave a lock held and deadlock the
    run. A second signal raises :class:`~envhub.sandboxes.cleanup.SignalInterrupt` at once. Off the
    main thread (no signals there) the event is never set."""
    stop = StopRequest()
    if threading.current_thread() is not threading.main_thread():
        yield stop
        return

    def on_signal(signum: int, frame: Any) -> None:
        if stop.is_set():
            raise SignalInterrupt(signum)
        stop.signum = signum
        stop.set()

    previous = {signum: signal.signal(signum, on_signal) for signum in cleanup.interrupt_signals()}
    try:
        yield stop
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


class RunInterrupt:
    """How a run on worker threads ends when a signal stops it (:func:`interruptible_run`)."""

    def __init__(self, requested: StopRequest, on_interrupt: Callable[[], object] | None) -> None:
        #: set when the run was asked to stop: its loop passes it as ``abandon``
        self.requested = requested
        self._on_interrupt = on_interrupt
        self._end_stop: Callable[[], None] | None = None

    def stop_if_requested(self) -> None:
        """After the run's loop: when a stop was requested, stop -- the process is stopping until
        the run's block has ended, so nothing is started, and nothing replaces what the stop
        closes -- say so (``on_interrupt``) before anything can hold that up, end the work in
        flight, and raise :class:`~envhub.sandboxes.cleanup.SignalInterrupt`."""
        if not self.requested.is_set():
            return
        self._end_stop = self._end_stop or cleanup.begin_stop()
        if self._on_interrupt is not None:
            try:
                self._on_interrupt()
            except Exception as exc:  # saying where it stood must never keep the run from stopping
                log.warning("reporting the interrupted run failed: %r", exc)
        end_episodes_in_flight()
        raise SignalInterrupt(self.requested.signum)

    def end(self) -> None:
        if self._end_stop is not None:
            self._end_stop()


@contextlib.contextmanager
def interruptible_run(on_interrupt: Callable[[], object] | None = None) -> Iterator[RunInterrupt]:
    """A block around a whole run on worker threads (its workers are made and closed inside it).

    Ctrl-C (and the signals mapped to it) only requests a stop (:func:`ctrl_c_requests_stop`);
    the run's loop, given ``interrupt.requested`` as ``abandon``, ends within :data:`POLL_S`, and
    ``interrupt.stop_if_requested()`` after it calls ``on_interrupt`` first -- the message saying
    where the run stood is out whatever the sandboxes and pools are doing -- then ends the work in
    flight and raises :class:`~envhub.sandboxes.cleanup.SignalInterrupt`. From then until the
    block has ended, the process is stopping (:func:`envhub.sandboxes.cleanup.begin_stop`): the
    work in flight fails as the stop closes its sandboxes, and no pool replaces one."""
    with ctrl_c_requests_stop() as requested:
        interrupt = RunInterrupt(requested, on_interrupt)
        try:
            yield interrupt
        finally:
            interrupt.end()


__all__ = [
    "EnvWorkers", "EpisodeCollector", "EpisodePlan", "RunInterrupt", "StopRequest", "collect", "ctrl_c_requests_stop",
    "describe_policy", "end_episodes_in_flight", "infra_record", "interruptible_run", "plan_episodes", "run_episode",
]
