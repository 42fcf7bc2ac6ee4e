"""The seccomp filter a bwrap sandbox runs under, built with libseccomp (through ``pyseccomp``).

Docker applies its default seccomp profile to every container; bwrap applies none unless given
one with ``--seccomp FD`` (a compiled BPF program, loaded after bwrap's own setup, right before
it executes the executor). This module builds such a program with the same intent as Docker's
default profile: everything is allowed except the syscalls that reach kernel attack surface or
host state a sandboxed program has no business with -- loading modules and kexec, mounts and
namespaces, keyrings, BPF, perf, ptrace and cross-process memory access, userfaultfd, file
handles, clocks, swap, quotas, io_uring, raw I/O ports. Those fail with ``EPERM`` (``clone3``
with ``ENOSYS``, so the C library falls back to ``clone``, whose namespace flags are checked).
Syscalls of another ABI (32-bit x86, x32) kill the process: a filter checks one ABI's numbers.

Most of these already fail for lack of capabilities (bwrap drops them all, in a user namespace
of its own); the filter keeps the kernel code behind them out of reach too -- the point of
Docker's profile. ``personality`` may not turn off address-space randomisation or make reads
imply exec; that also refuses the read-only query ``personality(0xffffffff)``, which libseccomp
cannot tell apart from setting every flag.

:func:`seccomp_program` returns the program, or why there is none (pyseccomp or libseccomp
missing), which ``envhub sandbox doctor`` and the auto backend choice report.
"""

from __future__ import annotations

import errno
import functools
import logging
import os
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

#: Denied with EPERM, by name; names that do not exist on this architecture are skipped.
DENIED_SYSCALLS = (
    # kernel code and the machine itself
    "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module", "create_module",
    "get_kernel_syms", "query_module", "reboot", "swapon", "swapoff", "acct", "iopl", "ioperm",
    "uselib", "_sysctl", "sysfs", "syslog", "vhangup", "nfsservctl", "lookup_dcookie", "vm86", "vm86old",
    # mounts, namespaces, identity of the machine
    "mount", "umount", "umount2", "pivot_root", "chroot", "fsopen", "fsconfig", "fsmount", "fspick",
    "move_mount", "open_tree", "mount_setattr", "unshare", "setns", "sethostname", "setdomainname",
    # keyrings, BPF, perf, tracing and other processes' memory
    "keyctl", "add_key", "request_key", "bpf", "perf_event_open", "ptrace", "process_vm_readv",
    "process_vm_writev", "userfaultfd", "fanotify_init",
    # file handles (open any inode by number), quotas
    "open_by_handle_at", "name_to_handle_at", "quotactl", "quotactl_fd",
    # clocks
    "settimeofday", "clock_settime", "clock_adjtime", "adjtimex", "stime",
    # io_uring: a large surface, and requests that bypass this very filter
    "io_uring_setup", "io_uring_enter", "io_uring_register",
)
#: ``clone`` flags that make a new namespace (CLONE_NEWTIME, NEWNS, NEWCGROUP, NEWUTS, NEWIPC,
#: NEWUSER, NEWPID, NEWNET): a clone carrying any of them fails with EPERM.
NAMESPACE_FLAGS = (0x80, 0x20000, 0x02000000, 0x04000000, 0x08000000, 0x10000000, 0x20000000, 0x40000000)
#: ``personality`` flags refused (ADDR_NO_RANDOMIZE, READ_IMPLIES_EXEC, MMAP_PAGE_ZERO).
PERSONALITY_FLAGS = (0x0040000, 0x0400000, 0x0100000)


@dataclass(frozen=True)
class SeccompProgram:
    """A compiled filter: ``bpf`` (what ``bwrap --seccomp`` reads), or ``None`` and ``reason``."""

    bpf: bytes | None
    denied: tuple[str, ...] = ()
    reason: str = ""

    @property
    def ok(self) -> bool:
        return self.bpf is not None

    def describe(self) -> str:
        """One line for the doctor: what the filter does here, or why there is none."""
        if self.bpf is None:
            return f"no seccomp filter ({self.reason})"
        return (f"seccomp filter (libseccomp): {len(self.denied)} syscalls denied with EPERM, "
                "namespace flags of clone refused, other ABIs killed")


def _clone_flags_arg() -> int | None:
    """Which argument of ``clone`` holds the flags here (None: an architecture we do not check)."""
    machine = os.uname().machine
    return 0 if machine in ("x86_64", "aarch64", "riscv64", "ppc64le") else None


@functools.cache
def seccomp_program() -> SeccompProgram:
    """The filter for bwrap sandboxes, compiled once per process (see the module docstring)."""
    try:
        import pyseccomp as seccomp
    except (ImportError, RuntimeError, OSError) as exc:  # RuntimeError: libseccomp not found
        why = "pyseccomp is not installed" if isinstance(exc, ImportError) else f"libseccomp unusable: {exc}"
        return SeccompProgram(None, reason=why)
    try:
        return _compile(seccomp)
    except (OSError, AttributeError, ValueError) as exc:
        log.warning("could not build the bwrap seccomp filter: %r", exc)
        return SeccompProgram(None, reason=f"libseccomp failed to build the filter: {exc}")


def _compile(seccomp: Any) -> SeccompProgram:
    """Build and export the filter with ``seccomp``, the pyseccomp module."""
    deny = seccomp.ERRNO(errno.EPERM)
    flt = seccomp.SyscallFilter(seccomp.ALLOW)
    flt.set_attr(seccomp.Attr.ACT_BADARCH, seccomp.KILL_PROCESS)
    denied = []
    for name in DENIED_SYSCALLS:
        if seccomp.resolve_syscall(seccomp.Arch.NATIVE, name) < 0:  # not a syscall of this ABI
            continue
        flt.add_rule(deny, name)
        denied.append(name)
    flt.add_rule(seccomp.ERRNO(errno.ENOSYS), "clone3")  # its flags sit in memory a filter cannot read
    arg = _clone_flags_arg()
    if arg is not None:
        for flag in NAMESPACE_FLAGS:
            flt.add_rule(deny, "clone", seccomp.Arg(arg, seccomp.MASKED_EQ, flag, flag))
    for flag in PERSONALITY_FLAGS:
        flt.add_rule(deny, "personality", seccomp.Arg(0, seccomp.MASKED_EQ, flag, flag))
    fd = os.memfd_create("envhub-seccomp", os.MFD_CLOEXEC)
    with open(fd, "w+b") as fh:
        flt.export_bpf(fh)
        fh.seek(0)
        bpf = fh.read()
    if not bpf:
        return SeccompProgram(None, reason="libseccomp exported an empty filter")
    return SeccompProgram(bpf, tuple(denied))
