"""The :class:`Sandbox` protocol implemented once, on top of a resident executor.

Every backend starts :mod:`envhub.sandboxes.executor` inside its isolation (container, bwrap
namespace, plain process) and talks to it through an :class:`ExecutorChannel`. What differs
between backends is only how that process is launched and destroyed, which limits the kernel
enforces for it, and what to say when it dies; subclasses supply exactly those hooks.
"""

from __future__ import annotations

import base64
import contextlib
import io
import logging
import os
import posixpath
import tarfile
import threading
import time
from abc import ABC, abstractmethod
from functools import cache
from importlib import resources
from typing import Any

from envhub.sandboxes import cleanup
from envhub.sandboxes.base import (
    TRUNCATION_MARKER,
    ExecResult,
    Limits,
    SandboxError,
    SandboxSpec,
    workdir_path,
)
from envhub.sandboxes.channel import ExecutorChannel, Transport
from envhub.sandboxes.executor import OpError, extract_tar

log = logging.getLogger(__name__)

#: How long a fresh sandbox may take to answer its first ping (container start under load).
START_TIMEOUT_S = 60.0
#: Slack on top of a command's own timeout before we decide the executor itself hung.
EXEC_GRACE_S = 30.0
#: File and tree transfers through the executor.
TRANSFER_TIMEOUT_S = 120.0
MAX_READ_BYTES = 64 * 1024 * 1024
#: The environment every command starts from (plus the caller's ``env``). Nothing of the host's.
BASE_ENV = {
    "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
    "PYTHONDONTWRITEBYTECODE": "1",
    "PYTHONUNBUFFERED": "1",
}


@cache
def executor_source() -> str:
    """The executor script, read from the installed package (so it ships as a package file)."""
    return resources.files("envhub.sandboxes").joinpath("executor.py").read_text(encoding="utf-8")


def executor_argv(python: str, config: dict[str, Any]) -> list[str]:
    """``python -I -c <source> <config>``: injects the executor without a file in the sandbox."""
    import json

    return [python, "-I", "-c", executor_source(), json.dumps(config)]


def _exec_result(reply: dict[str, Any], t0: float) -> ExecResult:
    stdout, cut_out = _text(reply, "stdout")
    stderr, cut_err = _text(reply, "stderr")
    return ExecResult(
        exit_code=int(reply["exit_code"]),
        stdout=stdout,
        stderr=stderr,
        timed_out=bool(reply["timed_out"]),
        oom_killed=bool(reply["oom_killed"]),
        duration_s=float(reply.get("duration") or (time.monotonic() - t0)),
        truncated=cut_out or cut_err,
        signal=reply.get("signal"),
    )


def _text(reply: dict[str, Any], stream: str) -> tuple[str, bool]:
    head = base64.b64decode(reply[stream])
    dropped = int(reply.get(f"{stream}_dropped", 0))
    text = head.decode("utf-8", errors="replace")
    if dropped:
        return text + TRUNCATION_MARKER.format(dropped=dropped), True
    return text, False


