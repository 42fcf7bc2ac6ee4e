"""The seccomp policy (``sandboxes/seccomp_policy.py``), syscall by syscall, on docker and bwrap.

Each refused syscall is made by a small Python program inside the sandbox, through ``ctypes``
(x86_64 numbers), and must fail with its errno -- EPERM, or ENOSYS for ``clone3`` -- without the
program dying. Arguments are zeros (or the one refused flag), chosen so that the kernel itself
would answer something else for most of them (EFAULT, EINVAL, EBADF, ENOSYS for removed calls;
``unshare(0)``, ``ptrace(PTRACE_TRACEME)`` and ``settimeofday(NULL, NULL)`` would even succeed):
an EPERM there is the filter's. Docker 20.10's default profile lets ``io_uring_setup`` and
``ptrace`` through, so those cases also show the container runs under our profile, not the
engine's. A syscall of another ABI (x32) kills the program. What programs need still works:
files, subprocesses, threads (``clone3`` refused, the C library falls back to ``clone``),
``socketpair``, AF_UNIX and loopback sockets, and ``multiprocessing`` with fork and spawn
(semaphores and shared memory in ``/dev/shm``) -- but for landlock, in the host's namespaces,
which refuses ``socket()`` of every family and has no ``/dev/shm`` (so no semaphores).
"""

from __future__ import annotations

import json
import os
import textwrap

import pytest
import sandbox_fixtures
from sandbox_fixtures import REQUIRED, backend_params, get_sandbox, require_backend

from envhub.sandboxes import SandboxSpec
from envhub.sandboxes.base import Limits, Sandbox
from envhub.sandboxes.docker_backend import container_config
from envhub.sandboxes.seccomp_policy import (
    DENIED_SYSCALLS,
    ENOSYS_SYSCALLS,
    NAMESPACE_FLAGS,
    PERSONALITY_FLAGS,
    docker_profile,
    docker_security_opt,
)

BACKENDS = backend_params("docker", "bwrap", "landlock")
LIMITS = Limits(memory_mb=512, pids=64, timeout_s=30.0, disk_mb=32)
sandboxes = sandbox_fixtures.sandboxes
#: x86_64 numbers (``asm/unistd_64.h``) of the refused syscalls and of those refused by flag.
X86_64 = {
    "kexec_load": 246, "kexec_file_load": 320, "init_module": 175, "finit_module": 313, "delete_module": 176,
    "create_module": 174, "get_kernel_syms": 177, "query_module": 178, "reboot": 169, "swapon": 167,
    "swapoff": 168, "acct": 163, "iopl": 172, "ioperm": 173, "uselib": 134, "_sysctl": 156, "sysfs": 139,
    "syslog": 103, "vhangup": 153, "nfsservctl": 180, "lookup_dcookie": 212, "mount": 165, "umount2": 166,
    "pivot_root": 155, "chroot": 161, "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433,
    "move_mount": 429, "open_tree": 428, "mount_setattr": 442, "unshare": 272, "setns": 308,
    "sethostname": 170, "setdomainname": 171, "keyctl": 250, "add_key": 248, "request_key": 249, "bpf": 321,
    "perf_event_open": 298, "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311,
    "userfaultfd": 323, "fanotify_init": 300, "open_by_handle_at": 304, "name_to_handle_at": 303,
    "quotactl": 179, "quotactl_fd": 443, "settimeofday": 164, "clock_settime": 227, "clock_adjtime": 305,
    "adjtimex": 159, "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
    "clone3": 435, "clone": 56, "personality": 135,
}
#: Names in the policy that are no syscall on x86_64 (32-bit x86 only, or never a syscall there).
NOT_ON_X86_64 = {"umount", "vm86", "vm86old", "stime"}
CLONE_FLAG_NAMES = {0x80: "NEWTIME", 0x20000: "NEWNS", 0x02000000: "NEWCGROUP", 0x04000000: "NEWUTS",
                    0x08000000: "NEWIPC", 0x10000000: "NEWUSER", 0x20000000: "NEWPID", 0x40000000: "NEWNET"}
PERSONALITY_NAMES = {0x0040000: "ADDR_NO_RANDOMIZE", 0x0400000: "READ_IMPLIES_EXEC", 0x0100000: "MMAP_PAGE_ZERO"}
#: (case id, syscall number, arguments, the errno it must fail with)
CASES = [
    *((name, X86_64[name], (), "EPERM") for name in DENIED_SYSCALLS if name not in NOT_ON_X86_64),
    *((name, X86_64[name], (), "ENOSYS") for name in ENOSYS_SYSCALLS),
    *((f"clone-{CLONE_FLAG_NAMES[flag]}", X86_64["clone"], (flag,), "EPERM") for flag in NAMESPACE_FLAGS),
    *((f"personality-{PERSONALITY_NAMES[flag]}", X86_64["personality"], (flag,), "EPERM")
      for flag in PERSONALITY_FLAGS),
]
#: One raw syscall; prints the errno's name, or "ok" when the call went through. A clone that is
#: let through returns in the child as well: the child leaves without a word.
CALL = """\
import ctypes, errno, os
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
args = {args!r} + (0,) * (6 - len({args!r}))
parent = os.getpid()
result = libc.syscall(ctypes.c_long({nr}), *(ctypes.c_long(a) for a in args))
if os.getpid() != parent:
    os._exit(0)
print("ok" if result != -1 else errno.errorcode.get(ctypes.get_errno(), ctypes.get_errno()))
"""


