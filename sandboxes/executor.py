"""The resident executor: one long-lived ``python3`` process inside a sandbox.

Why it exists: ``docker exec`` costs ~80 ms per call and a fresh ``bwrap`` spawn ~20 ms, which
dominates an agent episode of many short tool calls. Instead every backend starts this script
once, as the sandbox's PID 1 where it can (docker, bwrap ``--as-pid-1``), and talks to it over
its stdin/stdout. It then runs commands with ``subprocess`` plus rlimits, a wall-clock timeout
that kills the whole process group, and output caps -- so these semantics are implemented once
and behave the same in every backend.

It is started as ``python3 -I -c <this file's source> <config json>`` so no image needs it baked
in. Hence: **stdlib only, Python >= 3.8, no imports from envhub**. The host imports this module
too, for the path helpers (``safe_write`` and friends); nothing runs at import time.

Protocol: every message is a 4-byte big-endian length followed by that many bytes of UTF-8
JSON. Requests are ``{"id": n, "op": name, ...}``; replies ``{"id": n, "ok": true, ...}`` or
``{"id": n, "ok": false, "kind": k, "error": text}`` with kind one of ``not_found``,
``bad_path``, ``is_dir``, ``too_large``, ``os_error`` (with ``errno``), ``internal``. Binary payloads are base64.
The host never pipelines: one request, then its reply.

Being PID 1 matters: from inside its PID namespace, PID 1 cannot be killed by signals it has no
handler for (the agent's ``kill -9 1`` does nothing), ``kill(-1, SIGKILL)`` wipes every other
process on reset, and orphans are re-parented to it, so it reaps them.
"""

from __future__ import annotations

import base64
import contextlib
import io
import json
import os
import resource
import selectors
import shutil
import signal
import stat
import struct
import subprocess
import sys
import tarfile
import time

HEADER = struct.Struct(">I")
MAX_FRAME = 512 * 1024 * 1024
CHUNK = 65536
#: Signs in stderr that a command died of an rlimit memory cap (no cgroup OOM counter there).
OOM_MARKERS = (b"MemoryError", b"Cannot allocate memory", b"std::bad_alloc", b"out of memory")
RLIMITS = {
    "as": resource.RLIMIT_AS,
    "cpu": resource.RLIMIT_CPU,
    "fsize": resource.RLIMIT_FSIZE,
    "nproc": resource.RLIMIT_NPROC,
    "nofile": resource.RLIMIT_NOFILE,
    "core": resource.RLIMIT_CORE,
}
OOM_COUNTER_FILES = ("/sys/fs/cgroup/memory.events", "/sys/fs/cgroup/memory/memory.oom_control")
#: SysV IPC kinds: (/proc/sysvipc file, ipcrm flag). They live in the IPC namespace, not in any
#: directory we wipe, so without this a segment would carry state from one episode to the next.
SYSV_IPC = (("shm", "-m"), ("sem", "-s"), ("msg", "-q"))
#: IPC filesystems emptied on reset where the sandbox has its own IPC namespace.
IPC_DIRS = ("/dev/shm", "/dev/mqueue")


class OpError(Exception):
    """A request the executor refuses (bad path, missing file): a reply, not a crash."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


class HostGone(Exception):
    """stdin hit EOF: the host process went away, so the sandbox must wind down."""


# ---- safe paths ------------------------------------------------------------------------------
# Every path is walked one component at a time with O_NOFOLLOW, relative to an open directory
# fd. A symlink the agent planted can therefore never redirect a read or write (ours, or the
# host's on copy-out) outside the root, whatever it points at.


def rel_parts(rel: str) -> list[str]:
    """Split a root-relative path; refuse absolute paths and ``..``."""
    if rel.startswith("/"):
        raise OpError("bad_path", f"path {rel!r} must be relative to the work directory")
    parts = [p for p in rel.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise OpError("bad_path", f"path {rel!r} leaves the work directory")
    return parts


def open_dir(root: str, parts: list[str], create: bool = False) -> int:
    """Open ``root/parts...`` as a directory fd without following any symlink on the way."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for part in parts:
            if create:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, 0o755, dir_fd=fd)
            try:
                nfd = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            except FileNotFoundError:
                raise OpError("not_found", "no such directory: " + "/".join(parts)) from None
            except (NotADirectoryError, OSError) as exc:
                raise OpError("bad_path", f"{part} is not a directory (or is a symlink): {exc}") from None
            os.close(fd)
            fd = nfd
    except BaseException:
        os.close(fd)
        raise
    return fd


