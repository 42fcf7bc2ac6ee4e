"""``create_sandbox``: the one entry point the rest of envhub uses to get a sandbox."""

from __future__ import annotations

import os
import warnings

from envhub.sandboxes.base import Sandbox, SandboxError, SandboxSpec
from envhub.sandboxes.resident import ResidentSandbox

#: Why an env that needs isolation gets no process sandbox unless asked by name, and what that costs.
ISOLATION_REFUSED = (
    "this env runs the agent's code next to what that code must not see (task data, hidden tests, "
    "the verifier's data, this process's memory), and no isolating sandbox (docker, bwrap, landlock) "
    "works here; `envhub sandbox doctor` says how to get one. Passing --sandbox process (or "
    "ENVHUB_SANDBOX=process) runs it anyway, and then the agent's code can read all of that, so its "
    "rewards and evaluations mean nothing")

#: Size of the warm pool that :func:`create_sandbox` takes sandboxes from when its caller names none.
POOL_VARIABLE = "ENVHUB_SANDBOX_POOL"


def new_sandbox(backend: str, spec: SandboxSpec | None = None) -> ResidentSandbox:
    """A started sandbox of exactly ``backend`` (no selection, no pool)."""
    return unstarted_sandbox(backend, spec).start()


def unstarted_sandbox(backend: str, spec: SandboxSpec | None = None) -> ResidentSandbox:
    """A sandbox of exactly ``backend`` that ``start()`` starts: a caller that must be able to
    close it while it starts (a pool) holds it first."""
    if backend == "docker":
        from envhub.sandboxes.docker_backend import DockerSandbox

        return DockerSandbox(spec)
    if backend == "bwrap":
        from envhub.sandboxes.bwrap_backend import BwrapSandbox

        return BwrapSandbox(spec)
    if backend == "landlock":
        from envhub.sandboxes.landlock_backend import LandlockSandbox

        return LandlockSandbox(spec)
    if backend == "process":
        from envhub.sandboxes.process_backend import ProcessSandbox

        return ProcessSandbox(spec)
    raise ValueError(f"unknown sandbox backend {backend!r}")


_waived = False


def _warn_isolation_waived() -> None:
    global _waived
    if not _waived:
        _waived = True
        warnings.warn("the process backend was asked for by name for an env that needs isolation: the agent's "
                      "code can read its task data, hidden tests and this process's memory, so its rewards "
                      "and evaluations mean nothing", RuntimeWarning, stacklevel=3)


def default_pool_size() -> int:
    """``ENVHUB_SANDBOX_POOL`` (0 when unset); ValueError for a value that is no size."""
    raw = os.environ.get(POOL_VARIABLE, "").strip()
    if not raw:
        return 0
    if not raw.isdigit():
        raise ValueError(f"{POOL_VARIABLE}={raw!r} is not a pool size (a non-negative integer)")
    return int(raw)


class PoolSizeError(ValueError, TypeError):
    """A sandbox pool size that is no non-negative integer. Both kinds of error: ``create_sandbox``
    has always raised a ValueError for one, and an env's ``sandbox_pool`` a TypeError."""


def check_request(backend: str, pool: object, what: str) -> int:
    """``pool`` as a pool size, after the checks of a request that need no probe: ValueError for
    an unknown ``backend`` name (see :func:`~envhub.sandboxes.selection.requested_backend`),
    :class:`PoolSizeError` for a ``pool`` that is no non-negative integer (``what`` names it)."""
    from envhub.sandboxes.selection import requested_backend

    requested_backend(backend)
    if isinstance(pool, bool) or not isinstance(pool, int) or pool < 0:
        raise PoolSizeError(f"{what} is no pool size (a non-negative integer): {pool!r}")
    return pool


def create_sandbox(backend: str = "auto", spec: SandboxSpec | None = None, *, pool: int | None = None,
                   isolate: bool = False) -> Sandbox:
    """A started sandbox with its own, empty work dir. Close it (or use ``with``) when done.

    ``backend`` is auto | docker | bwrap | landlock | process (see :func:`select_backend`). With ``pool`` > 0
    (default: ``ENVHUB_SANDBOX_POOL``, else 0) the sandbox comes from the process-wide warm pool of
    its backend and spec, which keeps ``pool`` idle ones, and ``close()`` resets it and gives it
    back -- the same contract, without paying a cold start per use; with 0 it is a cold one of its own.

    ``isolate``: the caller runs code next to something that code must not see (hidden tests), so
    the ``process`` backend, which hides nothing, is used only when asked for by name
    (``backend`` or ``ENVHUB_SANDBOX``); where ``auto`` finds nothing better, SandboxError
    (:data:`ISOLATION_REFUSED`) says how to fix that and what running without isolation loses.
    ValueError for an unknown backend name or a pool size that is no non-negative integer.
    """
    from envhub.sandboxes.selection import requested_backend, select_backend

    size = check_request(backend, default_pool_size() if pool is None else pool, "pool")
    name = select_backend(backend)
    if isolate and name == "process":
        if requested_backend(backend) != "process":
            raise SandboxError(ISOLATION_REFUSED)
        _warn_isolation_waived()
    if size > 0:
        from envhub.sandboxes.pool import shared_pool

        return shared_pool(name, spec, size=size).acquire()
    return new_sandbox(name, spec)
