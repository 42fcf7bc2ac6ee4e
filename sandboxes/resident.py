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
import uuid
from abc import ABC, abstractmethod
from functools import cache
from importlib import resources
from typing import Any

from envhub.sandboxes import cleanup, fsops, priming
from envhub.sandboxes.base import (
    TRUNCATION_MARKER,
    ExecResult,
    Limits,
    Listing,
    SandboxError,
    SandboxSpec,
    Tree,
    workdir_path,
)
from envhub.sandboxes.channel import ExecutorChannel, Transport
from envhub.sandboxes.fsops import OpError
from envhub.sandboxes.tarops import extract_tar

log = logging.getLogger(__name__)

#: How long a fresh sandbox may take to answer its first ping (container start under load).
START_TIMEOUT_S = 60.0
#: Slack on top of a command's own timeout before we decide the executor itself hung.
EXEC_GRACE_S = 30.0
#: File and tree transfers through the executor.
TRANSFER_TIMEOUT_S = 120.0
MAX_READ_BYTES = 64 * 1024 * 1024
#: Said with a command killed for memory when at least 1/PINNED_SHARE of the limit is shared memory
#: (the cgroup's ``shmem``, as the executor or bwrap's host side reads it): what no kill frees.
PINNED_SHARE = 4
PINNED_NOTE = ("envhub: {pinned} MiB of the sandbox's {limit} MiB of memory is held by files in /work, /tmp and "
               "/dev/shm, shared memory segments and memfds, which outlive the processes that made them: remove "
               "what is not needed (rm, ipcrm; end a process that holds a memfd)\n")
#: The environment every command starts from (plus the caller's ``env``). Nothing of the host's.
BASE_ENV = {
    "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
    "PYTHONDONTWRITEBYTECODE": "1",
    "PYTHONUNBUFFERED": "1",
}


#: Helper modules the executor imports, by the names it finds them under inside a sandbox.
EXECUTOR_HELPERS = (("envhub_confine", "confine.py"), ("envhub_fsops", "fsops.py"), ("envhub_scratch", "scratch.py"),
                    ("envhub_tarops", "tarops.py"), ("envhub_procs", "procs.py"))
#: ``python -I -c`` program: load the helpers' sources (next arguments) as modules, then run the
#: executor's source as ``__main__``; what is left in ``sys.argv`` is the executor's config.
BOOTSTRAP = (
    "import sys, types\n"
    f"for name in {tuple(name for name, _ in EXECUTOR_HELPERS)!r}:\n"
    "    module = types.ModuleType(name)\n"
    "    sys.modules[name] = module\n"
    "    exec(compile(sys.argv.pop(1), '<' + name + '>', 'exec'), module.__dict__)\n"
    "exec(compile(sys.argv.pop(1), '<envhub executor>', 'exec'), {'__name__': '__main__'})\n"
)


@cache
def package_source(filename: str) -> str:
    """A module's source, read from the installed package (so it ships as a package file)."""
    return resources.files("envhub.sandboxes").joinpath(filename).read_text(encoding="utf-8")


def executor_source() -> str:
    """The executor script (it needs the :data:`EXECUTOR_HELPERS` loaded beside it)."""
    return package_source("executor.py")


def executor_argv(python: str, config: dict[str, Any]) -> list[str]:
    """``python -I -c <bootstrap> <helpers...> <executor> <config>``: the command line that starts
    the executor in a sandbox, with its helper modules and without any file there."""
    import json

    helpers = [package_source(filename) for _, filename in EXECUTOR_HELPERS]
    return [python, "-I", "-c", BOOTSTRAP, *helpers, executor_source(), json.dumps(config)]


