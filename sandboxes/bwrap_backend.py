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
applies.

Limits beyond rlimits: where this process may make cgroups (:mod:`.bwrap_cgroups`), each
sandbox -- bwrap, the executor and everything under it -- runs in one of its own that bounds its
total memory (no swap) and process count; bwrap is started through a one-line shell gate that
waits until the host has moved it into the cgroup, so nothing escapes it by forking early. An
OOM kill there is the agent's: its exec result says so (``oom_killed``), and if the kernel had
to kill the executor itself (memory held by files and no process of the agent's left to kill)
the sandbox is started afresh, empty, and the call still answers as an out-of-memory result.
Elsewhere memory is capped per process (RLIMIT_AS) only. Every sandbox runs under the seccomp
filter of :mod:`.bwrap_seccomp` (``--seccomp``), where libseccomp and pyseccomp are installed.
:func:`hardening` says which of the two this machine gets.
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
from dataclasses import dataclass
from typing import Any

from envhub.sandboxes import spawner
from envhub.sandboxes.base import SandboxSpec
from envhub.sandboxes.bwrap_cgroups import CgroupPlan, SandboxCgroup, cgroup_plan, sandbox_cgroup
from envhub.sandboxes.bwrap_seccomp import SeccompProgram, seccomp_program
from envhub.sandboxes.channel import PipeTransport, Transport
from envhub.sandboxes.hidden import hidden_paths
from envhub.sandboxes.oom_restart import EXEC_OPS, OOM_RESTARTED, OomRestart  # noqa: F401 - OOM_RESTARTED: re-exported
from envhub.sandboxes.resident import BASE_ENV, executor_argv

SANDBOX_UID = 1000
#: The host uid bwrap runs as when we are root (see the module docstring).
UNPRIVILEGED_UID = 65534
PYTHON_CANDIDATES = ("/usr/bin/python3", "/usr/local/bin/python3")
SYSTEM_LINKS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
HOST_ETC = ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/alternatives", "/etc/localtime")
#: How long to wait for bwrap's --info-fd JSON once the executor has answered (it is written first).
INFO_TIMEOUT_S = 5.0
NETWORK_ETC = ("/etc/resolv.conf", "/etc/hosts", "/etc/ssl", "/etc/ca-certificates")
#: bwrap is started by ``sh -c GATE bwrap ...``: the shell waits for one line on its stdin (the
#: executor channel) -- sent once the host has put the shell in the sandbox's cgroup -- and then
#: becomes bwrap. ``read`` takes a pipe byte by byte, so nothing meant for the executor is eaten.
GATE_SHELL = "/bin/sh"
GATE = 'read -r go || exit 125; exec "$@"'
FIX_CGROUP = ("run envhub as root on a host whose cgroup memory controller is writable (cgroup v1, or v2 with "
              "memory delegated), or use docker for untrusted code")
FIX_SECCOMP = "pip install 'envhub[bwrap]' (pyseccomp) and apt-get install libseccomp2"


@dataclass(frozen=True)
class Hardening:
    """What a bwrap sandbox gets here beyond namespaces and rlimits (see the module docstring)."""

    cgroup: CgroupPlan
    seccomp: SeccompProgram

    @property
    def complete(self) -> bool:
        return self.cgroup.ok and self.seccomp.ok

    def describe(self) -> str:
        """The doctor's words: the bound and the filter, or what is missing and what to prefer."""
        text = f"{self.cgroup.describe()}; {self.seccomp.describe()}"
        if not self.complete:
            text += "; prefer docker for untrusted code (envs with needs_isolation)"
        return text

    def fix(self) -> str:
        return "; ".join(fix for ok, fix in ((self.cgroup.ok, FIX_CGROUP), (self.seccomp.ok, FIX_SECCOMP)) if not ok)


def hardening() -> Hardening:
    """Whether bwrap sandboxes get a memory cgroup and the seccomp filter on this machine."""
    return Hardening(cgroup_plan(), seccomp_program())


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
    shm = str(limits.shm_mb * 1024 * 1024)
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
        "--size", shm, "--tmpfs", "/dev/shm",
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


class BwrapSandbox(OomRestart):
    backend = "bwrap"
    workdir = "/work"

    def __init__(self, spec: SandboxSpec | None = None) -> None:
        super().__init__(spec)
        self._proc: subprocess.Popen[bytes] | None = None
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 - lives as long as the sandbox
        self._info: int | None = None  # read end of bwrap's --info-fd (it names the executor's pid)
        #: The sandbox's own cgroup (made at the first launch), None where there is none.
        self.cgroup: SandboxCgroup | None = None
        self._cgroup_made = False

    def _launch(self) -> Transport:
        bwrap, python = bwrap_binary(), sandbox_python()
        if bwrap is None:
            raise FileNotFoundError("bwrap is not installed")
        if python is None:
            raise FileNotFoundError("no python3 under /usr for the sandbox")
        if not self._cgroup_made:
            self._cgroup_made = True
            self.cgroup = sandbox_cgroup(self.limits.memory_mb * 1024 * 1024, self.limits.pids, self.token)
        fds: dict[str, int] = {}
        info_write = seccomp_read = None
        try:
            for dest, content in _synthetic_etc().items():
                fds[dest] = _data_pipe(content)
            self._info, info_write = os.pipe()
            extra = ["--info-fd", str(info_write)]
            program = seccomp_program()
            if program.bpf is not None:
                seccomp_read = _data_pipe(program.bpf)
                extra += ["--seccomp", str(seccomp_read)]
            config = {
                "workdir": self.workdir,
                "wipe": [self.workdir, "/tmp", "/dev/shm"],
                "env": {**BASE_ENV, "HOME": "/tmp", "USER": "agent"},
                "kill_all": True,
                "wipe_ipc": True,  # its own IPC namespace: SysV objects, /dev/shm, /dev/mqueue
                "oom": "heuristic",  # the cgroup's OOM counter is read by the host (see _call)
                "limits": self._rlimits(),
                "token": self.token,
            }
            hidden = hidden_paths(bound_roots())
            argv = [bwrap, *bwrap_args(self.spec, fds, self.workdir, hidden), *extra, "--",
                    *executor_argv(python, {**config, "preload": list(self.spec.preload)})]
            if self.cgroup is not None:
                argv = [GATE_SHELL, "-c", GATE, "envhub-bwrap-gate", *argv]
            drop = os.getuid() == 0
            self._proc = spawner.popen(  # not from this thread: see spawner.py
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=self._stderr,
                pass_fds=(*fds.values(), info_write, *([seccomp_read] if seccomp_read is not None else [])),
                cwd="/",
                env={"PATH": BASE_ENV["PATH"]},
                user=UNPRIVILEGED_UID if drop else None,
                group=UNPRIVILEGED_UID if drop else None,
                extra_groups=[] if drop else None,
            )
        finally:
            for fd in [*fds.values(), info_write, seccomp_read]:
                if fd is not None:
                    os.close(fd)
        assert self._proc.stdin is not None and self._proc.stdout is not None
        if self.cgroup is not None:  # into the cgroup before bwrap exists, then open the gate
            self.cgroup.place(self._proc.pid)
            self._proc.stdin.write(b"\n")
            self._proc.stdin.flush()
        return PipeTransport(self._proc.stdin, self._proc.stdout)

    def _rlimits(self) -> dict[str, int]:
        limits = super()._rlimits()
        # Kept under a cgroup too: a single huge allocation (the executor's own, for a transfer)
        # then fails with ENOMEM instead of making the kernel pick a process to kill.
        limits["as"] = self.limits.memory_mb * 1024 * 1024
        limits["nproc"] = self.limits.pids  # counted per user namespace: this sandbox only
        return limits

    def _call(self, op: str, wait: float, **fields: Any) -> dict[str, Any]:
        """As :class:`OomRestart` (which restarts the sandbox when the kernel killed the executor
        itself for the sandbox's memory limit), plus what the cgroup knows: an exec during which the
        kernel OOM-killed a process of the sandbox reports ``oom_killed``."""
        cgroup = self.cgroup
        if cgroup is None or op not in EXEC_OPS:
            return super()._call(op, wait, **fields)
        before = cgroup.oom_kills()
        reply = super()._call(op, wait, **fields)
        if not reply.get("oom_killed") and (self._memory_seen or 0) > before:  # read after the reply
            reply = {**reply, "oom_killed": True}
        if reply.get("oom_killed") and "pinned" not in reply and self.cgroup is not None:
            reply = {**reply, "pinned": self.cgroup.shmem_bytes()}
        return reply

    def _memory_mark(self) -> int | None:
        return self.cgroup.oom_kills() if self.cgroup is not None else None

    def _killed_for_memory(self, since: int) -> bool:
        proc, cgroup = self._proc, self.cgroup
        return (proc is not None and cgroup is not None and cgroup.oom_kills() > since
                and _exited(proc, timeout=1.0))

    def _discard_executor(self) -> None:
        """bwrap and every process of the sandbox; the old tmpfs is freed once its last process is gone."""
        self._stop()
        if self.cgroup is not None:
            self.cgroup.kill_all()

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
        ooms = self.cgroup.oom_kills() if self.cgroup is not None else 0
        memory = f"; {ooms} process(es) killed for the sandbox's memory limit" if ooms else ""
        return f"bwrap {state}{': ' + tail if tail else ''}{memory}"

    def _stop(self) -> None:
        """Kill bwrap and, with it, every process of the sandbox. Idempotent."""
        proc, self._proc = self._proc, None
        if proc is not None:
            for stream in (proc.stdin, proc.stdout):
                if stream is not None:
                    with contextlib.suppress(OSError):
                        stream.close()
            # SIGKILL to bwrap; --die-with-parent then kills our PID 1 and with it the namespace.
            proc.kill()
            proc.wait()
        if self._info is not None:
            os.close(self._info)
            self._info = None

    def _destroy(self) -> None:
        self._stop()
        cgroup, self.cgroup = self.cgroup, None
        if cgroup is not None:
            cgroup.remove()
        self._stderr.close()

    def _ident(self) -> str:
        return f"pid {self._proc.pid}" if self._proc else ""


def _data_pipe(content: bytes) -> int:
    """The read end of a pipe that holds ``content`` and then EOF (it must fit the pipe buffer)."""
    read_end, write_end = os.pipe()
    try:
        os.write(write_end, content)
    except OSError:
        os.close(read_end)
        raise
    finally:
        os.close(write_end)
    return read_end


def _exited(proc: subprocess.Popen[bytes], timeout: float) -> bool:
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        return False
    return True