def safe_write(root: str, rel: str, data: bytes, mode: int = 0o644) -> None:
    """Write a regular file under ``root``; a symlink or file already there is replaced."""
    parts = rel_parts(rel)
    if not parts:
        raise OpError("is_dir", "cannot write to the work directory itself")
    dfd = open_dir(root, parts[:-1], create=True)
    try:
        name = parts[-1]
        try:
            st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
        except FileNotFoundError:
            st = None
        if st is not None and stat.S_ISDIR(st.st_mode):
            raise OpError("is_dir", f"{rel} is a directory")
        if st is not None and not stat.S_ISREG(st.st_mode):
            os.unlink(name, dir_fd=dfd)
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, mode & 0o777, dir_fd=dfd)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            os.fchmod(fh.fileno(), mode & 0o777)
    finally:
        os.close(dfd)


def safe_read(root: str, rel: str, max_bytes: int) -> bytes:
    """Read a regular file under ``root``; symlinks, FIFOs and devices are refused."""
    parts = rel_parts(rel)
    if not parts:
        raise OpError("is_dir", "the work directory is a directory")
    dfd = open_dir(root, parts[:-1])
    try:
        try:
            fd = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dfd)
        except FileNotFoundError:
            raise OpError("not_found", f"no such file: {rel}") from None
        except OSError as exc:
            raise OpError("bad_path", f"cannot open {rel} (a symlink?): {exc.strerror}") from None
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            if stat.S_ISDIR(st.st_mode):
                raise OpError("is_dir", f"{rel} is a directory")
            raise OpError("bad_path", f"{rel} is not a regular file")
        os.set_blocking(fd, True)
        chunks, total = [], 0
        with os.fdopen(fd, "rb") as fh:  # in chunks: read(n) would allocate n bytes up front
            while True:
                chunk = fh.read(min(1 << 20, max_bytes + 1 - total))
                if not chunk:
                    break
                chunks.append(chunk)
                total += len(chunk)
                if total > max_bytes:
                    raise OpError("too_large", f"{rel} is larger than {max_bytes} bytes")
    finally:
        os.close(dfd)
    return b"".join(chunks)


def walk(root: str, rel: str, max_entries: int):
    """Yield ``(relpath, kind, st)`` under ``root/rel`` without following symlinks.

    ``kind`` is ``dir``, ``file``, ``link`` or ``other``. Paths are relative to ``root/rel``.
    """
    parts = rel_parts(rel)
    count = 0

    def kind_of(mode: int) -> str:
        if stat.S_ISDIR(mode):
            return "dir"
        if stat.S_ISREG(mode):
            return "file"
        if stat.S_ISLNK(mode):
            return "link"
        return "other"

    def visit(dfd: int, prefix: str):
        nonlocal count
        with os.scandir(dfd) as it:
            entries = sorted(it, key=lambda e: e.name)
        for entry in entries:
            count += 1
            if count > max_entries:
                raise OpError("too_large", f"more than {max_entries} entries under {rel or '.'}")
            st = entry.stat(follow_symlinks=False)
            path = prefix + entry.name
            kind = kind_of(st.st_mode)
            yield path, kind, st
            if kind == "dir":
                try:
                    sub = os.open(entry.name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=dfd)
                except OSError:
                    continue
                try:
                    yield from visit(sub, path + "/")
                finally:
                    os.close(sub)

    if parts:
        pfd = open_dir(root, parts[:-1])
        try:
            st = os.stat(parts[-1], dir_fd=pfd, follow_symlinks=False)
        except FileNotFoundError:
            os.close(pfd)
            raise OpError("not_found", f"no such file or directory: {rel}") from None
        os.close(pfd)
        if not stat.S_ISDIR(st.st_mode):
            yield parts[-1], kind_of(st.st_mode), st
            return
    dfd = open_dir(root, parts)
    try:
        yield from visit(dfd, "")
    finally:
        os.close(dfd)