def _exec_result(reply: dict[str, Any], t0: float, memory_bytes: int = 0) -> ExecResult:
    stdout, cut_out = _text(reply, "stdout")
    stderr, cut_err = _text(reply, "stderr")
    pinned = int(reply.get("pinned") or 0)  # with an OOM kill, where the backend can tell
    if reply["oom_killed"] and memory_bytes and pinned * PINNED_SHARE >= memory_bytes:
        stderr += PINNED_NOTE.format(pinned=pinned >> 20, limit=memory_bytes >> 20)
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
    #: ``_destroy`` closes fds the channel reads (a child's pipes), so the channel lets go of
    #: them first. Where the channel's fds are its own (a container's attach socket), the
    #: isolation is destroyed first: a call in flight wakes by EOF, and a close from a signal
    #: handler never waits on the lock of the call it interrupted before the container is gone.
    _destroy_closes_channel_fds: bool = True

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
        #: In the executor's config, hence its command line: proves a /proc entry is ours.
        self.token = uuid.uuid4().hex
        self._proc_dir: int | None = None  # /proc/<executor pid> as seen from here, once found
        self._proc_dir_known = False
        self._proc_dir_lock = threading.Lock()
        #: ``(st_dev, st_ino)`` of the work dir the executor holds, from its hello and each reset.
        self._work_identity: tuple[int, int] | None = None

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

    def _executor_host_pid(self) -> int | None:
        """The executor's pid in this process's PID namespace, where the backend can tell."""
        return None

    def _host_workdir(self) -> int | None:
        """The work dir as a directory fd opened from this process, with privileges the agent's
        uid cannot take away (it reads what the agent made unreadable), or None where this
        process cannot reach the sandbox's files that way. The caller closes it.

        By default through ``/proc/<executor pid>/root``: the host (root, or the owner of the
        sandbox's user namespace) sees the sandbox's mounts there, its tmpfs work dir included.
        """
        proc_dir = self._executor_proc_dir()
        if proc_dir is None:
            return None
        try:
            root = os.open("root", os.O_PATH | os.O_DIRECTORY, dir_fd=proc_dir)
        except OSError:  # the executor is gone: the executor's own answer will say so
            return None
        try:
            return self._held_workdir(fsops.open_dir(root, fsops.rel_parts(self.workdir.lstrip("/"))))
        except OpError:
            return None
        finally:
            os.close(root)

    def _held_workdir(self, fd: int) -> int | None:
        """``fd`` when it is the very directory the executor holds as its work dir, else None (it
        is closed): where the agent could rename the work dir and put another in its place, the
        host never reads what took the name."""
        try:
            st = os.fstat(fd)
        except OSError:
            st = None
        if st is not None and (st.st_dev, st.st_ino) == self._work_identity:
            return fd
        os.close(fd)
        return None

    def _executor_proc_dir(self) -> int | None:
        """``/proc/<executor pid>`` opened once: a descriptor stays bound to that process, so a
        reused pid can never redirect it. Only taken when that process's command line carries
        our token (a pid from an engine in another PID namespace would name a stranger)."""
        with self._proc_dir_lock:
            if self._proc_dir_known or self._closed:
                return self._proc_dir
            self._proc_dir_known = True
            pid = self._executor_host_pid()
            if not pid:
                return None
            try:
                fd = os.open(f"/proc/{pid}", os.O_PATH | os.O_DIRECTORY)
            except OSError:
                return None
            try:
                cmd = os.open("cmdline", os.O_RDONLY, dir_fd=fd)
                try:
                    data = fsops.read_all(cmd, 1 << 22)
                finally:
                    os.close(cmd)
            except OSError:
                data = None
            if not data or self.token.encode() not in data:
                os.close(fd)
                return None
            self._proc_dir = fd
            return fd

    def start(self) -> ResidentSandbox:
        with priming.first_start(self.backend):
            return self._start()

    def _start(self) -> ResidentSandbox:
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
            self._note_work(self.info)
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
        channel = self._channel
        if channel is not None:
            channel.refuse()
            if self._destroy_closes_channel_fds:
                channel.close()
        with self._proc_dir_lock:
            fd, self._proc_dir, self._proc_dir_known = self._proc_dir, None, True
        if fd is not None:
            os.close(fd)
        self._destroy()
        if channel is not None and not self._destroy_closes_channel_fds:
            channel.close()

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
        contain: bool = False,
    ) -> ExecResult:
        """Run ``cmd`` (a string goes to ``/bin/sh -c``). The command's own failures -- exit
        codes, signals, timeouts, OOM kills, a working directory it cannot enter -- come back
        in the result; only a broken sandbox raises :class:`SandboxError`.

        At a timeout everything the command started is killed, what left its process group with
        ``setsid`` or a double fork included. With ``contain`` that happens however it ends, so
        nothing it started survives the result (background jobs otherwise may, until ``reset``).
        """
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
            contain=contain,
        )
        return _exec_result(reply, t0, self.limits.memory_mb << 20)

    def exec_python(self, source: str, *, timeout: float | None = None, env: dict[str, str] | None = None,
                    cwd: str | None = None, contain: bool = False) -> ExecResult:
        """Run Python ``source`` in a child forked from the resident executor.

        Like ``exec(["python3", "-I", "-c", source])`` -- same limits, session, environment,
        ``contain`` and result -- but the child starts with the modules of
        ``SandboxSpec.preload`` already imported.
        """
        wall = self.limits.timeout_s if timeout is None else float(timeout)
        t0 = time.monotonic()
        reply = self._call(
            "pyexec", wall + EXEC_GRACE_S, source=source, timeout=wall, cap=self.limits.output_bytes,
            env={str(k): str(v) for k, v in (env or {}).items()}, cwd=self._rel(cwd) if cwd else ".",
            contain=contain,
        )
        return _exec_result(reply, t0, self.limits.memory_mb << 20)

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

    def list_files(self, path: str = ".") -> Listing:
        """Every non-directory entry under ``path``, recursively, relative to it, sorted -- as the
        agent's uid sees them. A :class:`Listing`: directories that could not be listed and the
        bounds of the walk it hit (depth, entries) are in ``left_out`` and ``cut``, not errors."""
        reply = self._call("list", TRANSFER_TIMEOUT_S, path=self._rel(path))
        return Listing(sorted(reply["files"]), reply.get("left_out"), reply.get("cut"))

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

    def read_tree(self, src: str = ".", max_bytes: int = MAX_READ_BYTES) -> Tree:
        """Every regular file under ``src`` (relative path -> content), read as a grader needs it.

        Whatever the agent did to the tree, this returns a :class:`Tree`: symlinks (never
        followed), FIFOs, sockets, devices, unreadable entries and what lies beyond the walk's
        bounds (``fsops.scan``: entries, depth, ``max_bytes`` in all) are listed in its
        ``left_out`` and ``cut``. It raises only for a ``src`` that is not there (or climbs out)
        and, as ``SandboxError``, for a sandbox that broke.

        Where this process can reach the sandbox's files (:meth:`_host_workdir`: docker on a local
        engine, bwrap, process) it reads them itself, with privileges the agent's uid cannot take
        away, so a file the agent made unreadable is read anyway; elsewhere (a remote engine) the
        executor reads as the agent's uid, and such a file is in ``left_out``.
        """
        rel = self._rel(src)
        fd = self._host_workdir()
        if fd is not None:
            try:
                found = fsops.scan_path(fd, rel, read_bytes=max_bytes)
            except OpError as exc:
                _raise_for_path(exc, src)
            finally:
                os.close(fd)
            return Tree(found.files, found.left_out, found.cut)
        try:
            reply = self._call("read_tree", TRANSFER_TIMEOUT_S, path=rel, max_bytes=max_bytes)
        except (ValueError, OSError) as exc:  # the request itself could not be served (memory, ...)
            if isinstance(exc, FileNotFoundError):
                raise
            return Tree(left_out={".": f"not read: {exc}"}, cut=[f"the tree could not be read: {exc}"])
        return tree_from_reply(reply)

    def reset(self) -> None:
        """Back to pristine: every process the agent started is killed, the work dir and the
        other writable scratch dirs are emptied, and where the sandbox has its own IPC namespace
        (docker, bwrap) every SysV shm/sem/msg object and POSIX message queue is removed."""
        self._note_work(self._call("reset", TRANSFER_TIMEOUT_S))

    def _note_work(self, reply: dict[str, Any]) -> None:
        work = reply.get("work")
        self._work_identity = (int(work[0]), int(work[1])) if work else None


def tree_from_reply(reply: dict[str, Any]) -> Tree:
    """The :class:`Tree` of an executor's ``read_tree`` reply."""
    return Tree({path: base64.b64decode(data) for path, data in reply["files"]}, reply.get("left_out"),
                reply.get("cut"))


def _raise_for_path(exc: OpError, src: str) -> None:
    """A bad or missing ``src`` of ``read_tree``, raised as the channel raises it."""
    if exc.kind == "not_found":
        raise FileNotFoundError(f"no such file or directory: {src}") from None
    raise ValueError(str(exc)) from None
