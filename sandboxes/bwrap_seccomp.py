"""The seccomp filter a bwrap sandbox runs under, built with libseccomp (through ``pyseccomp``).

bwrap applies no seccomp filter unless given one with ``--seccomp FD`` (a compiled BPF program,
loaded after bwrap's own setup, right before it executes the executor). This module compiles
the policy of :mod:`.seccomp_policy` -- the same lists the docker backend hands the engine as
its profile -- into such a program: default allow; ``EPERM`` for the refused syscalls, for
namespace flags of ``clone`` and for ``personality`` turning off address-space randomisation;
``ENOSYS`` for ``clone3``, so the C library falls back to ``clone``. Syscalls of another ABI
(32-bit x86, x32) kill the process: a filter checks one ABI's numbers.

Most of these already fail for lack of capabilities (bwrap drops them all, in a user namespace
of its own); the filter keeps the kernel code behind them out of reach too.

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

from envhub.sandboxes.seccomp_policy import (
    ARCHES,
    DENIED_SYSCALLS,
    ENOSYS_SYSCALLS,
    HOST_IPC_SYSCALLS,
    NAMESPACE_FLAGS,
    PERSONALITY_FLAGS,
    REFUSED_PAIR_TYPES,
    SOCKET_TYPE_MASK,
)

log = logging.getLogger(__name__)


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
    return 0 if os.uname().machine in ARCHES else None


@functools.cache
def seccomp_program(own_namespaces: bool = True) -> SeccompProgram:
    """The filter for bwrap sandboxes, compiled once per process (see the module docstring).
    Without ``own_namespaces`` (a sandbox in the host's network and IPC namespaces: the landlock
    backend's) it also refuses every ``socket()``, ``socketpair()`` of a datagram type and SysV
    and POSIX-queue IPC (see :mod:`.seccomp_policy`)."""
    try:
        import pyseccomp as seccomp
    except (ImportError, RuntimeError, OSError) as exc:  # RuntimeError: libseccomp not found
        why = "pyseccomp is not installed" if isinstance(exc, ImportError) else f"libseccomp unusable: {exc}"
        return SeccompProgram(None, reason=why)
    try:
        return _compile(seccomp, own_namespaces)
    except (OSError, AttributeError, ValueError) as exc:
        log.warning("could not build the bwrap seccomp filter: %r", exc)
        return SeccompProgram(None, reason=f"libseccomp failed to build the filter: {exc}")


def _compile(seccomp: Any, own_namespaces: bool) -> SeccompProgram:
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
    for name in ENOSYS_SYSCALLS:  # clone3: its flags sit in memory a filter cannot read
        flt.add_rule(seccomp.ERRNO(errno.ENOSYS), name)
    arg = _clone_flags_arg()
    if arg is not None:
        for flag in NAMESPACE_FLAGS:
            flt.add_rule(deny, "clone", seccomp.Arg(arg, seccomp.MASKED_EQ, flag, flag))
    for flag in PERSONALITY_FLAGS:
        flt.add_rule(deny, "personality", seccomp.Arg(0, seccomp.MASKED_EQ, flag, flag))
    if not own_namespaces:
        flt.add_rule(seccomp.ERRNO(errno.EACCES), "socket")
        for kind in REFUSED_PAIR_TYPES:
            flt.add_rule(seccomp.ERRNO(errno.EACCES), "socketpair",
                         seccomp.Arg(1, seccomp.MASKED_EQ, SOCKET_TYPE_MASK, kind))
        for name in HOST_IPC_SYSCALLS:
            if seccomp.resolve_syscall(seccomp.Arch.NATIVE, name) >= 0:
                flt.add_rule(deny, name)
    fd = os.memfd_create("envhub-seccomp", os.MFD_CLOEXEC)
    with open(fd, "w+b") as fh:
        flt.export_bpf(fh)
        fh.seek(0)
        bpf = fh.read()
    if not bpf:
        return SeccompProgram(None, reason="libseccomp exported an empty filter")
    return SeccompProgram(bpf, tuple(denied))
