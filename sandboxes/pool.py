"""Warm pools: sandboxes started ahead of time and reset to pristine between episodes.

A cold Docker sandbox costs a few hundred milliseconds (create, start, attach, first ping); a
reset through the resident executor (kill every process, wipe the tmpfs dirs) costs about a
millisecond. A pool keeps ``size`` idle sandboxes per (backend, spec), hands one out per
:meth:`SandboxPool.acquire`, and resets it when the lease is released.

A sandbox that died (its container was killed, its executor vanished) makes the lease's calls
raise :class:`SandboxError` -- the episode ends as ``env_error`` -- and is replaced in the
background when the lease comes back. ``acquire`` never blocks on a full pool: it starts a
fresh sandbox when none is idle, so a caller holding several leases cannot deadlock.

A pool that is closed, or a process that is stopping (:func:`.cleanup.shutting_down`: a signal's
cleanup, an interrupted run ending), starts and replaces nothing: a sandbox that fails then was
closed by the stop, not broken, and is dropped without a warning. Sandboxes being started are
held by the pool from before their start, so :meth:`SandboxPool.close` closes them too, and their
start fails instead of handing out a sandbox after the close.
"""

from __future__ import annotations

import logging
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from envhub.sandboxes import cleanup
from envhub.sandboxes.base import ExecResult, Limits, Listing, SandboxError, SandboxSpec, Tree
from envhub.sandboxes.resident import ResidentSandbox

log = logging.getLogger(__name__)
#: Sandbox start-ups a pool runs at once; more wait their turn. Past this a burst's starts only
#: share the CPU (and the Docker engine) more thinly: every one ends late instead of most early.
START_PARALLEL = max(4, 2 * (os.cpu_count() or 1))


@dataclass
class PoolStats:
    created: int = 0
    reused: int = 0
    resets: int = 0
    replaced: int = 0


class PooledSandbox:
    """A lease on a pooled sandbox: the whole :class:`Sandbox` protocol, plus ``release``.

    ``close()`` releases too (reset and back to the pool), so code written for a plain sandbox
    -- ``with create_sandbox(...) as sb`` -- works unchanged with a pooled one.
    """

    def __init__(self, pool: SandboxPool, sandbox: ResidentSandbox) -> None:
        self._pool = pool
        self._sandbox: ResidentSandbox | None = sandbox
        self.backend = sandbox.backend
        self.workdir = sandbox.workdir
        self.limits: Limits = sandbox.limits

    @property
    def sandbox(self) -> ResidentSandbox:
        if self._sandbox is None:
            raise SandboxError("this pooled sandbox was released")
        return self._sandbox

    def exec(self, cmd: str | list[str], *, timeout: float | None = None, stdin: str | bytes | None = None,
             env: dict[str, str] | None = None, cwd: str | None = None, contain: bool = False) -> ExecResult:
        return self.sandbox.exec(cmd, timeout=timeout, stdin=stdin, env=env, cwd=cwd, contain=contain)

    def exec_python(self, source: str, *, timeout: float | None = None, env: dict[str, str] | None = None,
                    cwd: str | None = None, contain: bool = False) -> ExecResult:
        return self.sandbox.exec_python(source, timeout=timeout, env=env, cwd=cwd, contain=contain)

    def read_tree(self, src: str = ".", max_bytes: int = 64 * 1024 * 1024) -> Tree:
        return self.sandbox.read_tree(src, max_bytes)

    def write_files(self, files: dict[str, str | bytes]) -> None:
        self.sandbox.write_files(files)

    def read_file(self, path: str) -> bytes:
        return self.sandbox.read_file(path)

    def list_files(self, path: str = ".") -> Listing:
        return self.sandbox.list_files(path)

    def copy_in(self, host_dir: str, dest: str = ".") -> None:
        self.sandbox.copy_in(host_dir, dest)

    def copy_out(self, src: str, host_dir: str) -> list[str]:
        return self.sandbox.copy_out(src, host_dir)

    def reset(self) -> None:
        self.sandbox.reset()

    def alive(self, timeout: float = 5.0) -> bool:
        return self._sandbox is not None and self._sandbox.alive(timeout)

    def release(self) -> None:
        """Reset the sandbox and return it to the pool. Idempotent."""
        sandbox, self._sandbox = self._sandbox, None
        if sandbox is not None:
            self._pool._give_back(sandbox)

    close = release

    def __enter__(self) -> PooledSandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def __getattr__(self, name: str) -> Any:  # backend extras, e.g. DockerSandbox.container_id
        return getattr(self.sandbox, name)

    def __repr__(self) -> str:
        return f"<PooledSandbox {self._sandbox!r}>"