def link_stays_inside(member_name: str, target: str) -> bool:
    """True when a relative symlink at ``member_name`` points inside the tree, lexically,
    without any ``..`` (chains of ``..`` through other links could otherwise climb out)."""
    if target.startswith("/") or ".." in target.split("/"):
        return False
    return bool(target.strip("/"))


def extract_tar(root: str, dest: str, data: bytes, allow_links: bool) -> dict:
    """Unpack a tar under ``root/dest`` with the safe walkers; return what was written/skipped.

    Only directories and regular files are created (plus, when ``allow_links``, relative
    symlinks that stay inside). Devices, FIFOs, hard links, absolute or climbing names are
    skipped and listed, never followed.
    """
    base = rel_parts(dest)
    written, skipped = 0, []
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
        for member in tar:
            try:
                parts = base + rel_parts(member.name)
            except OpError:
                skipped.append(member.name)
                continue
            rel = "/".join(parts)
            if member.isdir():
                if parts:
                    os.close(open_dir(root, parts, create=True))
            elif member.isreg():
                fh = tar.extractfile(member)
                safe_write(root, rel, fh.read() if fh else b"", member.mode | 0o600)
                written += 1
            elif member.issym() and allow_links and parts and link_stays_inside(member.name, member.linkname):
                dfd = open_dir(root, parts[:-1], create=True)
                try:
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(parts[-1], dir_fd=dfd)
                    os.symlink(member.linkname, parts[-1], dir_fd=dfd)
                finally:
                    os.close(dfd)
                written += 1
            else:
                skipped.append(member.name)
    return {"written": written, "skipped": skipped}


def pack_tar(root: str, src: str, max_bytes: int) -> dict:
    """Tar regular files and directories under ``root/src``; symlinks and specials are skipped.

    A directory ``src`` contributes its contents; a file ``src`` contributes itself by name.
    """
    parts = rel_parts(src)
    base = parts
    if parts:
        dfd = open_dir(root, parts[:-1])
        try:
            mode = os.stat(parts[-1], dir_fd=dfd, follow_symlinks=False).st_mode
        except FileNotFoundError:
            raise OpError("not_found", f"no such file or directory: {src}") from None
        finally:
            os.close(dfd)
        if not stat.S_ISDIR(mode):
            base = parts[:-1]
    buf = io.BytesIO()
    skipped, total = [], 0
    with tarfile.open(fileobj=buf, mode="w:") as tar:
        for path, kind, st in walk(root, src, max_entries=200000):
            info = tarfile.TarInfo(path)
            info.mtime = int(st.st_mtime)
            if kind == "dir":
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
            elif kind == "file":
                data = safe_read(root, "/".join([*base, path]), max_bytes - total)
                total += len(data)
                info.size, info.mode = len(data), st.st_mode & 0o777
                tar.addfile(info, io.BytesIO(data))
            else:
                skipped.append(path)
    return {"data": buf.getvalue(), "skipped": skipped}


# ---- the server ------------------------------------------------------------------------------


class Capture:
    """Keep the first ``cap`` bytes of a stream, count the rest, and remember a short tail."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.head = bytearray()
        self.dropped = 0
        self.tail = b""

    def feed(self, data: bytes) -> None:
        room = self.cap - len(self.head)
        if room > 0:
            self.head += data[:room]
        self.dropped += max(0, len(data) - max(room, 0))
        self.tail = (self.tail + data)[-4096:]


def apply_limits(limits: dict) -> None:
    """Lower our own rlimits once at startup; every command inherits them.

    Why not per command: a ``preexec_fn`` forces ``fork()`` instead of ``vfork()``, which costs
    4-8 ms on small VMs against ~1 ms, and would dominate a warm exec. The executor lives under
    the same limits as the commands, which its small, bounded transfers fit into.
    """
    for name, value in limits.items():
        if name not in RLIMITS or value is None:
            continue
        try:
            _, hard = resource.getrlimit(RLIMITS[name])
            value = int(value) if hard == resource.RLIM_INFINITY else min(int(value), hard)
            resource.setrlimit(RLIMITS[name], (value, value))
        except (ValueError, OSError):
            pass


def prefer_oom(pid: int) -> None:
    """Make a command (and what it forks later) the OOM killer's first choice, not us."""
    try:
        with open(f"/proc/{pid}/oom_score_adj", "w") as fh:
            fh.write("1000")
    except OSError:
        pass


