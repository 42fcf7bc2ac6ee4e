"""Landlock and seccomp confinement of a process and of everything it starts, without privileges.

What the ``landlock`` backend's executor does to itself before it serves (and, one step further,
to every command it runs). Works as any uid, with no capabilities, under Docker's default seccomp
profile: all it needs is ``no_new_privs``, Landlock ABI >= 6 (Linux 6.12) and ``seccomp(2)``.

- **Files** (Landlock): only what the rules name exists for the process -- the system trees read
  and execute only, its own scratch directory read-write, a few device nodes; everything else
  fails with ``EACCES``, including envhub's installed files, the task data, other sandboxes'
  scratch directories and, for commands, ``/proc``. The executor keeps ``/proc`` readable for
  itself (it finds and kills what a command started by walking it); the commands it starts
  enter a nested domain without it.
- **Other processes** (Landlock): a confined process can neither ``ptrace`` nor read the memory,
  environment or file descriptors of a process outside its domain, nor send it a signal, nor
  connect to its abstract unix sockets, whatever their uids.
- **Network and IPC** (Landlock ABI 4 and the seccomp filter): TCP ``bind`` and ``connect`` are
  refused, and the seccomp filter the host compiled refuses ``socket()`` of every family (an
  ``AF_UNIX`` socket could ``connect()`` to any pathname socket of the uid, which Landlock ABI 6
  does not check), ``socketpair()`` of datagram types, and SysV and POSIX-queue IPC; ``/dev/shm``
  is not in the rules (:data:`DENIED_TREES`).

Loaded by the executor inside a sandbox (``resident.executor_argv`` injects its source), so:
**stdlib only, Python >= 3.8, no imports from envhub**. The host imports it to probe the ABI.
"""

from __future__ import annotations

import ctypes
import os
import struct

SYS_LANDLOCK_CREATE_RULESET, SYS_LANDLOCK_ADD_RULE, SYS_LANDLOCK_RESTRICT_SELF = 444, 445, 446
CREATE_RULESET_VERSION = 1
RULE_PATH_BENEATH = 1
PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 38, 22, 2
#: The Landlock ABI this confinement needs: 6 scopes signals and abstract unix sockets.
REQUIRED_ABI = 6

FS_EXECUTE, FS_WRITE_FILE, FS_READ_FILE, FS_READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
FS_MAKE_CHAR, FS_MAKE_BLOCK = 1 << 6, 1 << 11
FS_TRUNCATE, FS_IOCTL_DEV = 1 << 14, 1 << 15
#: Every filesystem right of ABI 1..5 (REFER is bit 13, TRUNCATE 14, IOCTL_DEV 15).
FS_ALL = (1 << 16) - 1
NET_BIND_TCP, NET_CONNECT_TCP = 1 << 0, 1 << 1
SCOPE_ABSTRACT_UNIX_SOCKET, SCOPE_SIGNAL = 1 << 0, 1 << 1

READ_ONLY = FS_EXECUTE | FS_READ_FILE | FS_READ_DIR
#: Everything in the trees of its own, but making device nodes (a block device of the host's disk).
READ_WRITE = FS_ALL & ~(FS_MAKE_CHAR | FS_MAKE_BLOCK)
DEVICE = FS_READ_FILE | FS_WRITE_FILE | FS_TRUNCATE | FS_IOCTL_DEV
#: Read and execute only: the system trees a program needs, and of /etc what programs read
#: (not all of it: a root server's /etc holds keys its owner may read).
SYSTEM_TREES = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc/alternatives",
                "/etc/passwd", "/etc/group", "/etc/hosts", "/etc/nsswitch.conf", "/etc/localtime",
                "/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/os-release",
                "/etc/debian_version", "/etc/mime.types", "/etc/protocols", "/etc/services",
                "/etc/python3", *(f"/etc/python3.{minor}" for minor in range(8, 16)))
#: Read and write, but no directory of them: the device nodes programs open.
DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty")
#: Never allowed, though programs look for them: the host's ``/dev/shm`` is one flat tmpfs that
#: every sandbox of the server, the server and every process of the uid share, bounded only by
#: its own size (half the RAM) and outliving every sandbox; ``shm_open`` and ``sem_open`` (glibc
#: names them ``/dev/shm/<name>``, with no way to point them elsewhere) fail with EACCES.
DENIED_TREES = ("/dev/shm",)

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


class ConfineError(OSError):
    """The kernel refused a step of the confinement; the process must not run agent code."""


def _check(result: int, what: str) -> int:
    if result < 0:
        err = ctypes.get_errno()
        raise ConfineError(err, f"{what}: {os.strerror(err)}")
    return result


def landlock_abi() -> int:
    """The kernel's Landlock ABI version, 0 where Landlock is off or the call is filtered."""
    result = _libc.syscall(SYS_LANDLOCK_CREATE_RULESET, None, ctypes.c_size_t(0),
                           ctypes.c_uint32(CREATE_RULESET_VERSION))
    return max(0, int(result))


