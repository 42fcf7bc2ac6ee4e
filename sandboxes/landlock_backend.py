"""The landlock backend: the process backend's executor, confined by the kernel without privileges.

For where neither docker nor bwrap can start a sandbox -- above all inside a served container
(``envhub serve --docker``, the exported OpenEnv package), which Docker starts with its default
seccomp profile, no capabilities and often an unknown uid, so no namespace can be made. The
executor runs the system ``python3`` under ``/usr`` and, before it serves, confines itself and
everything it starts (:mod:`envhub.sandboxes.confine`): the system trees read-only, its own scratch
directory read-write, no other file (envhub's installed files, the task data, other sandboxes,
and for commands ``/proc``; nor the host's ``/dev/shm``), no socket of any family (``socketpair``
of the stream types only: an AF_UNIX socket could reach every pathname socket of its uid -- the
Docker socket, an ssh agent, Ray's raylet), no SysV or POSIX-queue IPC (the host's namespace), no
signal, ptrace or ``/proc`` access to any process outside its domain (the server, other sessions),
no new privileges, and the same seccomp deny list as bwrap and docker. A root server also runs the
executor as a uid of its own (:data:`SANDBOX_UID`); an unprivileged one cannot, and Landlock's
scoping is then what keeps the agent from the server's processes. Memory, processes, CPU time
and file size are bounded with rlimits as on the process backend; timeouts kill the process
groups and whatever escaped them.

What it needs: Linux 6.12 or later with Landlock enabled (ABI 6), ``seccomp(2)``, pyseccomp
with libseccomp (to compile the filter) and a ``python3`` under ``/usr``. What it does not give:
its own pid, IPC or network namespace (other processes' pids are visible to ``kill``'s error
codes), so no ``/dev/shm`` of its own either: POSIX shared memory and semaphores (``shm_open``,
``sem_open``, hence ``multiprocessing``'s locks, queues and pools) fail with EACCES, as glibc has
no other place for them; nor a memory cgroup (an rlimit on address space, like the process backend).
"""

from __future__ import annotations

import functools
import os

from envhub.sandboxes.base import BackendStatus, SandboxError, SandboxSpec
from envhub.sandboxes.channel import Transport
from envhub.sandboxes.confine import REQUIRED_ABI, landlock_abi
from envhub.sandboxes.process_backend import ProcessSandbox, _user_process_count

#: The executor's uid where the server is root (inside a container started as root, or a root
#: host): one no account uses.
SANDBOX_UID = 61_000

FIX_LANDLOCK = ("boot Linux 6.12 or later with landlock in the lsm= list (CONFIG_SECURITY_LANDLOCK), and keep "
                "the container's seccomp profile from refusing landlock_* and seccomp (Docker's default allows both)")
FIX_SECCOMP = "pip install 'envhub[bwrap]' (pyseccomp) and apt-get install libseccomp2"


@functools.cache
def unavailable() -> BackendStatus | None:
    """None where this backend can confine its sandboxes here; otherwise why not and the fix."""
    from envhub.sandboxes.bwrap_backend import sandbox_python
    from envhub.sandboxes.bwrap_seccomp import seccomp_program

    abi = landlock_abi()
    if abi < REQUIRED_ABI:
        return BackendStatus("landlock", False, f"Landlock ABI {abi} here, {REQUIRED_ABI} needed", FIX_LANDLOCK)
    program = seccomp_program(own_namespaces=False)
    if not program.ok:
        return BackendStatus("landlock", False, program.reason, FIX_SECCOMP)
    if sandbox_python() is None:
        return BackendStatus("landlock", False, "no python3 under /usr to run the executor",
                             "apt-get install python3")
    return None


def _hidden() -> tuple[str, ...]:
    """Every installed copy of envhub under the trees a sandbox reads (see :mod:`.hidden`; cached there)."""
    from envhub.sandboxes.confine import SYSTEM_TREES
    from envhub.sandboxes.hidden import hidden_paths

    return hidden_paths(tuple(t for t in SYSTEM_TREES if os.path.isdir(t) and not os.path.islink(t)))


class LandlockSandbox(ProcessSandbox):
    backend = "landlock"

    def __init__(self, spec: SandboxSpec | None = None) -> None:
        super().__init__(spec)
        #: A root server (which may switch uids) runs the executor as a uid of its own: then the
        #: pid limit holds too (root is exempt from RLIMIT_NPROC) and file modes apply on top.
        self.uid = SANDBOX_UID if os.geteuid() == 0 else None
        # No one lists it, and the agent's uid cannot write it: the work dir cannot be renamed
        # or replaced (the confinement's rules name the work and home dirs, not their parent).
        self._base_mode = 0o500 if self.uid is None else 0o711
        os.chmod(self._base, self._base_mode)
        if self.uid is not None:
            for path in (self.workdir, self._home):
                os.chown(path, self.uid, self.uid)
            self._nproc = _user_process_count(self.uid) + self.limits.pids

    def _launch(self) -> Transport:
        from envhub.sandboxes.bwrap_backend import sandbox_python
        from envhub.sandboxes.bwrap_seccomp import seccomp_program

        missing = unavailable()
        if missing is not None:
            raise SandboxError(f"the landlock backend cannot confine a sandbox here: {missing.reason}; {missing.fix}")
        python = sandbox_python()
        assert python is not None  # unavailable() checked
        program = seccomp_program(own_namespaces=False)
        assert program.bpf is not None
        confine = {"read_write": [self.workdir, self._home], "seccomp": program.bpf.hex(), "hide": list(_hidden())}
        return self._start_executor(python, {"confine": confine}, uid=self.uid)
