"""One place that talks to the Docker engine: the client, our labels, and error translation.

docker-py is an optional dependency (``envhub[docker]``); importing this module never fails
without it, only :func:`docker_client` does, with a message saying how to fix it.
"""

from __future__ import annotations

import functools
import os
import socket
from typing import Any

from envhub._version import __version__
from envhub.sandboxes.base import SandboxError

#: Every container we start carries this label; ``prune`` finds leftovers by it.
LABEL_OWNED = "envhub.owned"
LABEL_PID = "envhub.pid"
LABEL_HOST = "envhub.host"
LABEL_IMAGE = "envhub.image"
#: What made a container: ``docker`` (a sandbox) or ``serve`` (``envhub serve --docker``).
LABEL_BACKEND = "envhub.backend"
SERVE_BACKEND = "serve"
#: On images: the content hash of the build inputs (rebuild only when it changes).
LABEL_INPUTS = "envhub.inputs"
LABEL_VERSION = "envhub.version"


def envhub_version() -> str:
    return __version__


def owner_labels() -> dict[str, str]:
    return {LABEL_OWNED: "1", LABEL_PID: str(os.getpid()), LABEL_HOST: socket.gethostname(),
            LABEL_VERSION: envhub_version()}


@functools.lru_cache(maxsize=4)
def docker_client(timeout: int = 120) -> Any:
    """A cached ``docker.DockerClient`` that has answered a ping; SandboxError if there is none."""
    try:
        import docker
    except ImportError as exc:
        raise SandboxError("docker-py is not installed (pip install 'envhub[docker]')") from exc
    try:
        client = docker.from_env(timeout=timeout)
        client.ping()
    except Exception as exc:
        docker_client.cache_clear()
        raise SandboxError(f"the Docker engine does not answer: {exc}") from exc
    return client


def is_not_found(exc: BaseException) -> bool:
    try:
        import docker.errors
    except ImportError:
        return False
    return isinstance(exc, docker.errors.NotFound)


def local_image(client: Any, ref: str) -> Any | None:
    """A local image (docker-py ``Image``), or None when there is no such image."""
    try:
        return client.images.get(ref)
    except Exception as exc:
        if is_not_found(exc):
            return None
        raise SandboxError(f"cannot inspect image {ref}: {exc}") from exc


def image_labels(client: Any, ref: str) -> dict[str, str] | None:
    """The labels of a local image, or None when there is no such image."""
    image = local_image(client, ref)
    return None if image is None else dict(image.labels or {})


# A forked child must not reuse the parent's client: its keep-alive connection to the engine is
# the same socket, so two processes' requests and replies would interleave on it.
os.register_at_fork(after_in_child=docker_client.cache_clear)