def ruleset(read_only: list, read_write: list, devices: list = (), abi: int | None = None) -> int:
    """A Landlock ruleset fd that allows ``read_only`` trees read and execute, ``read_write``
    trees everything, ``devices`` (files) read and write, and nothing else: no other file, no
    TCP, no signal or abstract unix socket outside the domain. Paths that do not exist are
    skipped. ConfineError where the kernel has no Landlock of :data:`REQUIRED_ABI`."""
    abi = landlock_abi() if abi is None else abi
    if abi < REQUIRED_ABI:
        raise ConfineError(0, f"Landlock ABI {abi} here, {REQUIRED_ABI} needed (Linux 6.12 or later, "
                              "with landlock in the kernel's lsm= list)")
    attr = struct.pack("=QQQ", FS_ALL, NET_BIND_TCP | NET_CONNECT_TCP, SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL)
    buf = ctypes.create_string_buffer(attr, len(attr))
    fd = _check(_libc.syscall(SYS_LANDLOCK_CREATE_RULESET, buf, ctypes.c_size_t(len(attr)), ctypes.c_uint32(0)),
                "landlock_create_ruleset")
    try:
        for paths, rights in ((read_only, READ_ONLY), (read_write, READ_WRITE), (devices, DEVICE)):
            for path in paths:
                _allow(fd, path, rights)
    except BaseException:
        os.close(fd)
        raise
    return fd


def carve(trees: list, hidden: list) -> list:
    """``trees`` with every ``hidden`` path cut out: a tree holding one is replaced by its entries,
    recursively, down to the hidden path, which is left out. Landlock only allows, so a secret
    under an allowed tree (an envhub installed under /usr) is hidden by not allowing it."""
    hide = {os.path.realpath(h) for h in hidden}
    out, todo = [], [os.path.realpath(t) for t in trees if os.path.lexists(t)]
    while todo:
        path = todo.pop()
        if path in hide or any(path.startswith(h + "/") for h in hide):
            continue
        if not any(h.startswith(path + "/") for h in hide):
            out.append(path)
            continue
        try:
            todo.extend(os.path.join(path, name) for name in os.listdir(path))
        except OSError:
            continue
    return sorted(set(out))


def _allow(ruleset_fd: int, path: str, rights: int) -> None:
    try:
        target = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return  # nothing there to allow
    try:
        if not os.path.isdir(path):
            rights &= FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | FS_TRUNCATE | FS_IOCTL_DEV
        rule = ctypes.create_string_buffer(struct.pack("=Qi", rights, target), 12)  # packed struct
        _check(_libc.syscall(SYS_LANDLOCK_ADD_RULE, ctypes.c_int(ruleset_fd), ctypes.c_int(RULE_PATH_BENEATH),
                             rule, ctypes.c_uint32(0)), f"landlock_add_rule({path})")
    finally:
        os.close(target)


def drop_capabilities() -> None:
    """Give up every capability (a root executor keeps its uid, not root's powers); with
    :func:`no_new_privs` no ``exec`` gives them back."""

    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    data = (ctypes.c_uint32 * 6)()  # effective, permitted, inheritable; two 32-bit words each
    _check(_libc.capset(ctypes.byref(Header(0x20080522, 0)), data), "capset")


def no_new_privs() -> None:
    """No setuid binary, file capability or exec can give this process more rights again."""
    _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(PR_SET_NO_NEW_PRIVS)")


def restrict(ruleset_fd: int) -> None:
    """Enter the ruleset's domain (nested inside the current one); needs :func:`no_new_privs`."""
    _check(_libc.syscall(SYS_LANDLOCK_RESTRICT_SELF, ctypes.c_int(ruleset_fd), ctypes.c_uint32(0)),
           "landlock_restrict_self")


def install_seccomp(bpf: bytes) -> None:
    """Load a classic-BPF seccomp program (``struct sock_filter`` array, 8 bytes each)."""
    if not bpf or len(bpf) % 8:
        raise ConfineError(0, f"a seccomp program of {len(bpf)} bytes is no sock_filter array")
    program = ctypes.create_string_buffer(bpf, len(bpf))

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    fprog = SockFprog(len(bpf) // 8, ctypes.cast(program, ctypes.c_void_p))
    _check(_libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0), "prctl(PR_SET_SECCOMP)")


class Confinement:
    """The executor's side: :meth:`enter` once at start-up, then :meth:`enter_child` in every
    process it starts (after ``fork``, before ``exec``)."""

    def __init__(self, config: dict) -> None:
        self.config = config
        self._child_ruleset = -1

    def enter(self) -> None:
        """Confine this process: its own domain keeps ``/proc`` read-only; prepare the commands'."""
        cfg = self.config
        system = carve([*SYSTEM_TREES, *cfg.get("read_only", [])], [*cfg.get("hide", []), *DENIED_TREES])
        writable = list(cfg["read_write"])
        own = ruleset([*system, "/proc"], writable, DEVICES)
        self._child_ruleset = ruleset(system, writable, DEVICES)
        no_new_privs()
        drop_capabilities()
        try:
            restrict(own)
        finally:
            os.close(own)
        install_seccomp(bytes.fromhex(cfg["seccomp"]))

    def enter_child(self) -> None:
        """In a child before it runs anything: the commands' nested domain (no ``/proc``)."""
        if self._child_ruleset >= 0:
            restrict(self._child_ruleset)
