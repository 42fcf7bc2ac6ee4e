"""Which backend to use here: ``select_backend`` for code, ``doctor`` for people.

Auto order, best isolation first: docker (the engine answers and the base image exists), then
bwrap (installed and a sandbox really starts -- user namespaces may be disabled), then landlock
(Linux 6.12+: confinement without namespaces, what a served container gets), then process,
which isolates nothing and therefore warns. Picking bwrap where its sandboxes lack the memory
cgroup or the seccomp filter (:func:`envhub.sandboxes.bwrap_backend.hardening`) warns too, saying
to prefer docker for untrusted code; the doctor shows the same in bwrap's row.
``ENVHUB_SANDBOX=docker|bwrap|landlock|process`` overrides "auto" for a whole run; an explicit name is
always honoured (and fails loudly if it cannot work). The auto decision is probed once per
process and cached.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading

from envhub.sandboxes.base import BACKENDS, BackendStatus, SandboxError

log = logging.getLogger(__name__)

_auto_choice: str | None = None
_auto_lock = threading.Lock()

FIX_DOCKER_PY = "pip install 'envhub[docker]'"
FIX_DOCKER_ENGINE = "start the engine: sudo bash .ci/docker-up.sh (installs docker.io if missing, starts dockerd)"
FIX_DOCKER_GROUP = "let your user reach the engine: sudo usermod -aG docker $USER, then log in again"
FIX_BASE_IMAGE = "build the base image offline: sudo envhub sandbox build"
FIX_BWRAP = "sudo apt-get install bubblewrap"
FIX_USERNS = ("allow unprivileged user namespaces: sudo sysctl -w kernel.unprivileged_userns_clone=1 (Debian) "
              "or kernel.apparmor_restrict_unprivileged_userns=0 (Ubuntu 24.04+); inside a container, "
              "run it with --security-opt seccomp=unconfined --security-opt apparmor=unconfined")


def _docker_engine_status() -> BackendStatus | None:
    """None when the engine answers; otherwise why not and the fix."""
    try:
        import docker  # noqa: F401
    except ImportError:
        return BackendStatus("docker", False, "docker-py is not installed", FIX_DOCKER_PY)
    from envhub.sandboxes.dockerapi import docker_client

    try:
        docker_client()
    except SandboxError as exc:
        text = str(exc)
        if "Permission denied" in text or "PermissionError" in text:
            return BackendStatus("docker", False, text, FIX_DOCKER_GROUP)
        if shutil.which("dockerd") is None:
            return BackendStatus("docker", False, "no Docker engine installed", FIX_DOCKER_ENGINE)
        return BackendStatus("docker", False, text, FIX_DOCKER_ENGINE)
    return None


def probe_docker(full: bool = False) -> BackendStatus:
    """Engine answers and the base image exists; with ``full``, also start one and run python."""
    failed = _docker_engine_status()
    if failed is not None:
        return failed
    from envhub.sandboxes.images import base_image_status, base_image_tag

    ok, why = base_image_status()
    if not ok:
        return BackendStatus("docker", False, why, FIX_BASE_IMAGE)
    if full:
        return _smoke("docker", "docker: run `envhub sandbox prune`; rebuild with `envhub sandbox build --force`")
    return BackendStatus("docker", True, detail=base_image_tag())


def probe_bwrap() -> BackendStatus:
    """Installed, and a real sandbox starts and runs python (user namespaces may be off)."""
    from envhub.sandboxes.bwrap_backend import bwrap_binary, sandbox_python

    if bwrap_binary() is None:
        return BackendStatus("bwrap", False, "bubblewrap is not installed", FIX_BWRAP)
    if sandbox_python() is None:
        return BackendStatus("bwrap", False, "no python3 under /usr to run inside the sandbox",
                             "sudo apt-get install python3")
    return _smoke("bwrap", FIX_USERNS)


def probe_landlock(full: bool = False) -> BackendStatus:
    """Landlock ABI 6, the no-network seccomp filter and a python under /usr; with ``full``, a
    real sandbox starts and runs python."""
    from envhub.sandboxes.landlock_backend import FIX_LANDLOCK, unavailable

    missing = unavailable()
    if missing is not None:
        return missing
    if full:
        return _smoke("landlock", FIX_LANDLOCK)
    return BackendStatus("landlock", True, detail="Landlock and seccomp, no namespaces")


def probe_process() -> BackendStatus:
    return BackendStatus("process", True, detail="no isolation: trusted code only")


def _smoke(backend: str, fix: str) -> BackendStatus:
    from envhub.sandboxes.factory import new_sandbox

    try:
        with new_sandbox(backend) as sandbox:
            result = sandbox.exec(["python3", "-c", "import sys; print(sys.version.split()[0])"], timeout=30)
            pytest = sandbox.exec(["python3", "-c", "import pytest"], timeout=30)
    except SandboxError as exc:
        reason = str(exc)
        if backend == "bwrap" and "namespace" not in reason and "permitted" not in reason:
            fix = f"see the error above; {fix}"
        return BackendStatus(backend, False, reason, fix)
    if not result.ok:
        return BackendStatus(backend, False, f"python3 does not run inside: {result.summary()}",
                             "sudo apt-get install python3")
    detail = f"python {result.stdout.strip()}"
    if not pytest.ok:
        detail += "; pytest missing (code-repair agents run visible tests with it: sudo apt-get install python3-pytest)"
    advice = ""
    if backend == "bwrap":  # the memory bound and the seccomp filter, or what is missing here
        from envhub.sandboxes.bwrap_backend import hardening

        found = hardening()
        detail += f"; {found.describe()}"
        advice = found.fix()
    return BackendStatus(backend, True, detail=detail, fix=advice)


def doctor() -> list[BackendStatus]:
    """Every backend, fully checked (a real sandbox is started for each that can be)."""
    return [probe_docker(full=True), probe_bwrap(), probe_landlock(full=True), probe_process()]


def requested_backend(preferred: str | None = "auto") -> str:
    """The backend asked for by name -- ``preferred``, else ``ENVHUB_SANDBOX`` -- or ``auto``.

    Raises ValueError for a name that is no backend (nothing is probed here).
    """
    if preferred not in (None, "", "auto"):
        if not isinstance(preferred, str) or preferred not in BACKENDS:
            raise ValueError(f"unknown sandbox backend {preferred!r}; choose auto, {', '.join(BACKENDS)}")
        return preferred
    chosen = os.environ.get("ENVHUB_SANDBOX", "auto") or "auto"
    if chosen != "auto" and chosen not in BACKENDS:
        raise ValueError(f"ENVHUB_SANDBOX={chosen!r} is not a sandbox backend; choose auto, {', '.join(BACKENDS)}")
    return chosen


def select_backend(preferred: str = "auto") -> str:
    """The backend to use: the one asked for by name (:func:`requested_backend`), else the best
    that works here."""
    global _auto_choice
    preferred = requested_backend(preferred)
    if preferred != "auto":
        return preferred
    with _auto_lock:
        if _auto_choice is None:
            _auto_choice = _probe_auto()
        return _auto_choice


def _probe_auto() -> str:
    docker = probe_docker()
    if docker.ok:
        return "docker"
    if docker.fix == FIX_BASE_IMAGE:
        log.warning("docker works here but %s; using another backend until then (%s)", docker.reason,
                    docker.fix)
    bwrap = probe_bwrap()
    if bwrap.ok:
        from envhub.sandboxes.bwrap_backend import hardening

        found = hardening()
        if not found.complete:
            log.warning("auto picked bwrap (docker: %s), where %s; to get docker instead: %s",
                        docker.reason, found.describe(), docker.fix)
        return "bwrap"
    landlock = probe_landlock(full=True)
    if landlock.ok:
        return "landlock"
    from envhub.sandboxes.process_backend import warn_trusted_only

    log.warning("no isolating sandbox works here (docker: %s; bwrap: %s; landlock: %s)", docker.reason,
                bwrap.reason, landlock.reason)
    warn_trusted_only()
    return "process"


def reset_selection_cache() -> None:
    """Forget the cached auto choice (after installing something, in tests)."""
    global _auto_choice
    with _auto_lock:
        _auto_choice = None
