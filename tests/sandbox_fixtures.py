"""Fixtures and helpers shared by the tests/test_sandbox_*.py modules (import them from there).

Availability policy: a backend's tests *run* whenever the backend is present (the Docker tests
even build the base image first if the engine answers but the image is missing). They skip
only when it is absent -- and not even then when ``ENVHUB_REQUIRE_SANDBOXES`` names it
(CI sets ``docker,bwrap``): a missing backend is then a failure, never a silent skip.
"""

from __future__ import annotations

import functools
import os
import warnings
from collections.abc import Iterator
from typing import Any

import pytest

from envhub.sandboxes import Sandbox, SandboxPool, SandboxSpec, cleanup, new_sandbox
from envhub.sandboxes.base import Limits

REQUIRED = {b.strip() for b in os.environ.get("ENVHUB_REQUIRE_SANDBOXES", "").split(",") if b.strip()}
#: Small limits so the abuse battery hits them quickly.
BATTERY_LIMITS = Limits(cpus=1.0, memory_mb=256, pids=64, timeout_s=10.0, output_bytes=64 * 1024, disk_mb=32)


@functools.cache
def backend_problem(backend: str) -> str | None:
    """None when ``backend`` is usable here, else why not."""
    from envhub.sandboxes import selection

    if backend == "process":
        return None
    if backend in ("bwrap", "landlock"):
        status = selection.probe_bwrap() if backend == "bwrap" else selection.probe_landlock()
        return None if status.ok else f"{status.reason} (fix: {status.fix})"
    engine = selection._docker_engine_status()
    if engine is not None:
        return f"{engine.reason} (fix: {engine.fix})"
    from envhub.sandboxes.images import base_image_status, build_base_image

    if not base_image_status()[0]:
        build_base_image()  # the engine is here: build the image rather than skip (~1-4 min, once)
    return None


def require_backend(backend: str) -> None:
    problem = backend_problem(backend)
    if problem is None:
        return
    if backend in REQUIRED:
        pytest.fail(f"{backend} is required here (ENVHUB_REQUIRE_SANDBOXES) but unusable: {problem}")
    pytest.skip(f"{backend} unavailable: {problem}")


def backend_params(*backends: str) -> list[object]:
    """``pytest.param``s carrying the ``docker`` / ``bwrap`` markers (landlock needs no marker:
    it runs wherever the kernel has Landlock ABI 6)."""
    marks = {"docker": [pytest.mark.docker], "bwrap": [pytest.mark.bwrap]}
    return [pytest.param(b, marks=marks.get(b, []), id=b) for b in backends]


def leaked_containers() -> list[str]:
    """Envhub containers of this process that no open sandbox accounts for."""
    from envhub.sandboxes.docker_backend import owned_containers
    from envhub.sandboxes.dockerapi import LABEL_PID

    live = {getattr(sb, "container_id", None) for sb in cleanup.live()}
    return [c.id[:12] for c in owned_containers()
            if c.labels.get(LABEL_PID) == str(os.getpid()) and c.id not in live]


def assert_no_leaked_containers() -> None:
    """No envhub-labelled container of this process outlives its sandbox (Docker only)."""
    if backend_problem("docker") is not None:
        return
    leaked = leaked_containers()
    assert not leaked, f"envhub containers leaked: {leaked}"


def _closed_at_end() -> Iterator[dict[str, Any]]:
    opened: dict[str, Any] = {}
    yield opened
    for each in opened.values():
        each.close()
    assert_no_leaked_containers()


@pytest.fixture(scope="module")
def sandboxes() -> Iterator[dict[str, Sandbox]]:
    """One sandbox per backend for the whole module, started on first use (:func:`get_sandbox`),
    closed (and leak-checked) at the end."""
    yield from _closed_at_end()


def get_sandbox(opened: dict[str, Sandbox], backend: str, spec: SandboxSpec) -> Sandbox:
    require_backend(backend)
    if backend not in opened:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # process backend: trusted-only
            opened[backend] = new_sandbox(backend, spec)
    return opened[backend]


@pytest.fixture(scope="module")
def battery_pools() -> Iterator[dict[str, SandboxPool]]:
    """One small warm pool per backend, created on first use (:func:`get_pool`), closed (and
    leak-checked) at the end."""
    yield from _closed_at_end()


def get_pool(pools: dict[str, SandboxPool], backend: str, limits: Limits = BATTERY_LIMITS) -> SandboxPool:
    require_backend(backend)
    if backend not in pools:
        pools[backend] = SandboxPool(backend, SandboxSpec(limits=limits), size=1)
    return pools[backend]