def pidfd(pid: int):
    """A pollable fd that becomes readable when ``pid`` exits (Linux >= 5.3), else None."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


class ForkedPython:
    """The part of ``subprocess.Popen`` that ``_pump`` and ``_kill_group`` use, for a forked child."""

    def __init__(self, source: str, cwd: str, env: dict) -> None:
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - runs in the child
            _forked_child(source, cwd, env, out_w, err_w)
        os.close(out_w)
        os.close(err_w)
        self.pid = pid
        self.stdin = None
        self.stdout = open(out_r, "rb", buffering=0)  # noqa: SIM115 - closed by _pump
        self.stderr = open(err_r, "rb", buffering=0)  # noqa: SIM115 - closed by _pump
        self.returncode = None

    def poll(self):
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:
                self.returncode = -signal.SIGKILL
                return self.returncode
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout=None):
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired("pyexec", timeout)
            time.sleep(0.001)
        return self.returncode


def _forked_child(source: str, cwd: str, env: dict, out_w: int, err_w: int) -> None:
    """Become a fresh-looking Python process for ``source``; never returns."""
    code = 1
    try:
        os.setsid()
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(out_w, 1)
        os.dup2(err_w, 2)
        os.closerange(3, 65536)  # the protocol channel, pidfds, pipes: nothing of ours survives
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGPIPE, signal.SIGCHLD, signal.SIGHUP):
            signal.signal(sig, signal.SIG_DFL)
        os.chdir(cwd)
        os.environ.clear()
        os.environ.update(env)
        sys.stdin = open(0, closefd=False)  # noqa: SIM115 - the child exits with os._exit
        sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115
        sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
        sys.argv = ["-c"]
        try:
            exec(compile(source, "<pyexec>", "exec"), {"__name__": "__main__"})
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            if not isinstance(exc.code, int) and exc.code is not None:
                print(exc.code, file=sys.stderr)
        except BaseException:
            import traceback

            traceback.print_exc()
            code = 1
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code & 0xFF)


class Executor:
    def __init__(self, config: dict) -> None:
        self.workdir = config["workdir"]
        self.wipe_dirs = list(config.get("wipe", [self.workdir]))
        self.base_env = dict(config.get("env", {}))
        self.kill_all = bool(config.get("kill_all")) and os.getpid() == 1
        # Only where the IPC namespace is the sandbox's own (docker, bwrap): on the process
        # backend it is the host's, and its objects are not ours to remove.
        self.wipe_ipc = bool(config.get("wipe_ipc"))
        self.oom_mode = config.get("oom", "heuristic")
        self.groups: set[int] = set()
        self.inbuf = bytearray()
        # Modules imported once here so that ``pyexec`` children start with them loaded (a grading
        # sandbox preloads pytest: each hidden-test run then skips ~100 ms of imports).
        self.preloaded = []
        for name in config.get("preload", []):
            try:
                __import__(name)
                self.preloaded.append(name)
            except Exception:
                pass

    # -- framing --

    def fill(self) -> None:
        data = os.read(0, CHUNK)
        if not data:
            raise HostGone()
        self.inbuf += data

    def read_frame(self):
        while len(self.inbuf) < 4:
            self.fill()
        (size,) = HEADER.unpack(self.inbuf[:4])
        if size > MAX_FRAME:
            raise HostGone()
        while len(self.inbuf) < 4 + size:
            self.fill()
        payload = bytes(self.inbuf[4 : 4 + size])
        del self.inbuf[: 4 + size]
        return json.loads(payload.decode("utf-8"))

    @staticmethod
    def write_frame(obj: dict) -> None:
        payload = json.dumps(obj, separators=(",", ":")).encode("utf-8")
        view = memoryview(HEADER.pack(len(payload)) + payload)
        while view:
            n = os.write(1, view)
            view = view[n:]

    def serve(self) -> None:
        try:
            while True:
                req = self.read_frame()
                op = req.get("op", "")
                try:
                    reply = getattr(self, "op_" + op)(req) if hasattr(self, "op_" + op) else None
                    if reply is None:
                        raise OpError("internal", f"unknown op {op!r}")
                    reply.update(id=req.get("id"), ok=True)
                except OpError as exc:
                    reply = {"id": req.get("id"), "ok": False, "kind": exc.kind, "error": str(exc)}
                except HostGone:
                    raise
                except MemoryError:  # our own rlimit (bwrap/process): the transfer is too big
                    reply = {"id": req.get("id"), "ok": False, "kind": "too_large",
                             "error": "the transfer does not fit the sandbox's memory limit"}
                except OSError as exc:  # e.g. ENOSPC: the agent filled the disk; not a broken sandbox
                    reply = {"id": req.get("id"), "ok": False, "kind": "os_error", "errno": exc.errno,
                             "error": "{}: {}".format(exc.strerror or exc, exc.filename or "")}
                except Exception as exc:
                    reply = {"id": req.get("id"), "ok": False, "kind": "internal", "error": repr(exc)}
                self.write_frame(reply)
                if op == "shutdown":
                    break
        except (HostGone, BrokenPipeError):
            pass
        finally:
            self.kill_everything()

    # -- ops --

    def op_hello(self, req: dict) -> dict:
        return {"pid": os.getpid(), "uid": os.getuid(), "python": sys.version.split()[0], "kill_all": self.kill_all}

    def op_ping(self, req: dict) -> dict:
        return {}

    def op_shutdown(self, req: dict) -> dict:
        return {}

    def op_write(self, req: dict) -> dict:
        for rel, b64, mode in req["files"]:
            safe_write(self.workdir, rel, base64.b64decode(b64), int(mode))
        return {"written": len(req["files"])}

    def op_read(self, req: dict) -> dict:
        data = safe_read(self.workdir, req["path"], int(req.get("max_bytes", 64 * 1024 * 1024)))
        return {"data": base64.b64encode(data).decode("ascii")}

    def op_list(self, req: dict) -> dict:
        files = [p for p, kind, _ in walk(self.workdir, req.get("path", "."), int(req.get("max_entries", 100000)))
                 if kind != "dir"]
        return {"files": files}

    def op_put_tar(self, req: dict) -> dict:
        return extract_tar(self.workdir, req.get("dest", "."), base64.b64decode(req["data"]), allow_links=True)

    def op_get_tar(self, req: dict) -> dict:
        packed = pack_tar(self.workdir, req.get("src", "."), int(req.get("max_bytes", 256 * 1024 * 1024)))
        return {"data": base64.b64encode(packed["data"]).decode("ascii"), "skipped": packed["skipped"]}

    def op_reset(self, req: dict) -> dict:
        killed = self.kill_everything()  # first: a segment still attached is not removed at once
        ipc = 0
        dirs = list(self.wipe_dirs)
        if self.wipe_ipc:
            ipc = remove_sysv_ipc(self.base_env.get("PATH"))
            dirs += [d for d in IPC_DIRS if d not in dirs and os.access(d, os.W_OK)]
        for path in dirs:
            wipe(path)
        os.makedirs(self.workdir, exist_ok=True)
        return {"killed": killed, "ipc_removed": ipc}

    def op_exec(self, req: dict) -> dict:
        argv = req["argv"]
        timeout = float(req.get("timeout", 10.0))
        cap = int(req.get("cap", 65536))
        env = dict(self.base_env)
        env.update(req.get("env") or {})
        try:
            cwd_fd = open_dir(self.workdir, rel_parts(req.get("cwd") or "."))
            os.close(cwd_fd)
        except OpError as exc:
            return self._failed(2, f"envhub: cannot use working directory: {exc}\n")
        cwd = os.path.join(self.workdir, *rel_parts(req.get("cwd") or "."))
        stdin_data = base64.b64decode(req["stdin"]) if req.get("stdin") is not None else None
        oom_before = self.oom_count()
        start = time.monotonic()
        try:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE if stdin_data is not None else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                cwd=cwd,
                env=env,
                start_new_session=True,
                close_fds=True,
            )
        except FileNotFoundError:
            return self._failed(127, f"envhub: command not found: {argv[0]}\n")
        except PermissionError:
            return self._failed(126, f"envhub: permission denied: {argv[0]}\n")
        except (OSError, subprocess.SubprocessError) as exc:
            return self._failed(126, f"envhub: cannot start the command: {exc}\n")
        return self._complete(proc, stdin_data, cap, start, start + timeout, oom_before)

    # -- exec helpers --

    def op_pyexec(self, req: dict) -> dict:
        """Run Python source in a child forked from this executor (preloaded modules included).

        The child gets exactly what an ``exec`` command gets -- its own session, the work dir, the
        request's environment, our rlimits, output pipes -- and none of our descriptors: the
        protocol channel is closed before any of its code runs.
        """
        timeout, cap, env, cwd = self._command_setup(req)
        if cwd is None:
            return self._failed(2, f"envhub: cannot use working directory: {req.get('cwd')}\n")
        oom_before = self.oom_count()
        start = time.monotonic()
        proc = ForkedPython(req["source"], cwd, env)
        return self._complete(proc, None, cap, start, start + timeout, oom_before)

    def _command_setup(self, req: dict) -> tuple[float, int, dict, str | None]:
        """Timeout, output cap, environment and working directory of an exec-like request
        (the directory is None when it cannot be used)."""
        env = dict(self.base_env)
        env.update(req.get("env") or {})
        try:
            os.close(open_dir(self.workdir, rel_parts(req.get("cwd") or ".")))
        except OpError:
            return float(req.get("timeout", 10.0)), int(req.get("cap", 65536)), env, None
        cwd = os.path.join(self.workdir, *rel_parts(req.get("cwd") or "."))
        return float(req.get("timeout", 10.0)), int(req.get("cap", 65536)), env, cwd

    def _complete(self, proc, stdin_data, cap: int, start: float, deadline: float, oom_before: int) -> dict:
        """Wait for a started command (``exec`` or ``pyexec``) and build its reply."""
        self.groups.add(proc.pid)
        prefer_oom(proc.pid)
        out, err = Capture(cap), Capture(cap)
        timed_out = self._pump(proc, stdin_data, out, err, deadline)
        if timed_out:
            self._kill_group(proc)
        rc = proc.returncode if proc.returncode is not None else -signal.SIGKILL
        duration = time.monotonic() - start
        self.reap()
        try:  # forget the group once nothing of it is left (background jobs keep it alive)
            os.killpg(proc.pid, 0)
        except (ProcessLookupError, PermissionError):
            self.groups.discard(proc.pid)
        sig = -rc if rc < 0 else None
        exit_code = 128 + sig if sig else rc
        if self.oom_mode == "cgroup":
            oom = self.oom_count() > oom_before
        else:
            oom = exit_code != 0 and not timed_out and any(m in err.tail for m in OOM_MARKERS)
        return {
            "exit_code": exit_code,
            "signal": sig,
            "stdout": base64.b64encode(bytes(out.head)).decode("ascii"),
            "stdout_dropped": out.dropped,
            "stderr": base64.b64encode(bytes(err.head)).decode("ascii"),
            "stderr_dropped": err.dropped,
            "timed_out": timed_out,
            "oom_killed": oom,
            "duration": duration,
        }

    def _pump(self, proc, stdin_data, out: Capture, err: Capture, deadline: float) -> bool:
        """Shovel stdin/stdout/stderr until the command has exited *and* both outputs closed,
        or the deadline passed (then return True). A background job that keeps the outputs
        open therefore counts against the timeout, as with ``subprocess.run``.

        Also watches our own stdin: EOF there means the host died mid-command.
        """
        sel = selectors.DefaultSelector()
        sel.register(proc.stdout, selectors.EVENT_READ, out)
        sel.register(proc.stderr, selectors.EVENT_READ, err)
        sel.register(0, selectors.EVENT_READ, "host")
        exit_fd = pidfd(proc.pid)
        if exit_fd is not None:
            sel.register(exit_fd, selectors.EVENT_READ, "exit")
        pending = memoryview(stdin_data) if stdin_data is not None else None
        if pending is not None:
            os.set_blocking(proc.stdin.fileno(), False)
            if len(pending):
                sel.register(proc.stdin, selectors.EVENT_WRITE, "stdin")
            else:
                proc.stdin.close()
        open_outputs, exited = 2, False
        try:
            while open_outputs or not exited:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return True
                if exit_fd is None and not open_outputs:  # no pidfd: fall back to polling
                    try:
                        proc.wait(timeout=remaining)
                    except subprocess.TimeoutExpired:
                        return True
                    return False
                for key, _ in sel.select(min(remaining, 1.0)):
                    if key.data == "host":
                        self.fill()
                    elif key.data == "exit":
                        sel.unregister(key.fd)
                        proc.wait()
                        exited = True
                    elif key.data == "stdin":
                        try:
                            n = os.write(key.fd, pending[:CHUNK])
                            pending = pending[n:]
                        except BlockingIOError:
                            continue
                        except BrokenPipeError:
                            pending = pending[:0]
                        if not len(pending):
                            sel.unregister(key.fileobj)
                            proc.stdin.close()
                    else:
                        data = os.read(key.fd, CHUNK)
                        if data:
                            key.data.feed(data)
                        else:
                            sel.unregister(key.fileobj)
                            key.fileobj.close()
                            open_outputs -= 1
            return False
        finally:
            for key in list(sel.get_map().values()):
                if key.data in ("host", "exit"):
                    continue
                key.fileobj.close()
            sel.close()
            if exit_fd is not None:
                os.close(exit_fd)

    def _failed(self, code: int, message: str) -> dict:
        return {
            "exit_code": code,
            "signal": None,
            "stdout": "",
            "stdout_dropped": 0,
            "stderr": base64.b64encode(message.encode()).decode("ascii"),
            "stderr_dropped": 0,
            "timed_out": False,
            "oom_killed": False,
            "duration": 0.0,
        }

    def _kill_group(self, proc) -> None:
        """SIGKILL the command's whole process group, collecting the main process first.

        killpg is atomic against forks inside the group, so a fork bomb cannot outrun it; it is
        repeated until the group is empty (members turn into zombies until reaped).
        """
        for attempt in range(50):
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                return
            if attempt == 0:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=5)
            self.reap()
            time.sleep(0.002)

    def oom_count(self) -> int:
        for path in OOM_COUNTER_FILES:
            try:
                with open(path) as fh:
                    for line in fh:
                        key, _, value = line.partition(" ")
                        if key == "oom_kill":
                            return int(value)
            except (OSError, ValueError):
                continue
        return 0

    def reap(self) -> None:
        """Collect exited children and orphans (as PID 1 every orphan becomes ours)."""
        while True:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return

    def kill_everything(self) -> int:
        """SIGKILL every process the agent started; as PID 1 that is everyone but us.

        Otherwise (process backend) it is our descendant tree: we are a child subreaper, so even
        jobs that detached with setsid are re-parented to us when their parent exits.
        """
        killed = 0
        if not self.kill_all:
            for _ in range(20):
                tree = descendants(os.getpid())
                if not tree:
                    break
                for pid in tree:
                    try:
                        os.kill(pid, signal.SIGKILL)
                        killed += 1
                    except (ProcessLookupError, PermissionError):
                        pass
                self.reap()
                time.sleep(0.002)
        if self.kill_all:
            end = time.monotonic() + 5
            while time.monotonic() < end:
                try:
                    os.kill(-1, signal.SIGKILL)
                    killed += 1
                except ProcessLookupError:
                    break
                self.reap()
                time.sleep(0.001)
        for pgid in list(self.groups):
            try:
                os.killpg(pgid, signal.SIGKILL)
                killed += 1
            except (ProcessLookupError, PermissionError):
                self.groups.discard(pgid)
        self.reap()
        return killed


def descendants(root: int) -> list[int]:
    """Live (non-zombie) processes below ``root``, from /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                fields = fh.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] != b"Z":
            children.setdefault(int(fields[1]), []).append(int(entry))
    found, todo = [], list(children.get(root, []))
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found


