"""Sessions: one env per client, slots that cannot leak, and where env code runs.

A session holds one env instance and a capacity slot. It is *attached* while a WebSocket serves
it and *detached* otherwise (an HTTP session, or a WebSocket that dropped). The rules:

- A detached session is reclaimed once it has been idle for the TTL (on by default): a client
  that vanished gives its slot back, and one that only lost its network can reattach within
  the TTL with its session id and carry on with the same episode.
- An attached session is not reclaimed for short idleness: a model may think for minutes. Its
  liveness is the transport's job -- WebSocket pings (uvicorn's ``ws_ping_interval``) close a
  half-open connection, which detaches the session and starts its TTL. A client that is alive
  but hung (its library still answers pings) is closed after ``attached_idle_s`` without a
  message (an hour by default; ``None`` turns it off).
- At capacity, expired sessions are reaped first; if none is, the caller gets an explicit
  :class:`CapacityError` with a retry hint, never a hang.
- Session ids are 256-bit ``secrets.token_urlsafe`` values: holding one is the capability to
  drive that episode, so it is unguessable and never appears in metrics or logs.

Env code is synchronous and may block (sandboxes, verifiers). By default (``executor="auto"``)
an env whose family declares no sandbox runs inline on the event loop -- a thread hop costs more
than such a step -- and any env with a sandbox runs on a worker thread. An inline call that turns
out slow demotes the server to threads for good, with a warning, so a mis-declared env costs
one stalled step, not a stalled server.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

from envhub.env import Env
from envhub.server.metrics import Metrics

try:
    import resource

    _RUSAGE_THREAD: int | None = resource.RUSAGE_THREAD  # Linux
except (ImportError, AttributeError):  # pragma: no cover - other platforms judge by wall time
    _RUSAGE_THREAD = None

log = logging.getLogger(__name__)
T = TypeVar("T")
#: WebSocket close code for a connection closed by the attached idle timeout.
HUNG_CLOSE = 4002
Executor = Literal["auto", "inline", "thread"]


@dataclass(frozen=True)
class SessionConfig:
    max_sessions: int = 64
    ttl_s: float = 300.0
    #: An attached connection silent this long is closed (code 4002); None = never.
    attached_idle_s: float | None = 3600.0
    executor: Executor = "auto"
    #: An inline env call slower than this moves all env calls to threads.
    slow_call_s: float = 0.05

    def __post_init__(self) -> None:
        if self.max_sessions < 1:
            raise ValueError("max_sessions must be at least 1")
        if not self.ttl_s > 0:
            raise ValueError("the session TTL must be positive")
        if self.attached_idle_s is not None and not self.attached_idle_s > 0:
            raise ValueError("the attached idle timeout must be positive (or None)")
        if self.executor not in ("auto", "inline", "thread"):
            raise ValueError(f"executor must be auto, inline or thread, not {self.executor!r}")

    @property
    def reap_interval_s(self) -> float:
        return max(0.05, min(self.ttl_s / 4, 5.0))


class CapacityError(Exception):
    def __init__(self, active: int, maximum: int, retry_after_s: float) -> None:
        super().__init__(
            f"server at capacity: {active} of {maximum} sessions in use; retry in about "
            f"{retry_after_s:.0f}s (idle sessions are reclaimed after their TTL)"
        )
        self.active = active
        self.maximum = maximum
        self.retry_after_s = retry_after_s


@dataclass(eq=False)
class Session:
    id: str
    env: Env
    created: float
    last_active: float
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    #: The connection serving this session (a WebSocket), or None when detached.
    attachment: Any = None
    #: Operations in flight; a busy session is never reaped.
    busy: int = 0
    episode_id: str | None = None
    episodes: int = 0
    #: Idempotent retries: the last request id and its reply, replayed if the id repeats.
    last_request_id: str | None = None
    last_reply: str | None = None
    #: The request being executed now, so a retry of it waits for its reply instead of re-running it.
    inflight_id: str | None = None
    inflight_done: asyncio.Event | None = None
    episode_counted: bool = False
    closed: bool = False

    @property
    def attached(self) -> bool:
        return self.attachment is not None


class SessionManager:
    """Creates, finds, attaches and reclaims sessions; runs env calls by the executor policy."""

    def __init__(self, factory: Callable[[], Env], config: SessionConfig, metrics: Metrics,
                 *, inline_safe: bool) -> None:
        self.factory = factory
        self.config = config
        self.metrics = metrics
        self.sessions: dict[str, Session] = {}
        self._reserved = 0
        self.inline = config.executor == "inline" or (config.executor == "auto" and inline_safe)
        self._cpu_strikes: list[float] = []
        self._pool: ThreadPoolExecutor | None = None
        self._reaper: asyncio.Task[None] | None = None
        self._closing: set[asyncio.Task[None]] = set()

    # ---- lifecycle ------------------------------------------------------------------------------

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        if self._reaper is None or self._reaper.done() or self._reaper.get_loop() is not loop:
            self._reaper = loop.create_task(self._reap_forever(), name="envhub-session-reaper")

    async def stop(self) -> None:
        """Close every session. Tolerates a lifespan that runs again, or on another event loop
        (test clients do both)."""
        reaper, self._reaper = self._reaper, None
        if reaper is not None and reaper.get_loop() is asyncio.get_running_loop():
            reaper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reaper
        elif reaper is not None and not reaper.get_loop().is_closed():
            reaper.get_loop().call_soon_threadsafe(reaper.cancel)
        for sid in list(self.sessions):
            await self.close(sid, "closed")
        if self._closing:
            await asyncio.gather(*self._closing, return_exceptions=True)
        pool, self._pool = self._pool, None
        if pool is not None:  # a later start (an app's lifespan can run again) gets a fresh pool
            pool.shutdown(wait=False, cancel_futures=True)

    def _threads(self) -> ThreadPoolExecutor:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=max(4, min(self.config.max_sessions, 256)),
                                            thread_name_prefix="envhub-env")
        return self._pool

    # ---- queries --------------------------------------------------------------------------------

    @property
    def active(self) -> int:
        return len(self.sessions) + self._reserved

    @property
    def attached(self) -> int:
        return sum(1 for s in self.sessions.values() if s.attached)

    def get(self, session_id: str | None) -> Session | None:
        """The live session with this id, or None (unknown, closed or expired)."""
        if not session_id:
            return None
        session = self.sessions.get(session_id)
        if session is None or self._expired(session, time.monotonic()):
            return None
        return session

    # ---- create / close -------------------------------------------------------------------------

    async def create(self, route: str) -> Session:
        if self.active >= self.config.max_sessions:
            await self.reap(time.monotonic())
        if self.active >= self.config.max_sessions:
            self.metrics.capacity_rejected(route)
            raise CapacityError(self.active, self.config.max_sessions, self._retry_after())
        self._reserved += 1  # hold the slot while the env is built off the loop
        try:
            env = await self.call(self.factory, inline=False)
        finally:
            self._reserved -= 1
        now = time.monotonic()
        session = Session(id=secrets.token_urlsafe(32), env=env, created=now, last_active=now)
        self.sessions[session.id] = session
        self._publish()
        return session

    async def close(self, session_id: str, why: str) -> bool:
        """Free the slot now; close the env in the background (a sandbox may take a while)."""
        session = self.sessions.pop(session_id, None)
        if session is None:
            return False
        session.closed = True
        self.metrics.session_closed(why)
        self._publish()
        task = asyncio.create_task(self._close_env(session))
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)
        return True

    async def _close_env(self, session: Session) -> None:
        async with session.lock:  # never under a running step
            try:
                await self.call(session.env.close, inline=False)
            except Exception:  # best effort: `envhub sandbox prune` removes what is left
                log.warning("closing the env of a session failed", exc_info=True)

    # ---- attachment -----------------------------------------------------------------------------

    def attach(self, session: Session, conn: Any) -> Any:
        """Make ``conn`` the session's connection; returns the one it replaced, if any."""
        previous, session.attachment = session.attachment, conn
        session.last_active = time.monotonic()
        self._publish()
        return previous

    def detach(self, session: Session, conn: Any) -> None:
        """``conn`` went away; the session's TTL starts now (unless another conn took over)."""
        if session.attachment is conn:
            session.attachment = None
            session.last_active = time.monotonic()
            self._publish()

    # ---- running env code -----------------------------------------------------------------------

    async def call(self, fn: Callable[..., T], *args: Any, inline: bool | None = None) -> T:
        """Run env code by the executor policy (see the module docstring)."""
        if inline if inline is not None else self.inline:
            t0 = time.perf_counter()
            before = _blocking_marks()
            result = fn(*args)
            elapsed = time.perf_counter() - t0
            if elapsed > self.config.slow_call_s and self.inline and self.config.executor == "auto":
                self._judge_slow_call(elapsed, before)
            return result
        return await asyncio.get_running_loop().run_in_executor(self._threads(), fn, *args)

    def _judge_slow_call(self, elapsed: float, before: tuple[float, int] | None) -> None:
        """Demote to threads only if the call itself was the problem: it burned CPU, or it
        blocked (a voluntary context switch: I/O, sleep, a subprocess). A call that was merely
        preempted on a busy machine says nothing about the env and keeps the fast path."""
        after = _blocking_marks()
        if before is not None and after is not None:
            cpu, blocked = after[0] - before[0], after[1] - before[1]
            if blocked == 0:
                if cpu < self.config.slow_call_s:
                    return
                # CPU-heavy: once in a while that is a garbage collection that ran inside the call;
                # an env that is itself heavy is slow again and again
                now = time.monotonic()
                self._cpu_strikes = [t for t in self._cpu_strikes if now - t < 10.0] + [now]
                if len(self._cpu_strikes) < 3:
                    return
            why = f"it used {cpu:.3f}s of CPU" if blocked == 0 else "it blocked"
        else:
            why = "it was slow"
        self.inline = False
        log.warning("an env call took %.3fs on the event loop (%s); env calls now run on worker threads "
                    "(start with --executor thread to skip this)", elapsed, why)

    def touch(self, session: Session) -> None:
        session.last_active = time.monotonic()

    # ---- reclamation ----------------------------------------------------------------------------

    def _expired(self, session: Session, now: float) -> bool:
        return (not session.attached and session.busy == 0
                and now - session.last_active > self.config.ttl_s)

    def _hung(self, session: Session, now: float) -> bool:
        limit = self.config.attached_idle_s
        return (limit is not None and session.attached and session.busy == 0
                and now - session.last_active > limit)

    async def reap(self, now: float) -> int:
        expired = [s.id for s in self.sessions.values() if self._expired(s, now)]
        for sid in expired:
            await self.close(sid, "idle_expired")
        hung = [s for s in self.sessions.values() if self._hung(s, now)]
        for session in hung:
            conn = session.attachment
            await self.close(session.id, "attached_idle")
            with contextlib.suppress(Exception):  # the peer may be gone already
                await conn.close(code=HUNG_CLOSE, reason="no message within the idle timeout")
        return len(expired) + len(hung)

    async def _reap_forever(self) -> None:
        while True:
            await asyncio.sleep(self.config.reap_interval_s)
            try:
                await self.reap(time.monotonic())
            except Exception:  # the reaper must outlive any one bad session
                log.warning("session reaper error", exc_info=True)

    def _retry_after(self) -> float:
        now = time.monotonic()
        waits = [self.config.ttl_s - (now - s.last_active) for s in self.sessions.values() if not s.attached]
        return max(1.0, min(waits)) if waits else self.config.ttl_s

    def _publish(self) -> None:
        self.metrics.set_sessions(self.active, self.attached, self.config.max_sessions)


def _blocking_marks() -> tuple[float, int] | None:
    """(CPU seconds, voluntary context switches) of this thread, where the OS reports them."""
    if _RUSAGE_THREAD is None:
        return None
    usage = resource.getrusage(_RUSAGE_THREAD)
    return usage.ru_utime + usage.ru_stime, usage.ru_nvcsw
