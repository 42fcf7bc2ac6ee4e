"""An env's one door to a sandbox: where its agent and grading sandboxes come from and go back to.

:func:`envhub.sandboxes.create_sandbox` is the only way a sandbox is made, and this door is the
only place an env calls it. An episode's sandbox is released on a background thread when the
episode ends (its reset or teardown must not hold up the final step); the next ``reset`` and
``close`` wait for it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Protocol

from envhub.errors import InfraError
from envhub.sandboxes.base import SandboxSpec
from envhub.sandboxes.factory import check_request, create_sandbox
from envhub.sandboxes.selection import requested_backend, select_backend

if TYPE_CHECKING:
    from envhub.sandboxes.base import Limits, Sandbox
    from envhub.types import EpisodeMetrics

_RELEASER = ThreadPoolExecutor(max_workers=4, thread_name_prefix="envhub-sandbox-release")


def _renew_after_fork() -> None:
    """In a forked child (AsyncVectorEnv, multiprocessing) the parent's worker threads are gone, so
    its executor would queue releases that never run and ``close`` would wait on them forever."""
    global _RELEASER
    _RELEASER = ThreadPoolExecutor(max_workers=4, thread_name_prefix="envhub-sandbox-release")


os.register_at_fork(after_in_child=_renew_after_fork)


class SandboxNeeds(Protocol):
    """What an env says about its sandboxes (the class attributes of :class:`envhub.env.Env`)."""

    env_id: str
    sandbox_spec: SandboxSpec | None
    grading_preload: tuple[str, ...]
    grading_limits: Limits | None
    needs_isolation: bool


class EpisodeSandbox(Protocol):
    """The part of an episode that holds its sandbox (see :class:`envhub.episode.Episode`)."""

    sandbox: Sandbox | None
    sandbox_image: str | None
    metrics: EpisodeMetrics


class SandboxDoor:
    """The sandboxes of one env: ``backend`` (auto | docker | bwrap | landlock | process) and warm pools of
    ``pool`` idle sandboxes per role (0: a cold sandbox per episode and per grading).

    ValueError for an unknown backend name, TypeError for a pool size that is no non-negative integer.
    """

    def __init__(self, needs: SandboxNeeds, *, backend: str = "auto", pool: int = 8) -> None:
        check_request(backend, pool, "sandbox_pool")  # fails here, not in every episode
        self.needs = needs
        self.backend = backend
        self.pool = pool
        self._pending: list[Future[None]] = []

    def open(self, role: str = "agent") -> Sandbox:
        """A pristine sandbox for ``role`` ("agent" or "grading"): a reset one from the warm pool of
        that role, or a cold one; never one that another role used. InfraError when none starts."""
        needs = self.needs
        try:
            return create_sandbox(self.backend, self._spec(role), pool=self.pool, isolate=needs.needs_isolation)
        except Exception as exc:
            who = needs.env_id or type(needs).__name__
            raise InfraError(f"{who} could not start a sandbox: {exc}") from exc

    def _spec(self, role: str) -> SandboxSpec:
        agent_spec = self.needs.sandbox_spec or SandboxSpec()
        spec = dataclasses.replace(agent_spec, role=role)
        if role == "grading":
            spec = dataclasses.replace(spec, preload=self.needs.grading_preload,
                                       limits=self.needs.grading_limits or agent_spec.limits)
        return spec

    def prewarm(self, count: int) -> int:
        """Start agent sandboxes until the warm pool ``open`` takes them from holds ``count`` idle,
        and keep that many idle from then on; returns how many started (0 for an env without
        sandboxes). A server does this before it serves a burst of ``count`` sessions."""
        if self.needs.sandbox_spec is None or count <= 0 or self.pool == 0:  # 0: no pool to keep them in
            return 0
        from envhub.sandboxes.pool import shared_pool

        name = select_backend(self.backend)
        if self.needs.needs_isolation and name == "process" and requested_backend(self.backend) != "process":
            return 0  # open() refuses it and says why
        return shared_pool(name, self._spec("agent"), size=self.pool).prewarm(count)

    def isolation_problem(self) -> str | None:
        """Why this env's sandboxes would not isolate its agent's code here -- it needs isolation
        and the backend ``auto`` picks is ``process`` -- else None (also when ``process`` was
        asked for by name, which says what that costs when the first sandbox starts)."""
        if self.needs.sandbox_spec is None or not self.needs.needs_isolation:
            return None
        if select_backend(self.backend) != "process" or requested_backend(self.backend) == "process":
            return None
        from envhub.sandboxes.factory import ISOLATION_REFUSED
        from envhub.sandboxes.selection import probe_bwrap, probe_docker, probe_landlock

        why = "; ".join(f"{s.name}: {s.reason}" for s in (probe_docker(), probe_bwrap(), probe_landlock()))
        return f"{ISOLATION_REFUSED} ({why})"

    def for_episode(self, episode: EpisodeSandbox) -> Sandbox:
        """``episode``'s agent sandbox, started on first use; its start counts as sandbox time."""
        if episode.sandbox is None:
            t0 = time.monotonic()
            episode.sandbox = self.open()
            episode.sandbox_image = episode.sandbox.image_id
            episode.metrics.sandbox_seconds += time.monotonic() - t0
        return episode.sandbox

    @contextlib.contextmanager
    def grading(self) -> Iterator[Sandbox]:
        """A pristine sandbox for the verifier, closed (back to the grading pool) when the block ends."""
        sandbox = self.open(role="grading")
        try:
            yield sandbox
        finally:
            with contextlib.suppress(Exception):
                sandbox.close()

    def release(self, episode: EpisodeSandbox, *, wait: bool = True) -> None:
        """Close ``episode``'s sandbox (or give it back to its pool) on a background thread; with
        ``wait``, return once every release this door started has finished."""
        if episode.sandbox is not None:
            sandbox, episode.sandbox = episode.sandbox, None
            self._pending.append(_RELEASER.submit(_close_quietly, sandbox))
        if wait:
            pending, self._pending = self._pending, []
            for future in pending:
                future.result()


def _close_quietly(sandbox: Sandbox) -> None:
    with contextlib.suppress(Exception):  # best effort; `envhub sandbox prune` removes leftovers
        sandbox.close()