def sysv_ipc_objects(uid: int) -> list[tuple[str, int]]:
    """``(kind, id)`` of every SysV shared-memory segment, semaphore set and message queue
    listed in /proc/sysvipc that ``uid`` created or owns."""
    found = []
    for kind, _ in SYSV_IPC:
        try:
            with open("/proc/sysvipc/" + kind) as fh:
                rows = [line.split() for line in fh.read().splitlines() if line.strip()]
        except OSError:
            continue
        if not rows:
            continue
        header = rows[0]
        owners = [header.index(c) for c in ("uid", "cuid") if c in header]
        for row in rows[1:]:
            try:
                ident = int(row[1])
                if any(int(row[i]) == uid for i in owners):
                    found.append((kind, ident))
            except (IndexError, ValueError):
                continue
    return found


def remove_sysv_ipc(path=None) -> int:
    """Remove our SysV IPC objects; returns how many went away.

    With ``ipcrm`` (util-linux, in the image and under the host's /usr) if there is one, else --
    or for whatever it left -- with the ``*ctl(IPC_RMID)`` calls themselves, through ctypes.
    """
    uid = os.getuid()
    before = sysv_ipc_objects(uid)
    if not before:
        return 0
    flags = dict(SYSV_IPC)
    ipcrm = shutil.which("ipcrm", path=path)
    if ipcrm:
        argv = [ipcrm]
        for kind, ident in before:
            argv += [flags[kind], str(ident)]
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, timeout=10, close_fds=True)
    left = sysv_ipc_objects(uid)
    if left:
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            ipc_rmid = 0
            for kind, ident in left:
                if kind == "shm":
                    libc.shmctl(ident, ipc_rmid, None)
                elif kind == "sem":
                    libc.semctl(ident, 0, ipc_rmid)
                else:
                    libc.msgctl(ident, ipc_rmid, None)
        except Exception:
            pass
        left = sysv_ipc_objects(uid)
    return len(before) - len(left)


