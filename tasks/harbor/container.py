"""A Harbor task's image and container, through the ``docker`` command line.

envhub's docker sandbox backend runs its own resident executor as uid 1000 on a read-only root,
which is not Harbor's contract (commands as any user of the image, root for the verifier, files
copied in as root, the image's own file system writable), so this module drives the engine
directly:

- :func:`ensure_image` builds ``environment/`` (its ``Dockerfile``) offline with the classic
  builder (no registry is asked for a base image that exists locally), tagged
  ``envhub-harbor/<task>:<hash of the environment dir>`` and labelled ``envhub.inputs`` with that
  hash, so an unchanged environment is never rebuilt; ``[environment] docker_image`` is used
  instead where it exists locally. A failed build raises :class:`BuildError` (an
  :class:`~envhub.errors.InfraError`: never the agent's) and is remembered for the process.
- :class:`Container` is one running container (PID 1 ``sleep infinity``) with the
  task's cpus and memory (no swap), a pids limit, no network unless the task allows it, and
  envhub's owner labels (so ``envhub``'s leftover cleanup removes it once this process is dead).

Every command's output is read in chunks and capped (:func:`run_capped`): a command that prints
gigabytes costs the host nothing.
"""

from __future__ import annotations

import hashlib
import io
import math
import os
import re
import subprocess
import tarfile
import threading
import uuid
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

from envhub.errors import InfraError
from envhub.sandboxes.dockerapi import LABEL_INPUTS, owner_labels
from envhub.sandboxes.images import build_lock

from .task_dir import HarborTask

IMAGE_REPOSITORY = "envhub-harbor"
#: Grace (s) between the in-container ``timeout``'s TERM and its KILL, and for the host's backstop.
KILL_GRACE_S = 5.0
PIDS_LIMIT = 4096
_FAILED_BUILDS: dict[str, str] = {}  # tag -> why, for this process
_FAILED_LOCK = threading.Lock()


class BuildError(InfraError):
    """The task's image could not be built (or found): the environment's fault, never the agent's."""


@dataclass(frozen=True)
class Ran:
    """A finished command: exit status (None when killed at the timeout), the first bytes of its
    output (stdout and stderr together), how many bytes it wrote in all, and whether it timed out."""

    rc: int | None
    output: bytes
    total_bytes: int
    timed_out: bool

    @property
    def text(self) -> str:
        text = self.output.decode("utf-8", "replace")
        if self.total_bytes > len(self.output):
            text += f"\n[... output clipped: {self.total_bytes} bytes in all]"
        return text


def run_capped(argv: list[str], *, timeout_s: float, limit: int = 64 * 1024,
               env: dict[str, str] | None = None) -> Ran:
    """Run ``argv`` (stdin closed), keep the first ``limit`` bytes of its output, kill its process
    group at ``timeout_s``. Raises OSError when it cannot start (no ``docker`` binary)."""
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True, env=env)
    kept = bytearray()
    total = 0
    timed_out = threading.Event()

    def kill() -> None:
        timed_out.set()
        with suppress(ProcessLookupError):
            os.killpg(proc.pid, 9)

    timer = threading.Timer(timeout_s, kill)
    timer.start()
    try:
        assert proc.stdout is not None
        while chunk := proc.stdout.read1(65536):
            total += len(chunk)
            if len(kept) < limit:
                kept += chunk[: limit - len(kept)]
        rc = proc.wait()
    finally:
        timer.cancel()
        if proc.poll() is None:
            kill()
            proc.wait()
    return Ran(rc=None if timed_out.is_set() else rc, output=bytes(kept), total_bytes=total,
               timed_out=timed_out.is_set())


def environment_hash(env_dir: Path) -> str:
    """A content hash of the build context: every path, its exec bit, its bytes or link target."""
    digest = hashlib.sha256()
    for path in sorted(p for p in env_dir.rglob("*")):
        rel = path.relative_to(env_dir).as_posix()
        if path.is_symlink():
            digest.update(f"L\0{rel}\0{os.readlink(path)}\0".encode())
        elif path.is_file():
            digest.update(f"F\0{rel}\0{os.access(path, os.X_OK)}\0".encode())
            digest.update(hashlib.sha256(path.read_bytes()).digest())
        elif path.is_dir():
            digest.update(f"D\0{rel}\0".encode())
    return digest.hexdigest()[:24]


def image_exists(tag: str) -> bool:
    return run_capped(["docker", "image", "inspect", "--format", "{{.Id}}", tag], timeout_s=60).rc == 0


def image_tag(task: HarborTask) -> str:
    slug = re.sub(r"[^a-z0-9_.-]+", "-", task.task_id.lower()).strip("-._") or "task"
    return f"{IMAGE_REPOSITORY}/{slug[:100]}:{environment_hash(task.environment_dir)}"


