"""The process backend: the executor as a plain child process. Trusted code only.

There is no isolation here -- the code runs as the host user, sees the host's files and
network. What it does have: a scratch directory as the work dir (and another as HOME/TMPDIR),
a scrubbed environment, per-command rlimits (address space, CPU seconds, file size, processes
where the kernel counts them for us), timeouts that kill the process group, and output caps.
It exists so that envhub works on a machine with neither Docker nor bubblewrap, and it says so:
``select_backend`` never picks it while a better backend works, and it warns once.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
import warnings
from typing import Any

from envhub.sandboxes import cleanup, fsops, leftovers, spawner
from envhub.sandboxes.base import SandboxSpec
from envhub.sandboxes.channel import PipeTransport, Transport
from envhub.sandboxes.resident import BASE_ENV, ResidentSandbox, executor_argv

_warned = False
TRUSTED_ONLY = (
    "envhub is using the 'process' sandbox backend: commands run as the host user without "
    "isolation. Use it for trusted code only; run `envhub sandbox doctor` to enable docker or bwrap."
)


def warn_trusted_only() -> None:
    """Warn once per process that this backend isolates nothing."""
    global _warned
    if not _warned:
        _warned = True
        warnings.warn(TRUSTED_ONLY, RuntimeWarning, stacklevel=3)


def _user_process_count(uid: int | None = None) -> int:
    """How many processes ``uid`` (default: ours) runs now."""
    uid = os.getuid() if uid is None else uid
    count = 0
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.stat(f"/proc/{entry}").st_uid == uid:
                    count += 1
            except OSError:
                continue
    return count


class ProcessSandbox(ResidentSandbox):
    backend = "process"

    def __init__(self, spec: SandboxSpec | None = None) -> None:
        super().__init__(spec)
        self._base = leftovers.make_scratch(self.backend)  # its name records the owner, for a sweep after a kill -9
        self.workdir = os.path.join(self._base, "work")
        self._home = os.path.join(self._base, "home")
        os.makedirs(self.workdir)
        os.makedirs(self._home)
        #: Held from here on: the agent of this backend may rename the base dir itself.
        self._base_fd = os.open(self._base, os.O_RDONLY | os.O_DIRECTORY)
        #: The base dir's mode, given back at every reset (see ``scratch.tidy``).
        self._base_mode = 0o700
        self._proc: subprocess.Popen[bytes] | None = None
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 - lives as long as the sandbox
        # RLIMIT_NPROC counts every process of the uid, so allow for the ones already running.
        # (It is not enforced for root at all: one more reason this backend is for trusted code.)
        self._nproc = None if os.getuid() == 0 else _user_process_count() + self.limits.pids
        cleanup.track(self)  # the scratch dir exists already: a SIGTERM before start() removes it too

    def _launch(self) -> Transport:
        warn_trusted_only()
        return self._start_executor(sys.executable, {})

    def _start_executor(self, python: str, extra: dict[str, Any], uid: int | None = None) -> Transport:
        """Start the executor with ``python``, its config plus ``extra``, on pipes; as ``uid``
        (and its own group, no other) when given."""
        env = {**BASE_ENV, "HOME": self._home, "TMPDIR": self._home}
        config = {
            "workdir": self.workdir,
            "wipe": [self.workdir, self._home],
            "env": env,
            "kill_all": False,
            "oom": "heuristic",
            "limits": self._rlimits(),
            "token": self.token,
            "tidy": {"keep": ["work", "home"], "mode": self._base_mode},
            **extra,
        }
        self._proc = subprocess.Popen(
            executor_argv(python, {**config, "preload": list(self.spec.preload)}),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            cwd=self.workdir,
            env=env,
            start_new_session=True,
            **({} if uid is None else {"user": uid, "group": uid, "extra_groups": []}),
        )
        assert self._proc.stdin is not None and self._proc.stdout is not None
        return PipeTransport(self._proc.stdin, self._proc.stdout)

    def _rlimits(self) -> dict[str, int]:
        limits = super()._rlimits()
        limits["as"] = self.limits.memory_mb * 1024 * 1024
        limits["fsize"] = self.limits.disk_mb * 1024 * 1024
        if self._nproc is not None:
            limits["nproc"] = self._nproc
        return limits

    def _host_workdir(self) -> int | None:
        """The work dir is a directory of this host: read it directly, through the base dir this
        process holds, where it still is the directory the executor holds (else None)."""
        try:
            fd = os.open("work", os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=self._base_fd)
        except OSError:
            return None
        return self._held_workdir(fd)

    def _describe(self) -> str:
        if self._proc is None:
            return ""
        code = self._proc.poll()
        self._stderr.seek(0)
        tail = self._stderr.read()[-2000:].decode(errors="replace").strip()
        state = "running" if code is None else f"exited with {code}"
        return f"executor {state}{': ' + tail if tail else ''}"

    def _destroy(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            # Closing stdin makes the executor kill its process groups and exit; then make sure.
            for stream in (proc.stdin, proc.stdout):
                if stream is not None:
                    stream.close()
            spawner.stop(proc, 2, terminate=False)
        self._stderr.close()
        base_fd, self._base_fd = self._base_fd, -1
        if base_fd < 0:
            return
        fsops.wipe(base_fd)  # iterative: shutil.rmtree recurses, and the tree is the agent's
        os.close(base_fd)
        with contextlib.suppress(OSError):
            os.rmdir(self._base)

    def _ident(self) -> str:
        return self._base