def require_filter(backend: str) -> None:
    """The backend works here and its sandboxes run under the policy (bwrap: pyseccomp is there)."""
    require_backend(backend)
    if os.uname().machine != "x86_64":
        pytest.skip("the syscall numbers here are x86_64's")
    if backend == "bwrap":
        from envhub.sandboxes.bwrap_seccomp import seccomp_program

        program = seccomp_program()
        if not program.ok:
            if "bwrap" in REQUIRED:
                pytest.fail(f"bwrap is required (ENVHUB_REQUIRE_SANDBOXES) but has {program.describe()}")
            pytest.skip(program.describe())


@pytest.fixture(params=BACKENDS)
def sb(request: pytest.FixtureRequest, sandboxes: dict[str, Sandbox]) -> Sandbox:
    require_filter(request.param)
    return get_sandbox(sandboxes, request.param, SandboxSpec(limits=LIMITS))


def test_every_refused_syscall_has_a_case_and_the_numbers_are_x86_64s() -> None:
    assert set(DENIED_SYSCALLS) - NOT_ON_X86_64 <= set(X86_64)
    try:
        import pyseccomp as seccomp
    except (ImportError, RuntimeError, OSError):
        return
    numbers = {name: seccomp.resolve_syscall(seccomp.Arch.X86_64, name) for name in X86_64}
    assert numbers == X86_64
    assert all(seccomp.resolve_syscall(seccomp.Arch.X86_64, name) < 0 for name in NOT_ON_X86_64)


def test_the_docker_profile_is_the_shared_policy() -> None:
    from envhub.sandboxes import bwrap_seccomp

    assert bwrap_seccomp.DENIED_SYSCALLS is DENIED_SYSCALLS  # one list, two backends
    profile = docker_profile()
    assert profile["defaultAction"] == "SCMP_ACT_ALLOW"
    assert {a["architecture"]: a["subArchitectures"] for a in profile["archMap"]}["SCMP_ARCH_X86_64"] == []
    by_errno: dict[int, set[str]] = {}
    flagged: dict[str, set[int]] = {}
    for rule in profile["syscalls"]:
        assert rule["action"] == "SCMP_ACT_ERRNO"  # refused, never killed
        if "args" in rule:
            [name], [arg] = rule["names"], rule["args"]
            assert (arg["index"], arg["op"], arg["valueTwo"]) == (0, "SCMP_CMP_MASKED_EQ", arg["value"])
            assert rule["errnoRet"] == 1
            flagged.setdefault(name, set()).add(arg["value"])
        else:
            by_errno.setdefault(rule["errnoRet"], set()).update(rule["names"])
    assert by_errno == {1: set(DENIED_SYSCALLS), 38: set(ENOSYS_SYSCALLS)}
    assert flagged == {"clone": set(NAMESPACE_FLAGS), "personality": set(PERSONALITY_FLAGS)}
    _, host = container_config(SandboxSpec(limits=LIMITS), "image", ["python3"])
    assert host["security_opt"] == ["no-new-privileges", docker_security_opt()]
    assert json.loads(docker_security_opt().removeprefix("seccomp=")) == profile


@pytest.mark.parametrize(("nr", "args", "expected"), [pytest.param(*case[1:], id=case[0]) for case in CASES])
def test_the_refused_syscall_fails_with_its_errno(sb: Sandbox, nr: int, args: tuple[int, ...], expected: str) -> None:
    result = sb.exec(["python3", "-I", "-c", CALL.format(nr=nr, args=args)], timeout=20)
    assert result.exit_code == 0, result.summary()
    assert result.stdout.strip() == expected, result.summary()


def test_a_syscall_of_another_abi_kills_the_program(sb: Sandbox) -> None:
    x32_getpid = 0x40000000 | 39
    program = f"import ctypes; ctypes.CDLL(None).syscall({x32_getpid}); print('survived')"
    result = sb.exec(["sh", "-c", f'python3 -I -c "{program}"; echo "status $?"'], timeout=20)
    assert result.stdout.split()[-2:] == ["status", "159"], result.summary()  # 128 + SIGSYS


def test_the_filter_is_loaded(sb: Sandbox) -> None:
    program = "import ctypes; print(ctypes.CDLL(None).prctl(21, 0, 0, 0, 0))"  # PR_GET_SECCOMP: 2 = filter
    result = sb.exec(["python3", "-I", "-c", program], timeout=20)
    assert result.stdout.split() == ["2"], result.summary()