class SandboxPool:
    """``size`` warm sandboxes of one backend and spec. See the module docstring."""

    def __init__(self, backend: str = "auto", spec: SandboxSpec | None = None, size: int = 2, *,
                 prestart: bool = True) -> None:
        from envhub.sandboxes.factory import unstarted_sandbox
        from envhub.sandboxes.selection import select_backend

        self.backend = select_backend(backend)
        self.spec = spec or SandboxSpec()
        self.size = max(0, int(size))
        self.stats = PoolStats()
        self._new = lambda: unstarted_sandbox(self.backend, self.spec)
        self._idle: list[ResidentSandbox] = []
        self._starting: dict[int, ResidentSandbox] = {}
        self._lock = threading.Lock()
        self._closed = False
        self._refills: list[threading.Thread] = []
        self._start_slots = threading.BoundedSemaphore(START_PARALLEL)
        cleanup.track(self)
        if prestart:
            try:
                for _ in range(self.size):
                    self._add_idle(self._start_one())
            except BaseException:
                self.close()
                raise

    def _stopping(self) -> bool:
        """Closed, or the process is stopping: start nothing, replace nothing, warn of nothing."""
        return self._closed or cleanup.shutting_down()

    def _start_one(self) -> ResidentSandbox:
        """A started sandbox, held by the pool while it starts; SandboxError when the pool is
        closed or the process stops, before the start or during it (the close closes it)."""
        if self._stopping():
            raise SandboxError(f"the {self.backend} sandbox pool is {'closed' if self._closed else 'stopping'}")
        sandbox = self._new()
        with self._lock:
            held = not self._stopping()
            if held:
                self._starting[id(sandbox)] = sandbox
        if not held:  # closed or stopped between the check and now
            sandbox.close()
            raise SandboxError(f"the {self.backend} sandbox pool closed while a sandbox was being made")
        try:
            with self._start_slots:
                sandbox.start()
        finally:
            with self._lock:
                self._starting.pop(id(sandbox), None)
        if sandbox.closed:  # the pool's close (or a stop) closed it just as its start ended
            raise SandboxError(f"the {self.backend} sandbox pool closed while a sandbox was starting")
        with self._lock:
            self.stats.created += 1
        return sandbox

    def _add_idle(self, sandbox: ResidentSandbox) -> None:
        with self._lock:
            if not self._closed and len(self._idle) < self.size:
                self._idle.append(sandbox)
                return
        sandbox.close()

    @property
    def idle(self) -> int:
        with self._lock:
            return len(self._idle)

    def acquire(self) -> PooledSandbox:
        """A ready, pristine sandbox: an idle one if any (checked alive), else a fresh one."""
        while True:
            with self._lock:
                if self._closed:
                    raise SandboxError("the sandbox pool is closed")
                sandbox = self._idle.pop() if self._idle else None
            if sandbox is None:
                return PooledSandbox(self, self._start_one())
            if sandbox.alive(timeout=5.0):
                with self._lock:
                    self.stats.reused += 1
                return PooledSandbox(self, sandbox)
            if sandbox.closed or self._stopping():  # closed by a stop, not dead: no warning
                sandbox.close()
                continue  # and the next round starts none while stopping
            log.warning("pooled %s sandbox %r died while idle; replacing it", self.backend, sandbox)
            sandbox.close()
            with self._lock:
                self.stats.replaced += 1

    def prewarm(self, count: int) -> int:
        """Keep at least ``count`` idle from now on and start sandboxes until that many are idle,
        :data:`START_PARALLEL` at a time; returns how many started. Blocks until they have; a
        start that fails is logged (``acquire`` starts one on demand instead)."""
        with self._lock:
            self.size = max(self.size, int(count))
            missing = self.size - len(self._idle)
        if missing <= 0 or self._stopping():
            return 0
        started = 0
        with ThreadPoolExecutor(min(missing, START_PARALLEL), thread_name_prefix="envhub-pool-prewarm") as workers:
            for future in [workers.submit(self._start_one) for _ in range(missing)]:
                try:
                    self._add_idle(future.result())
                    started += 1
                except Exception as exc:
                    if not self._stopping():
                        log.warning("could not prewarm a pooled %s sandbox: %s", self.backend, exc)
        return started

    def _give_back(self, sandbox: ResidentSandbox) -> None:
        if self._stopping() or sandbox.closed:  # a closed one was closed by a stop: not broken
            sandbox.close()
            return
        try:
            sandbox.reset()
        except SandboxError as exc:
            if self._stopping() or sandbox.closed:  # the stop began while it was being reset
                sandbox.close()
                return
            log.warning("pooled %s sandbox %r is broken (%s); replacing it", self.backend, sandbox, exc)
            sandbox.close()
            with self._lock:
                self.stats.replaced += 1
            self._refill_in_background()
            return
        with self._lock:
            self.stats.resets += 1
        self._add_idle(sandbox)

    def _refill_in_background(self) -> None:
        def refill() -> None:
            try:
                if not self._stopping() and self.idle < self.size:
                    self._add_idle(self._start_one())
            except Exception as exc:  # acquire() will start one on demand instead
                if not self._stopping():  # a stop closed it while it started: nothing went wrong
                    log.warning("could not replace a pooled %s sandbox: %s", self.backend, exc)

        thread = threading.Thread(target=refill, name="envhub-pool-refill", daemon=True)
        with self._lock:
            if self._stopping():
                return
            thread.start()  # under the lock: close() sees it started, or it never starts
            self._refills = [t for t in self._refills if t.is_alive()] + [thread]

    def wait_refills(self, timeout: float = 60.0) -> None:
        """Block until background replacements are done (tests, orderly shutdown)."""
        with self._lock:
            threads = list(self._refills)
        for thread in threads:
            thread.join(timeout)

    def close(self) -> None:
        """Close the idle sandboxes and those being started (whose start then fails); wait for the
        background replacements, which end as soon as their start does. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            idle, self._idle = self._idle, []
            starting = list(self._starting.values())
        cleanup.untrack(self)
        for sandbox in [*idle, *starting]:
            sandbox.close()
        self.wait_refills(timeout=30.0)

    def __enter__(self) -> SandboxPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<SandboxPool {self.backend} size={self.size} idle={self.idle} {self.stats}>"


_shared: dict[tuple[str, Any], SandboxPool] = {}
_shared_lock = threading.Lock()


def _forget_after_fork() -> None:
    """In a forked child (multiprocessing, Gymnasium's AsyncVectorEnv): the parent's pooled
    sandboxes are not ours. Their executor pipes are shared with the parent, so using one would
    interleave two processes' requests on one channel; the child starts its own pools instead.
    The forgotten pools are left untouched (never closed here): closing would tear down the
    parent's sandboxes."""
    global _shared_lock
    _shared_lock = threading.Lock()  # another thread may have held it at the fork
    _shared.clear()


os.register_at_fork(after_in_child=_forget_after_fork)


def open_pools() -> list[SandboxPool]:
    """The process-wide pools that are open now (a snapshot, e.g. for metrics)."""
    with _shared_lock:
        return [p for p in _shared.values() if not p._closed]


def shared_pool(backend: str, spec: SandboxSpec | None = None, size: int = 2) -> SandboxPool:
    """The process-wide pool for (backend, spec), created on first use without pre-starting:
    the first episodes pay a cold start, later ones get a reset sandbox."""
    spec = spec or SandboxSpec()
    key = (backend, spec.key())
    with _shared_lock:
        pool = _shared.get(key)
        if pool is None or pool._closed:
            pool = _shared[key] = SandboxPool(backend, spec, size, prestart=False)
        return pool
