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
  task's cpus and memory (no swap), a pids limit, the phase's network (``public``: the default
  bridge; ``no-network``: none; ``allowlist``: HTTP(S) through an egress proxy to the allowed hosts
  only, :mod:`.egress`), and envhub's owner labels (so ``envhub``'s leftover cleanup removes it once this process is dead).

Every command's output is read in chunks and capped (:func:`run_capped`): a command that prints
gigabytes costs the host nothing.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import os
import posixpath
import re
import subprocess
import tarfile
import threading
import uuid
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from envhub.errors import InfraError
from envhub.sandboxes.dockerapi import LABEL_BACKEND, LABEL_INPUTS, SERVE_BACKEND, owner_labels
from envhub.sandboxes.images import build_lock

from .egress import Egress
from .task_dir import HarborTask, NetworkMode

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


#: Work directories never copied as data: the system's own places (a WORKDIR there is no work dir).
SYSTEM_DIRS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/usr/bin", "/usr/sbin", "/usr/lib",
               "/usr/lib32", "/usr/lib64", "/usr/libexec", "/usr/local/bin", "/usr/local/sbin", "/usr/local/lib",
               "/etc", "/proc", "/sys", "/dev", "/boot", "/run", "/logs", "/tests", "/solution")
SYSTEM_EXACT = ("/", "/usr", "/usr/local", "/var", "/opt")
#: Search-path variables whose directories, where they lie inside a work dir, are not copied.
SEARCH_PATH_VARS = ("PATH", "PYTHONPATH", "LD_LIBRARY_PATH", "PERL5LIB", "NODE_PATH", "RUBYLIB", "GEM_PATH")
#: Relative paths (inside a work dir) never copied: a user's site-packages is interpreter start-up code.
SKIPPED_INSIDE = re.compile(r"(^|/)\.local/lib/python[^/]*(/|$)")


def image_config(image: str) -> dict[str, object]:
    """``docker image inspect``'s ``Config`` of ``image`` ({} when unreadable)."""
    ran = run_capped(["docker", "image", "inspect", "--format", "{{json .Config}}", image], timeout_s=60)
    if ran.rc != 0:
        return {}
    try:
        config = json.loads(ran.output.decode("utf-8", "replace"))
    except ValueError:
        return {}
    return config if isinstance(config, dict) else {}


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def is_system_dir(path: str) -> bool:
    path = posixpath.normpath(path)
    return path in SYSTEM_EXACT or any(_inside(path, d) for d in SYSTEM_DIRS)


def work_dirs(image: str, task: HarborTask, extra: list[str] | tuple[str, ...] = ()) -> list[str]:
    """The directories copied as the agent's work: the image's ``WORKDIR``, ``/app`` and ``/work``
    (copied where they exist) and ``extra``; absolute, normalised, no system directory, none inside
    another."""
    config = image_config(image)
    found = [str(config.get("WorkingDir") or ""), "/app", "/work", *extra]
    dirs: list[str] = []
    for raw in found:
        if not raw or not raw.startswith("/"):
            continue
        path = posixpath.normpath(raw)
        if is_system_dir(path) or path in dirs:
            continue
        dirs.append(path)
    return sorted(d for d in dirs if not any(o != d and _inside(d, o) for o in dirs))


def search_dirs(image: str, task: HarborTask) -> list[str]:
    """Every directory named in the image's, the task's and the verifier's search-path variables."""
    env: dict[str, str] = {}
    for item in image_config(image).get("Env") or []:  # type: ignore[union-attr]
        key, _, value = str(item).partition("=")
        env[key] = value
    dirs: set[str] = set()
    for table in (env, task.config.environment.env, task.config.verifier.env):
        for var in SEARCH_PATH_VARS:
            for part in str(table.get(var, "")).split(":"):
                if part.startswith("/"):
                    dirs.add(posixpath.normpath(part))
    return sorted(dirs)


@dataclass
class Copied:
    """What :func:`filter_work_tar` kept and left out."""

    files: int = 0
    bytes: int = 0
    skipped: list[str] = field(default_factory=list)
    too_large: bool = False


def filter_work_tar(src: IO[bytes], dst: IO[bytes], base: str, *, skip: list[str] | tuple[str, ...] = (),
                    limit_bytes: int = 4 << 30) -> Copied:
    """Copy the tar stream ``src`` (``docker cp CONTAINER:/base -``: members ``name/...`` where
    ``name`` is ``base``'s last component) to ``dst``, as data: only directories, regular files,
    hard links to members kept, and symlinks whose target stays inside ``base``; no member
    outside ``name/``, none under a directory of ``skip`` (absolute paths) or a user site dir;
    setuid, setgid bits dropped. Nothing is extracted or followed on the host. Stops at
    ``limit_bytes`` of file content (``too_large``)."""
    parent = posixpath.dirname(base.rstrip("/")) or "/"
    out = Copied()
    kept: set[str] = set()
    with tarfile.open(fileobj=src, mode="r|") as tin, tarfile.open(fileobj=dst, mode="w|", format=tarfile.PAX_FORMAT) as tout:
        for member in tin:
            rel = posixpath.normpath(member.name)
            where = posixpath.normpath(posixpath.join(parent, rel))
            why = ""
            if member.name.startswith("/") or ".." in member.name.split("/") or not _inside(where, base):
                why = "outside the work dir"
            elif any(_inside(where, d) for d in skip):
                why = "on a search path"
            elif SKIPPED_INSIDE.search(rel):
                why = "a user site dir"
            elif member.issym():
                target = posixpath.normpath(posixpath.join(posixpath.dirname(where), member.linkname))
                if not _inside(target, base):
                    why = f"a symlink out of the work dir ({member.linkname})"
            elif member.islnk():
                if posixpath.normpath(member.linkname) not in kept:
                    why = "a hard link to a file not copied"
            elif not (member.isdir() or member.isreg()):
                why = "no file or directory"
            if why:
                if len(out.skipped) < 50:
                    out.skipped.append(f"{where}: {why}")
                continue
            if member.isreg():
                if out.bytes + member.size > limit_bytes:
                    out.too_large = True
                    break
                out.bytes += member.size
                out.files += 1
            member.mode &= 0o1777
            member.name = rel
            kept.add(rel)
            tout.addfile(member, tin.extractfile(member) if member.isreg() else None)
    return out


