"""The bubblewrap backend: the executor in fresh namespaces, on the host's read-only /usr.

Layout inside: ``/usr`` (and the ``/bin``, ``/lib*`` links or dirs next to it) bound read-only,
except that every installed copy of envhub under them is covered by an empty read-only tmpfs
(:mod:`.hidden`: its task data -- hidden tests, gold sources, manifests -- must not be readable
from a sandbox); a synthetic ``/etc`` holding only what the dynamic loader and ``getpwuid``
need -- never the host's shadow file, users or configuration; fresh ``/proc`` and ``/dev``;
size-limited tmpfs for ``/work``, ``/tmp`` and ``/dev/shm``. Nothing else of the host exists in
there: not /root, not /home, not the project checkout.

The host reads a sandbox's files itself through ``/proc/<executor pid>/root`` (the pid comes
from bwrap's ``--info-fd``), so a grader's snapshot does not depend on modes the agent set.

Every namespace is unshared, the network included (``--unshare-all``); capabilities are
dropped; the executor runs as uid 1000 in its own user namespace and is PID 1 of its PID
namespace (``--as-pid-1``), so the agent cannot kill it and a reset can ``kill(-1)``.

Why the host uid is dropped to ``nobody`` when we run as root: the kernel never enforces
RLIMIT_NPROC for uid 0 -- not even for a uid mapped onto 0 inside a user namespace -- so a fork
bomb would be unbounded. As an unprivileged host uid, the per-user-namespace process count
applies. bwrap cannot use cgroups, so memory is capped per process (RLIMIT_AS) only.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import subprocess
import tempfile
import time

from envhub.sandboxes import spawner
from envhub.sandboxes.base import SandboxSpec
from envhub.sandboxes.channel import PipeTransport, Transport
from envhub.sandboxes.hidden import hidden_paths
from envhub.sandboxes.resident import BASE_ENV, ResidentSandbox, executor_argv

SANDBOX_UID = 1000
#: The host uid bwrap runs as when we are root (see the module docstring).
UNPRIVILEGED_UID = 65534
PYTHON_CANDIDATES = ("/usr/bin/python3", "/usr/local/bin/python3")
SYSTEM_LINKS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
HOST_ETC = ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/alternatives", "/etc/localtime")
#: How long to wait for bwrap's --info-fd JSON once the executor has answered (it is written first).
INFO_TIMEOUT_S = 5.0
NETWORK_ETC = ("/etc/resolv.conf", "/etc/hosts", "/etc/ssl", "/etc/ca-certificates")


def bwrap_binary() -> str | None:
    return shutil.which("bwrap")


def sandbox_python() -> str | None:
    """A python3 under /usr -- the only host tree the sandbox sees."""
    return next((p for p in PYTHON_CANDIDATES if os.access(p, os.X_OK)), None)


def _synthetic_etc() -> dict[str, bytes]:
    return {
        "/etc/passwd": f"root:x:0:0:root:/root:/bin/sh\nagent:x:{SANDBOX_UID}:{SANDBOX_UID}:envhub agent:/tmp:/bin/sh\n"
        f"nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n".encode(),
        "/etc/group": f"root:x:0:\nagent:x:{SANDBOX_UID}:\nnogroup:x:65534:\n".encode(),
        "/etc/hostname": b"sandbox\n",
        "/etc/hosts": b"127.0.0.1 localhost sandbox\n::1 localhost\n",
        "/etc/nsswitch.conf": b"passwd: files\ngroup: files\nhosts: files dns\n",
    }


def bound_roots() -> tuple[str, ...]:
    """The host directories a sandbox sees (read-only): /usr and the system dirs beside it."""
    return ("/usr", *(p for p in SYSTEM_LINKS if os.path.isdir(p) and not os.path.islink(p)))


def bwrap_args(spec: SandboxSpec, data_fds: dict[str, int], workdir: str = "/work",
               hidden: tuple[str, ...] = ()) -> list[str]:
    """The bwrap command line (without the command). ``data_fds`` maps /etc files to fds;
    each of ``hidden`` (under the bound roots) is covered: a directory by an empty read-only tmpfs,
    a file by an empty one."""
    limits = spec.limits
    disk = str(limits.disk_mb * 1024 * 1024)
    args = [
        "--unshare-all",
        "--unshare-user",
        "--uid", str(SANDBOX_UID),
        "--gid", str(SANDBOX_UID),
        "--disable-userns",
        "--die-with-parent",
        "--new-session",
        "--as-pid-1",
        "--cap-drop", "ALL",
        "--hostname", "sandbox",
        "--ro-bind", "/usr", "/usr",
    ]
    if limits.network:
        args.append("--share-net")
    for path in SYSTEM_LINKS:
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    for path in hidden:
        if os.path.isdir(path):
            args += ["--size", "4096", "--tmpfs", path, "--remount-ro", path]
        else:
            args += ["--ro-bind", "/dev/null", path]
    args += ["--dir", "/etc"]
    for path in HOST_ETC + (NETWORK_ETC if limits.network else ()):
        args += ["--ro-bind-try", path, path]
    for dest, fd in data_fds.items():
        args += ["--ro-bind-data", str(fd), dest]
    args += [
        "--proc", "/proc",
        "--dev", "/dev",
        # POSIX message queues live in the IPC namespace whether mounted or not; mounted, reset
        # can see and remove them.
        "--mqueue", "/dev/mqueue",
        "--size", disk, "--tmpfs", "/dev/shm",
        "--size", disk, "--tmpfs", "/tmp",
        "--size", disk, "--tmpfs", workdir,
        # bwrap's root and /dev are tmpfs the sandbox user owns: make them read-only last, so
        # the only writable places are the size-limited /work, /tmp and /dev/shm.
        "--remount-ro", "/dev",
        "--remount-ro", "/",
        "--chdir", workdir,
        "--clearenv",
    ]
    for key, value in {**BASE_ENV, "HOME": "/tmp", "USER": "agent"}.items():
        args += ["--setenv", key, value]
    return args


class BwrapSandbox(ResidentSandbox):
    backend = "bwrap"
    workdir = "/work"

    def __init__(self, spec: SandboxSpec | None = None) -> None:
        super().__init__(spec)
        self._proc: subprocess.Popen[bytes] | None = None
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 - lives as long as the sandbox
        self._info: int | None = None  # read end of bwrap's --info-fd (it names the executor's pid)

    def _launch(self) -> Transport:
        bwrap, python = bwrap_binary(), sandbox_python()
        if bwrap is None:
            raise FileNotFoundError("bwrap is not installed")
        if python is None:
            raise FileNotFoundError("no python3 under /usr for the sandbox")
        fds: dict[str, int] = {}
        info_write = None
        try:
            for dest, content in _synthetic_etc().items():
                read_end, write_end = os.pipe()  # each is far below the pipe buffer size
                os.write(write_end, content)
                os.close(write_end)
                fds[dest] = read_end
            self._info, info_write = os.pipe()
            config = {
                "workdir": self.workdir,
                "wipe": [self.workdir, "/tmp", "/dev/shm"],
                "env": {**BASE_ENV, "HOME": "/tmp", "USER": "agent"},
                "kill_all": True,
                "wipe_ipc": True,  # its own IPC namespace: SysV objects, /dev/shm, /dev/mqueue
                "oom": "heuristic",
                "limits": self._rlimits(),
                "token": self.token,
            }
            hidden = hidden_paths(bound_roots())
            argv = [bwrap, *bwrap_args(self.spec, fds, self.workdir, hidden), "--info-fd", str(info_write), "--",
                    *executor_argv(python, {**config, "preload": list(self.spec.preload)})]
            drop = os.getuid() == 0
            self._proc = spawner.popen(  # not from this thread: see spawner.py
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=self._stderr,
                pass_fds=(*fds.values(), info_write),
                cwd="/",
                env={"PATH": BASE_ENV["PATH"]},
                user=UNPRIVILEGED_UID if drop else None,
                group=UNPRIVILEGED_UID if drop else None,
                extra_groups=[] if drop else None,
            )
        finally:
            for fd in [*fds.values(), info_write]:
                if fd is not None:
                    os.close(fd)
        assert self._proc.stdin is not None and self._proc.stdout is not None
        return PipeTransport(self._proc.stdin, self._proc.stdout)

    def _rlimits(self) -> dict[str, int]:
        limits = super()._rlimits()
        limits["as"] = self.limits.memory_mb * 1024 * 1024
        limits["nproc"] = self.limits.pids  # counted per user namespace: this sandbox only
        return limits

    def _executor_host_pid(self) -> int | None:
        """The sandbox's PID 1 (our executor), from the JSON bwrap writes to ``--info-fd``."""
        fd, self._info = self._info, None
        if fd is None:
            return None
        data = b""
        try:
            deadline = time.monotonic() + INFO_TIMEOUT_S
            while time.monotonic() < deadline and select.select([fd], [], [], max(0.0, deadline - time.monotonic()))[0]:
                chunk = os.read(fd, 4096)
                if not chunk:
                    break
                data += chunk
                with contextlib.suppress(ValueError):
                    return int(json.loads(data)["child-pid"])
        except (OSError, KeyError, TypeError, ValueError):
            return None
        finally:
            os.close(fd)
        return None

    def _describe(self) -> str:
        if self._proc is None:
            return ""
        code = self._proc.poll()
        try:
            self._stderr.seek(0)
            tail = self._stderr.read()[-2000:].decode(errors="replace").strip()
        except ValueError:
            tail = ""
        state = "running" if code is None else f"exited with {code}"
        return f"bwrap {state}{': ' + tail if tail else ''}"

    def _destroy(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            for stream in (proc.stdin, proc.stdout):
                if stream is not None:
                    stream.close()
            # SIGKILL to bwrap; --die-with-parent then kills our PID 1 and with it the namespace.
            proc.kill()
            proc.wait()
        if self._info is not None:
            os.close(self._info)
            self._info = None
        self._stderr.close()

    def _ident(self) -> str:
        return f"pid {self._proc.pid}" if self._proc else ""