class ResidentSandbox(ABC):
    """Base class of the docker, bwrap and process sandboxes. See the module docstring."""

    backend: str = ""
    workdir: str = "/work"

    def __init__(self, spec: SandboxSpec | None = None) -> None:
        self.spec = spec or SandboxSpec()
        self.limits: Limits = self.spec.limits
        self._channel: ExecutorChannel | None = None
        self._closed = False
        # Acquired once, never released: the first close() wins without ever blocking (a close
        # from a signal's cleanup thread must not wait on a main thread stuck in the handler).
        self._close_once = threading.Lock()
        self.info: dict[str, Any] = {}
        self.image_id = f"{self.backend}:host"  # the host's system; docker names its image

    # ---- hooks ---------------------------------------------------------------------------------

    @abstractmethod
    def _launch(self) -> Transport:
        """Start the isolation with the executor inside; return the transport to it."""

    @abstractmethod
    def _destroy(self) -> None:
        """Tear the isolation down for good. Idempotent; must not raise."""

    def _describe(self) -> str:
        """Why the sandbox might have died (container state, stderr), for error messages."""
        return ""

    def _rlimits(self) -> dict[str, int]:
        """rlimits the executor sets on itself at startup, so every command inherits them."""
        return {"core": 0}

    # ---- lifecycle -----------------------------------------------------------------------------

    def start(self) -> ResidentSandbox:
        # Tracked before anything outside exists: a SIGTERM while the container is being created
        # or the first ping is pending must still find (and remove) it.
        cleanup.track(self)
        try:
            if self._closed or cleanup.shutting_down():
                raise SandboxError(f"the {self.backend} sandbox was closed before it started")
            self._channel = ExecutorChannel(self._launch(), self._describe)
            if self._closed or cleanup.shutting_down():  # a signal's cleanup ran while launching
                raise SandboxError(f"the {self.backend} sandbox was closed while starting")
            self.info = self._channel.call("hello", START_TIMEOUT_S)
        except BaseException as exc:
            detail = ""
            with contextlib.suppress(Exception):
                detail = self._describe()
            cleanup.untrack(self)
            self._teardown()
            if isinstance(exc, SandboxError) or not isinstance(exc, Exception):
                raise
            raise SandboxError(f"could not start a {self.backend} sandbox: {exc}"
                               f"{'; ' + detail if detail else ''}") from exc
        return self

    def _teardown(self) -> None:
        if self._channel is not None:
            self._channel.close()
        self._destroy()

    def close(self) -> None:
        if not self._close_once.acquire(blocking=False):
            return
        self._closed = True
        cleanup.untrack(self)
        self._teardown()

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> ResidentSandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"<{type(self).__name__} {state} {self._ident()}>"

    def _ident(self) -> str:
        return ""

    def _call(self, op: str, wait: float, **fields: Any) -> dict[str, Any]:
        if self._closed or self._channel is None:
            raise SandboxError(f"the {self.backend} sandbox is closed")
        return self._channel.call(op, wait, **fields)

    def alive(self, timeout: float = 5.0) -> bool:
        """True when the executor answers a ping: the sandbox is usable."""
        try:
            self._call("ping", timeout)
        except SandboxError:
            return False
        return True

    # ---- the protocol --------------------------------------------------------------------------

    def _rel(self, path: str) -> str:
        full = workdir_path(self.workdir, path)
        rel = posixpath.relpath(full, self.workdir)
        return "." if rel == "." else rel

    def exec(
        self,
        cmd: str | list[str],
        *,
        timeout: float | None = None,
        stdin: str | bytes | None = None,
        env: dict[str, str] | None = None,
        cwd: str | None = None,
    ) -> ExecResult:
        """Run ``cmd`` (a string goes to ``/bin/sh -c``). The command's own failures -- exit
        codes, signals, timeouts, OOM kills -- come back in the result; only a broken sandbox
        raises :class:`SandboxError`."""
        argv = ["/bin/sh", "-c", cmd] if isinstance(cmd, str) else [str(a) for a in cmd]
        if not argv:
            raise ValueError("empty command")
        wall = self.limits.timeout_s if timeout is None else float(timeout)
        data = stdin.encode() if isinstance(stdin, str) else stdin
        t0 = time.monotonic()
        reply = self._call(
            "exec",
            wall + EXEC_GRACE_S,
            argv=argv,
            timeout=wall,
            cap=self.limits.output_bytes,
            env={str(k): str(v) for k, v in (env or {}).items()},
            cwd=self._rel(cwd) if cwd else ".",
            stdin=base64.b64encode(data).decode("ascii") if data is not None else None,
        )
        return _exec_result(reply, t0)

    def exec_python(self, source: str, *, timeout: float | None = None, env: dict[str, str] | None = None,
                    cwd: str | None = None) -> ExecResult:
        """Run Python ``source`` in a child forked from the resident executor.

        Like ``exec(["python3", "-I", "-c", source])`` -- same limits, session, environment and
        result -- but the child starts with the modules of ``SandboxSpec.preload`` already imported.
        """
        wall = self.limits.timeout_s if timeout is None else float(timeout)
        t0 = time.monotonic()
        reply = self._call(
            "pyexec", wall + EXEC_GRACE_S, source=source, timeout=wall, cap=self.limits.output_bytes,
            env={str(k): str(v) for k, v in (env or {}).items()}, cwd=self._rel(cwd) if cwd else ".",
        )
        return _exec_result(reply, t0)

    def write_files(self, files: dict[str, str | bytes]) -> None:
        entries = []
        for path, content in files.items():
            data = content.encode() if isinstance(content, str) else bytes(content)
            entries.append([self._rel(path), base64.b64encode(data).decode("ascii"), 0o644])
        if entries:
            self._call("write", TRANSFER_TIMEOUT_S, files=entries)

    def read_file(self, path: str) -> bytes:
        reply = self._call("read", TRANSFER_TIMEOUT_S, path=self._rel(path), max_bytes=MAX_READ_BYTES)
        return base64.b64decode(reply["data"])

    def list_files(self, path: str = ".") -> list[str]:
        """Every non-directory entry under ``path``, recursively, relative to it, sorted."""
        return list(self._call("list", TRANSFER_TIMEOUT_S, path=self._rel(path))["files"])

    def copy_in(self, host_dir: str, dest: str = ".") -> None:
        """Copy the *contents* of ``host_dir`` into ``dest`` (relative symlinks kept if inside)."""
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w:") as tar:
            for name in sorted(os.listdir(host_dir)):
                tar.add(os.path.join(host_dir, name), arcname=name, recursive=True)
        reply = self._call("put_tar", TRANSFER_TIMEOUT_S, dest=self._rel(dest),
                           data=base64.b64encode(buf.getvalue()).decode("ascii"))
        if reply.get("skipped"):
            log.warning("copy_in skipped unsafe entries: %s", reply["skipped"][:20])

    def copy_out(self, src: str, host_dir: str) -> list[str]:
        """Copy ``src`` (a directory's contents, or one file) into ``host_dir`` on the host.

        Only regular files and directories cross: symlinks, devices and FIFOs the agent left are
        skipped (and returned), and the host side writes through ``O_NOFOLLOW`` walks, so nothing
        inside the sandbox can make the host write or read outside ``host_dir``.
        """
        reply = self._call("get_tar", TRANSFER_TIMEOUT_S, src=self._rel(src))
        os.makedirs(host_dir, exist_ok=True)
        try:
            result = extract_tar(os.path.abspath(host_dir), ".", base64.b64decode(reply["data"]),
                                 allow_links=False)
        except OpError as exc:
            raise ValueError(f"copy_out refused: {exc}") from exc
        skipped = sorted(set(reply.get("skipped", [])) | set(result["skipped"]))
        if skipped:
            log.info("copy_out skipped non-regular entries: %s", skipped[:20])
        return skipped

    def read_tree(self, src: str = ".", max_bytes: int = MAX_READ_BYTES) -> dict[str, bytes]:
        """Every regular file under ``src`` (relative path -> content) in one round trip.

        Symlinks, devices and FIFOs are left out, as with :meth:`copy_out`; nothing touches the
        host's disk.
        """
        reply = self._call("get_tar", TRANSFER_TIMEOUT_S, src=self._rel(src), max_bytes=max_bytes)
        files: dict[str, bytes] = {}
        with tarfile.open(fileobj=io.BytesIO(base64.b64decode(reply["data"])), mode="r:") as tar:
            for member in tar:
                if member.isfile():
                    handle = tar.extractfile(member)
                    if handle is not None:
                        files[member.name.removeprefix("./")] = handle.read()
        return files

    def reset(self) -> None:
        """Back to pristine: every process the agent started is killed, the work dir and the
        other writable scratch dirs are emptied, and where the sandbox has its own IPC namespace
        (docker, bwrap) every SysV shm/sem/msg object and POSIX message queue is removed."""
        self._call("reset", TRANSFER_TIMEOUT_S)