class Container:
    """One running container of ``image`` for one episode (see the module docstring).

    Raises:
        InfraError: the container would not start.
    """

    def __init__(self, image: str, task: HarborTask, *, start_timeout_s: float = 120.0, phase: str = "agent") -> None:
        env = task.config.environment
        self.image = image
        self.name = f"envhub-harbor-{phase}-{uuid.uuid4().hex[:16]}"
        self.egress: Egress | None = None
        labels = [arg for k, v in {**owner_labels(), LABEL_BACKEND: SERVE_BACKEND}.items()  # swept once we are gone
                  for arg in ("--label", f"{k}={v}")]
        mode, allowed = task.config.network_policy("agent" if phase == "agent" else "verifier")
        network = "bridge" if mode is NetworkMode.PUBLIC else "none"
        proxy: dict[str, str] = {}
        if mode is NetworkMode.ALLOWLIST:
            self.egress = Egress(allowed)
            network, proxy = self.egress.network, self.egress.env()
        argv = ["docker", "run", "-d", "--rm", "--name", self.name, *labels,
                "--network", network, "--pids-limit", str(PIDS_LIMIT)]
        for key, value in proxy.items():
            argv += ["-e", f"{key}={value}"]
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

    def copy_work_to(self, other: Container, base: str, *, skip: list[str], timeout_s: float = 600.0,
                     limit_bytes: int = 4 << 30) -> tuple[bool, Copied]:
        """Copy the directory ``base`` of this container to ``other`` as data (see
        :func:`filter_work_tar`), replacing what ``other`` has there; returns (whether ``base``
        existed here, what was copied). ``base`` absent here: it is removed in ``other`` too.
        Raises InfraError when the engine fails (the caller decides whose fault that is)."""
        quoted = "'" + base.replace("'", "'\\''") + "'"
        parent = posixpath.dirname(base) or "/"
        wiped = other.root(f"rm -rf {quoted} && mkdir -p '{parent}'")
        if wiped.rc != 0:
            raise InfraError(f"{base} could not be prepared in the grading container: {wiped.text[-500:]}")
        reader = subprocess.Popen(["docker", "cp", f"{self.name}:{base}", "-"], stdin=subprocess.DEVNULL,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
        writer = subprocess.Popen(["docker", "cp", "-", f"{other.name}:{parent}"], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)

        def kill() -> None:
            for proc in (reader, writer):
                with suppress(ProcessLookupError):
                    os.killpg(proc.pid, 9)

        timer = threading.Timer(timeout_s, kill)
        timer.start()
        copied = Copied()
        error = ""
        try:
            assert reader.stdout is not None and writer.stdin is not None
            try:
                copied = filter_work_tar(reader.stdout, writer.stdin, base, skip=skip, limit_bytes=limit_bytes)
            except (tarfile.TarError, OSError) as exc:
                error = f"{type(exc).__name__}: {exc}"
            with suppress(OSError):
                writer.stdin.close()
            if copied.too_large:
                kill()
            read_err = reader.stderr.read().decode("utf-8", "replace") if reader.stderr else ""
            reader.wait()
            wrote = writer.stdout.read().decode("utf-8", "replace") if writer.stdout else ""
            writer.wait()
        finally:
            timer.cancel()
            kill()
        if reader.returncode != 0 and not copied.too_large:
            if "Could not find the file" in read_err or "No such" in read_err:
                return False, copied
            raise InfraError(f"reading {base} from the agent's container failed: {read_err[-500:]} {error}")
        if error or (writer.returncode != 0 and not copied.too_large):
            raise InfraError(f"copying {base} to the grading container failed: {error} {wrote[-500:]}")
        return True, copied

    def remove(self) -> None:
        """Remove the container (whatever state it is in) and its egress proxy; never raises."""
        with suppress(OSError):
            run_capped(["docker", "rm", "-f", self.name], timeout_s=120)
        if self.egress is not None:
            self.egress.close()


__all__ = ["BuildError", "Container", "Copied", "Ran", "ensure_image", "environment_hash", "filter_work_tar", "image_config",
           "image_tag", "is_system_dir", "run_capped", "search_dirs", "work_dirs"]
