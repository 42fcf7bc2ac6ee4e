"""Sandboxes: where code that a model wrote runs.

Backends: ``docker`` (production: hardened container, offline-built image, warm pools),
``bwrap`` (bubblewrap namespaces on the host's read-only /usr) and ``process`` (no isolation,
trusted code only). All three run a resident executor (:mod:`.executor`) inside, so exec,
limits, timeouts and output caps behave the same everywhere.

Importing this package is cheap: docker-py is only imported when Docker is used.
"""

from envhub.sandboxes.base import (
    BACKENDS,
    BackendStatus,
    ExecResult,
    Limits,
    Sandbox,
    SandboxError,
    SandboxSpec,
    cap_output,
    workdir_path,
)
from envhub.sandboxes.cleanup import close_all
from envhub.sandboxes.factory import create_sandbox, new_sandbox
from envhub.sandboxes.images import base_image_tag, build_base_image, build_family_image
from envhub.sandboxes.pool import PooledSandbox, SandboxPool, shared_pool
from envhub.sandboxes.selection import doctor, requested_backend, select_backend


def prune(all_owners: bool = False) -> int:
    """Remove envhub containers left behind by dead processes (all of them with ``all_owners``)."""
    from envhub.sandboxes.docker_backend import prune as _prune

    return _prune(all_owners)


__all__ = [
    "BACKENDS",
    "BackendStatus",
    "ExecResult",
    "Limits",
    "PooledSandbox",
    "Sandbox",
    "SandboxError",
    "SandboxPool",
    "SandboxSpec",
    "base_image_tag",
    "build_base_image",
    "build_family_image",
    "cap_output",
    "close_all",
    "create_sandbox",
    "doctor",
    "new_sandbox",
    "prune",
    "requested_backend",
    "select_backend",
    "shared_pool",
    "workdir_path",
]
