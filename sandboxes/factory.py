"""``create_sandbox``: the one entry point the rest of envhub uses to get a sandbox."""

from __future__ import annotations

import os

from envhub.sandboxes.base import Sandbox, SandboxSpec
from envhub.sandboxes.resident import ResidentSandbox


def new_sandbox(backend: str, spec: SandboxSpec | None = None) -> ResidentSandbox:
    """A started sandbox of exactly ``backend`` (no selection, no pool)."""
    if backend == "docker":
        from envhub.sandboxes.docker_backend import DockerSandbox

        return DockerSandbox(spec).start()
    if backend == "bwrap":
        from envhub.sandboxes.bwrap_backend import BwrapSandbox

        return BwrapSandbox(spec).start()
    if backend == "process":
        from envhub.sandboxes.process_backend import ProcessSandbox

        return ProcessSandbox(spec).start()
    raise ValueError(f"unknown sandbox backend {backend!r}")


def create_sandbox(backend: str = "auto", spec: SandboxSpec | None = None, *,
                   pooled: bool | None = None) -> Sandbox:
    """A started sandbox with its own, empty work dir. Close it (or use ``with``) when done.

    ``backend`` is auto | docker | bwrap | process (see :func:`select_backend`). With
    ``pooled`` (default: ``ENVHUB_SANDBOX_POOL`` set to a size > 0) the sandbox comes from a
    process-wide warm pool and ``close()`` resets it and gives it back -- the same contract,
    without paying a cold start per episode.
    """
    from envhub.sandboxes.selection import select_backend

    name = select_backend(backend)
    pool_size = int(os.environ.get("ENVHUB_SANDBOX_POOL", "0") or 0)
    if pooled is None:
        pooled = pool_size > 0
    if pooled:
        from envhub.sandboxes.pool import shared_pool

        return shared_pool(name, spec, size=max(pool_size, 1)).acquire()
    return new_sandbox(name, spec)