def wipe(path: str) -> None:
    """Empty a directory, whatever permissions the agent left on things inside it."""
    try:
        if not os.stat(path).st_mode & stat.S_ISVTX:  # our work dir, not a shared /tmp
            os.chmod(path, 0o755)
    except OSError:
        pass
    try:
        entries = list(os.scandir(path))
    except OSError:
        return
    for entry in entries:
        full = os.path.join(path, entry.name)
        try:
            if entry.is_dir(follow_symlinks=False):
                with contextlib.suppress(OSError):
                    os.chmod(full, 0o700)
                wipe(full)
                os.rmdir(full)
            else:
                os.unlink(full)
        except OSError:
            pass


def main() -> None:
    config = json.loads(sys.argv[1]) if len(sys.argv) > 1 else {"workdir": os.getcwd()}
    try:
        import ctypes

        libc = ctypes.CDLL(None)
        libc.prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE=0: no ptrace, no /proc/<us>/fd to forge frames
        libc.prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER: orphans come back to us to be reaped
    except Exception:
        pass
    # Python's default SIGINT handler would make us killable by the agent: as PID 1 of a
    # namespace, only signals we handle get through, so handle none.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    os.makedirs(config["workdir"], exist_ok=True)
    os.chdir(config["workdir"])
    apply_limits(config.get("limits", {}))
    os.umask(0o022)
    Executor(config).serve()


if __name__ == "__main__":
    main()
