"""What a sandboxed program may not ask the kernel: one list, for bwrap and docker alike.

Both backends run their sandboxes under a seccomp policy with one intent: everything is allowed
except the syscalls that reach kernel attack surface or host state a sandboxed program has no
business with -- loading modules and kexec, mounts and namespaces, keyrings, BPF, perf, ptrace
and cross-process memory access, userfaultfd, file handles, clocks, swap, quotas, io_uring, raw
I/O ports. Those fail with ``EPERM`` (``clone3`` with ``ENOSYS``: its flags sit in memory a filter
cannot read, so the C library falls back to ``clone``, whose namespace flags are checked);
nothing is killed for asking. Syscalls of another ABI (32-bit x86, x32, 32-bit ARM) are not
in the filter: the kernel kills the process that makes them.

The lists live here, nowhere else, so the two backends cannot drift apart:

- bwrap compiles them with libseccomp into the BPF program ``bwrap --seccomp`` loads
  (:mod:`.bwrap_seccomp`);
- docker gets them as a seccomp profile of its own, :func:`docker_profile` -- the JSON that
  ``docker run --security-opt seccomp=PROFILE`` reads -- instead of the engine's default profile,
  which changes with the engine's version (Docker 20.10's lets ``io_uring_setup`` and ``ptrace``
  through to the kernel).
"""

from __future__ import annotations

import errno
import functools
import json
from typing import Any

#: Refused with EPERM, by name; a name that is no syscall of an architecture is skipped there.
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
#: Refused with ENOSYS ("no such call"), so the C library falls back to ``clone``.
ENOSYS_SYSCALLS = ("clone3",)
#: ``clone`` flags that make a new namespace (CLONE_NEWTIME, NEWNS, NEWCGROUP, NEWUTS, NEWIPC,
#: NEWUSER, NEWPID, NEWNET): a clone carrying any of them fails with EPERM.
NAMESPACE_FLAGS = (0x80, 0x20000, 0x02000000, 0x04000000, 0x08000000, 0x10000000, 0x20000000, 0x40000000)
#: ``personality`` flags refused (ADDR_NO_RANDOMIZE, READ_IMPLIES_EXEC, MMAP_PAGE_ZERO). That also
#: refuses the read-only query ``personality(0xffffffff)``, which a filter cannot tell apart from
#: setting every flag.
PERSONALITY_FLAGS = (0x0040000, 0x0400000, 0x0100000)
#: For a sandbox in the host's namespaces (the landlock backend's): ``socket()`` of every family
#: is refused with EACCES -- an IP socket reaches the host's network, and an AF_UNIX one can
#: ``connect()`` to any pathname socket its uid may write (Landlock ABI 6 does not check
#: ``connect``). ``socketpair()`` stays, for the types whose pair cannot be re-aimed: a datagram
#: socket (SOCK_DGRAM, and SOCK_RAW and SOCK_RDM, which AF_UNIX makes datagram) takes a peer's
#: path in ``connect``, ``sendto`` and ``sendmsg``; a stream or seqpacket one is connected for good.
REFUSED_PAIR_TYPES = (2, 3, 4)
#: The bits of ``socketpair``'s type argument that hold the type (``SOCK_TYPE_MASK``; the rest are
#: SOCK_CLOEXEC and SOCK_NONBLOCK).
SOCKET_TYPE_MASK = 0xF
#: Refused with EPERM for a sandbox in the host's IPC namespace (the landlock backend's): SysV
#: shared memory, semaphores and message queues and POSIX message queues are named in the
#: namespace, not in a tree Landlock rules cover, bounded only host-wide, and reachable by id or
#: name from every process of the uid (the server, other sessions).
HOST_IPC_SYSCALLS = (
    "shmget", "shmat", "shmdt", "shmctl", "semget", "semop", "semtimedop", "semctl",
    "msgget", "msgsnd", "msgrcv", "msgctl",
    "mq_open", "mq_unlink", "mq_timedsend", "mq_timedreceive", "mq_notify", "mq_getsetattr",
)
#: The architectures whose ``clone`` takes its flags as the first argument, by ``uname -m``, with
#: Docker's (Go's) and libseccomp's names: the only ones the policy is written for.
ARCHES = {
    "x86_64": ("amd64", "SCMP_ARCH_X86_64"),
    "aarch64": ("arm64", "SCMP_ARCH_AARCH64"),
    "riscv64": ("riscv64", "SCMP_ARCH_RISCV64"),
    "ppc64le": ("ppc64le", "SCMP_ARCH_PPC64LE"),
}


def _masked(index: int, flag: int) -> dict[str, Any]:
    """Docker's condition "argument ``index`` has ``flag`` set" (mask, then value)."""
    return {"index": index, "value": flag, "valueTwo": flag, "op": "SCMP_CMP_MASKED_EQ"}


def docker_profile() -> dict[str, Any]:
    """The Docker seccomp profile of the policy (a fresh dict; see the module docstring).

    Default allow; one rule for the EPERM list, one for the ENOSYS list, and one rule per refused
    flag of ``clone`` and ``personality`` (several conditions in one rule would have to hold at
    once). ``archMap`` lists each supported architecture without its 32-bit companions, so a
    syscall of another ABI meets the filter's "bad architecture" action: the kernel kills the
    process (runc leaves libseccomp's default), as bwrap's filter does.
    """
    eperm = {"action": "SCMP_ACT_ERRNO", "errnoRet": errno.EPERM}
    first_arg = sorted(go for go, _ in ARCHES.values())
    rules: list[dict[str, Any]] = [
        {"names": list(DENIED_SYSCALLS), **eperm},
        {"names": list(ENOSYS_SYSCALLS), "action": "SCMP_ACT_ERRNO", "errnoRet": errno.ENOSYS},
    ]
    rules += [{"names": ["clone"], **eperm, "args": [_masked(0, flag)], "includes": {"arches": first_arg}}
              for flag in NAMESPACE_FLAGS]
    rules += [{"names": ["personality"], **eperm, "args": [_masked(0, flag)]} for flag in PERSONALITY_FLAGS]
    return {
        "defaultAction": "SCMP_ACT_ALLOW",
        "archMap": [{"architecture": scmp, "subArchitectures": []} for _, scmp in ARCHES.values()],
        "syscalls": rules,
    }


@functools.cache
def docker_security_opt() -> str:
    """``seccomp=<profile JSON>``: how docker-py's ``security_opt`` hands the engine the profile."""
    return "seccomp=" + json.dumps(docker_profile(), separators=(",", ":"))