def ensure_image(task: HarborTask) -> str:
    """The tag of ``task``'s image, built first when no image of its environment's hash exists.

    Raises:
        BuildError: no Dockerfile and no local ``docker_image``, the build failed or ran past
            ``[environment] build_timeout_sec`` (remembered: the same tag is not tried again in
            this process), or the engine cannot be reached.
    """
    named = task.config.environment.docker_image
    dockerfile = task.environment_dir / "Dockerfile"
    if named and (image_exists(named) or not dockerfile.is_file()):
        if not image_exists(named):
            raise BuildError(f"task {task.task_id}: image {named} is not here, and no image is pulled")
        return named
    if not dockerfile.is_file():
        raise BuildError(f"task {task.task_id} has no environment/Dockerfile")
    tag = image_tag(task)
    with _FAILED_LOCK:
        failed = _FAILED_BUILDS.get(tag)
    if failed is not None:
        raise BuildError(failed)
    with build_lock(tag):
        if image_exists(tag):
            return tag
        argv = ["docker", "build", "--pull=false", "--rm", "--force-rm", "-t", tag,
                "--label", f"{LABEL_INPUTS}={tag.rpartition(':')[2]}", str(task.environment_dir)]
        try:
            ran = run_capped(argv, timeout_s=task.config.environment.build_timeout_sec, limit=256 * 1024,
                             env={**os.environ, "DOCKER_BUILDKIT": "0"})
        except OSError as exc:
            raise BuildError(f"task {task.task_id}: docker cannot run: {exc}") from None
        if ran.rc == 0 and image_exists(tag):
            return tag
        why = ("ran past build_timeout_sec" if ran.timed_out else f"failed (exit {ran.rc})")
        detail = f"task {task.task_id}: docker build of {task.environment_dir} {why}:\n{ran.text[-3000:]}"
        with _FAILED_LOCK:
            _FAILED_BUILDS[tag] = detail
        raise BuildError(detail)


class Container:
    """One running container of ``image`` for one episode (see the module docstring).

    Raises:
        InfraError: the container would not start.
    """

    def __init__(self, image: str, task: HarborTask, *, start_timeout_s: float = 120.0) -> None:
        env = task.config.environment
        self.name = f"envhub-harbor-{uuid.uuid4().hex[:16]}"
        labels = [arg for k, v in owner_labels().items() for arg in ("--label", f"{k}={v}")]
        network = "bridge" if env.network_allowed(task.config.agent.network_mode) else "none"
        argv = ["docker", "run", "-d", "--rm", "--name", self.name, *labels,
                "--network", network, "--pids-limit", str(PIDS_LIMIT)]
        if env.cpus > 0:
            argv += ["--cpus", str(env.cpus)]
        if env.memory_mb > 0:
            argv += ["--memory", f"{env.memory_mb}m", "--memory-swap", f"{env.memory_mb}m"]
        for key, value in env.env.items():
            argv += ["-e", f"{key}={value}"]
        argv += ["--entrypoint", "sleep", image, "infinity"]
        ran = run_capped(argv, timeout_s=start_timeout_s)
        if ran.rc != 0:
            self.remove()
            raise InfraError(f"the container of {image} would not start (exit {ran.rc}): {ran.text[-2000:]}")

    def exec(self, command: str, *, user: str | int | None, timeout_s: float, limit: int = 64 * 1024,
             env: dict[str, str] | None = None) -> Ran:
        """``bash -c command`` in the container as ``user`` (None: the image's user) under
        ``timeout_s`` (the in-container ``timeout`` ends the command's processes; the host kills
        the ``docker exec`` client after a grace period as a backstop)."""
        argv = ["docker", "exec"]
        if user is not None:
            argv += ["-u", str(user)]
        for key, value in (env or {}).items():
            argv += ["-e", f"{key}={value}"]
        argv += [self.name, "timeout", "-k", str(int(KILL_GRACE_S)), str(max(1, math.ceil(timeout_s))), "bash", "-c", command]
        ran = run_capped(argv, timeout_s=timeout_s + 3 * KILL_GRACE_S, limit=limit)
        if ran.rc == 124:  # the in-container timeout fired
            return Ran(rc=None, output=ran.output, total_bytes=ran.total_bytes, timed_out=True)
        return ran

    def root(self, script: str, timeout_s: float = 60.0) -> Ran:
        """A shell script as root, run with ``sh`` (trusted work: wipes, copies, permissions)."""
        return run_capped(["docker", "exec", "-u", "0", self.name, "sh", "-c", script], timeout_s=timeout_s)

    def running(self) -> bool:
        ran = run_capped(["docker", "inspect", "--format", "{{.State.Running}}", self.name], timeout_s=60)
        return ran.rc == 0 and ran.output.strip() == b"true"

    def copy_in(self, src: Path, dest: str) -> None:
        """Copy the directory ``src``'s content to ``dest`` (made first) as root; readable by all.
        Raises InfraError when the engine refuses."""
        made = self.root(f"rm -rf '{dest}' && mkdir -p '{dest}'")
        ran = run_capped(["docker", "cp", f"{src}/.", f"{self.name}:{dest}"], timeout_s=300)
        if made.rc != 0 or ran.rc != 0:
            raise InfraError(f"copying {src} to {dest} failed: {made.text[-500:]} {ran.text[-1000:]}")
        self.root(f"chown -R 0:0 '{dest}'; chmod -R a+rX '{dest}'")

    def read_file(self, path: str, limit: int = 1024 * 1024) -> bytes | None:
        """The bytes of the regular file ``path``, read by the engine (no program of the container
        runs); None when there is none. Raises ValueError for something else there (a link, a
        directory) or a file over ``limit`` bytes."""
        ran = run_capped(["docker", "cp", f"{self.name}:{path}", "-"], timeout_s=60, limit=limit + 64 * 1024)
        if ran.rc != 0:
            return None
        if ran.total_bytes > len(ran.output):
            raise ValueError(f"{path} is larger than {limit} bytes")
        with tarfile.open(fileobj=io.BytesIO(ran.output), mode="r:") as tar:
            member = tar.next()
            if member is None or not member.isfile():
                raise ValueError(f"{path} is no regular file")
            if member.size > limit:
                raise ValueError(f"{path} is larger than {limit} bytes")
            handle = tar.extractfile(member)
            return handle.read() if handle is not None else None

    def remove(self) -> None:
        """Remove the container (whatever state it is in); never raises."""
        with suppress(OSError):
            run_capped(["docker", "rm", "-f", self.name], timeout_s=120)


__all__ = ["BuildError", "Container", "Ran", "ensure_image", "environment_hash", "image_tag", "run_capped"]