#: Programs that must keep working; each prints "ok" at the end.
WORKS = {
    "files": """
        import os, shutil, tempfile
        os.makedirs("tree/a/b", exist_ok=True)
        with open("tree/a/b/f.txt", "w") as fh:
            fh.write("kept")
        os.rename("tree/a/b/f.txt", "tree/a/g.txt")
        os.symlink("g.txt", "tree/a/link")
        os.chmod("tree/a/g.txt", 0o600)
        assert open("tree/a/link").read() == "kept" and sorted(os.listdir("tree/a")) == ["b", "g.txt", "link"]
        shutil.rmtree("tree")
        scratch = os.path.join(tempfile.gettempdir(), "scratch")
        with open(scratch, "wb") as fh:
            fh.write(os.urandom(1 << 20))
        os.unlink(scratch)
        print("ok")
    """,
    "subprocess": """
        import os, subprocess
        assert subprocess.run(["sh", "-c", "echo $((6 * 7))"], capture_output=True, text=True).stdout == "42\\n"
        assert subprocess.run("python3 -c 'print(7)' | cat", shell=True, capture_output=True, text=True).stdout == "7\\n"
        pid = os.fork()
        if pid == 0:
            os._exit(7)
        assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 7
        pid = os.posix_spawn("/bin/sh", ["sh", "-c", "exit 3"], os.environ)
        assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 3
        print("ok")
    """,
    "threads": """
        import threading
        from concurrent.futures import ThreadPoolExecutor
        seen = []
        workers = [threading.Thread(target=seen.append, args=(i,)) for i in range(8)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        assert sorted(seen) == list(range(8))
        with ThreadPoolExecutor(4) as pool:
            assert sum(pool.map(lambda x: x * x, range(10))) == 285
        print("ok")
    """,
    "sockets": """
        import os, socket, tempfile, threading
        a, b = socket.socketpair()
        a.sendall(b"pair")
        assert b.recv(4) == b"pair"
        if os.environ.get("BACKEND") == "landlock":  # the host's namespaces: no socket() of any family
            for family in (socket.AF_UNIX, socket.AF_INET, socket.AF_INET6):
                try:
                    socket.socket(family, socket.SOCK_DGRAM)
                    raise AssertionError("a socket was made")
                except PermissionError:
                    pass
        else:
            path = os.path.join(tempfile.gettempdir(), "envhub-test.sock")
            server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            server.bind(path)
            server.listen(1)
            threading.Thread(target=lambda: server.accept()[0].sendall(b"unix"), daemon=True).start()
            client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            client.connect(path)
            assert client.recv(4) == b"unix"
            os.unlink(path)
            tcp = socket.create_server(("127.0.0.1", 0))
            threading.Thread(target=lambda: tcp.accept()[0].sendall(b"loop"), daemon=True).start()
            assert socket.create_connection(tcp.getsockname()).recv(4) == b"loop"
        print("ok")
    """,
}
#: ``multiprocessing`` under a start method: a pool, a process that reports through a queue, a
#: semaphore and shared memory (both in /dev/shm). A file, so that spawn's children import it.
MULTIPROCESSING = """\
import multiprocessing, sys
from multiprocessing import shared_memory


def child(queue, sem, name):
    with sem:
        block = shared_memory.SharedMemory(name=name)
        block.buf[0] = 42
        block.close()
    queue.put("child")


if __name__ == "__main__":
    ctx = multiprocessing.get_context(sys.argv[1])
    with ctx.Pool(2) as pool:
        assert sum(pool.map(abs, [-1, -2, -3])) == 6
    block = shared_memory.SharedMemory(create=True, size=16)
    queue, sem = ctx.Queue(), ctx.Semaphore(1)
    proc = ctx.Process(target=child, args=(queue, sem, block.name))
    proc.start()
    assert queue.get(timeout=20) == "child"
    proc.join(20)
    assert proc.exitcode == 0 and block.buf[0] == 42
    block.close()
    block.unlink()
    print("ok")
"""


@pytest.mark.parametrize("what", sorted(WORKS))
def test_ordinary_work_goes_on(sb: Sandbox, what: str) -> None:
    result = sb.exec(["python3", "-I", "-c", textwrap.dedent(WORKS[what])], timeout=30, env={"BACKEND": sb.backend})
    assert result.exit_code == 0 and result.stdout.strip() == "ok", result.summary()


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_multiprocessing_works(sb: Sandbox, method: str) -> None:
    sb.write_files({"mp_check.py": MULTIPROCESSING})
    result = sb.exec(["python3", "mp_check.py", method], timeout=60)
    if sb.backend == "landlock":  # no /dev/shm there, so no sem_open (test_sandbox_shm_sockets.py: what stays)
        assert "_multiprocessing.SemLock(" in result.stderr and "PermissionError" in result.stderr, result.summary()
        return
    assert result.exit_code == 0 and result.stdout.strip() == "ok", result.summary()
