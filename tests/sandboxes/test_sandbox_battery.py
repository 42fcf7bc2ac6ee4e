"""Escape and abuse battery against docker and bwrap.

Every attack must be contained, reported in the ExecResult (never raised), and leave the host
and the pool healthy: after each test the lease goes back to its pool (reset) and the
``healthy`` check proves the pool still hands out a working sandbox.
"""

from __future__ import annotations

import os
import signal
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sandbox_fixtures import BATTERY_LIMITS, backend_params, battery_pools, get_pool  # noqa: F401

from envhub.sandboxes import PooledSandbox, SandboxError, SandboxPool

BACKENDS = backend_params("docker", "bwrap")
PROJECT = Path(__file__).resolve().parents[2]


@pytest.fixture(params=BACKENDS)
def pool(request: pytest.FixtureRequest, battery_pools: dict[str, SandboxPool]) -> SandboxPool:  # noqa: F811
    return get_pool(battery_pools, request.param)


@pytest.fixture
def sb(pool: SandboxPool) -> Iterator[PooledSandbox]:
    lease = pool.acquire()
    yield lease
    lease.release()
    pool.wait_refills()
    with pool.acquire() as again:  # the pool is healthy: a pristine, working sandbox
        assert again.exec("echo ok").stdout == "ok\n"
        assert again.list_files() == []


def _connect_snippet(host: str, port: int) -> str:
    return (
        "import socket, errno\n"
        "s = socket.socket(); s.settimeout(2)\n"
        "try:\n"
        f"    s.connect(({host!r}, {port})); print('CONNECTED')\n"
        "except socket.timeout:\n"
        "    print('TIMEOUT')\n"
        "except OSError as e:\n"
        "    print('ERR', errno.errorcode.get(e.errno, e.errno))\n"
    )


def test_no_egress_to_host_loopback(sb: PooledSandbox) -> None:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.settimeout(0.2)
    port = server.getsockname()[1]
    accepted: list[object] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                accepted.append(server.accept())
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        res = sb.exec(["python3", "-c", _connect_snippet("127.0.0.1", port)])
    finally:
        stop.set()
        thread.join()
        server.close()
    assert res.exit_code == 0, res.summary()
    assert res.stdout.startswith("ERR"), res.stdout  # refused/unreachable at once: not a timeout
    assert accepted == []


def test_no_egress_to_a_public_ip(sb: PooledSandbox) -> None:
    # TEST-NET-1 (RFC 5737): a literal outside every private range where no host exists, so that
    # even a broken sandbox would reach nobody
    res = sb.exec(["python3", "-c", _connect_snippet("192.0.2.1", 80)])
    assert res.stdout.strip() in ("ERR ENETUNREACH", "ERR EHOSTUNREACH", "ERR EACCES", "ERR EPERM"), res.stdout
    interfaces = sb.exec(["python3", "-c", "import socket; print(sorted(n for _, n in socket.if_nameindex()))"])
    assert interfaces.stdout.strip() == "['lo']"


def test_fork_bomb_is_contained(sb: PooledSandbox) -> None:
    # (`:(){ :|:& };:` is bash's spelling; the sandbox's /bin/sh is dash, which rejects that name).
    # The bomb runs in a subshell: a fork the exhausted pids limit refuses makes dash exit, and in
    # the top shell that could happen before `echo` (it forks both halves of the first pipeline).
    # After it the shell uses builtins only (an external command would need a fork of its own).
    res = sb.exec("(bomb(){ bomb|bomb& }; bomb; wait); echo survived", timeout=10)
    assert "Cannot fork" in res.stderr and "survived" in res.stdout  # the pids limit stopped it
    py = sb.exec(["python3", "-c", "import os\nwhile True:\n    os.fork()"], timeout=10)
    assert "BlockingIOError" in py.stderr and not py.timed_out
    assert sb.exec("echo alive").stdout == "alive\n"


def test_memory_bomb_is_reported_as_oom(sb: PooledSandbox) -> None:
    res = sb.exec(["python3", "-c", "x = []\nwhile True:\n    x.append(bytearray(16 * 1024 * 1024))"])
    assert res.oom_killed and not res.ok, res.summary()
    assert "out of memory" in res.summary()
    big = sb.exec(["python3", "-c", "b = bytearray(2 * 1024 ** 3)"])
    assert big.oom_killed, big.summary()
    assert sb.exec("echo alive").stdout == "alive\n"


def test_cpu_spin_past_the_timeout(sb: PooledSandbox) -> None:
    res = sb.exec(["python3", "-c", "while True: pass"], timeout=1)
    assert res.timed_out and res.exit_code == 137 and not res.ok
    # A spinner that detaches from the command's process group survives the exec ...
    sb.exec("setsid python3 -c 'while True: pass' >/dev/null 2>&1 < /dev/null &")
    procs = sb.exec("ls /proc | grep -c '^[0-9]'")
    assert int(procs.stdout) >= 3  # executor, the spinner, this shell (+ its grep)
    # ... until the reset at release (checked by the fixture: only the executor is left)


def test_reset_kills_detached_processes(pool: SandboxPool) -> None:
    with pool.acquire() as sb:
        sb.exec("setsid sleep 1000 >/dev/null 2>&1 < /dev/null &")
    with pool.acquire() as sb:
        pids = sb.exec("for p in /proc/[0-9]*; do cat $p/cmdline 2>/dev/null | tr '\\0' ' '; echo; done")
        assert "sleep 1000" not in pids.stdout


def test_filling_the_disk_stops_at_the_tmpfs_size(sb: PooledSandbox) -> None:
    limit_mb = BATTERY_LIMITS.disk_mb
    res = sb.exec(f"dd if=/dev/zero of=big bs=1M count={limit_mb * 4}")
    assert res.exit_code != 0 and "No space left" in res.stderr, res.summary()
    tmp = sb.exec(f"dd if=/dev/zero of=/tmp/big bs=1M count={limit_mb * 4}")
    assert tmp.exit_code != 0 and "No space left" in tmp.stderr
    with pytest.raises(OSError):  # the disk is full because of the agent: not an env error
        sb.write_files({"more.bin": b"x" * (limit_mb * 1024 * 1024)})
    sb.exec("rm -f big /tmp/big")
    sb.write_files({"after.txt": "fine"})
    assert sb.read_file("after.txt") == b"fine"


def test_100mb_on_stdout_is_capped(sb: PooledSandbox) -> None:
    res = sb.exec("head -c 100000000 /dev/zero | tr '\\0' x", timeout=60)
    assert res.exit_code == 0 and not res.timed_out, res.summary()
    assert res.truncated
    assert len(res.stdout) < BATTERY_LIMITS.output_bytes + 200
    assert f"{100_000_000 - BATTERY_LIMITS.output_bytes} more bytes" in res.stdout


def test_cannot_write_outside_the_work_dir(sb: PooledSandbox) -> None:
    targets = ["/x", "/usr/x", "/etc/x", "/bin/x", "/var/x", "/home/x", "/root/x", "/proc/x", "/dev/x"]
    res = sb.exec("; ".join(f"touch {t} 2>/dev/null && echo WROTE {t}" for t in targets) + "; true")
    assert "WROTE" not in res.stdout
    assert sb.exec("echo ok > inside.txt && cat inside.txt").stdout == "ok\n"
    with pytest.raises(ValueError):
        sb.write_files({"../../etc/evil": "x"})


def test_cannot_read_host_files(sb: PooledSandbox) -> None:
    marker = (PROJECT / "pyproject.toml").read_text().splitlines()[1]
    res = sb.exec(f"cat {PROJECT}/pyproject.toml; grep -rs {marker!r} / --include=pyproject.toml "
                  f"-l 2>/dev/null | head -3; ls /root 2>&1; ls {PROJECT} 2>&1", timeout=60)
    assert marker not in res.stdout
    assert str(PROJECT) + "/" not in res.stdout
    shadow = sb.exec("cat /etc/shadow")
    assert shadow.exit_code != 0  # absent (bwrap) or unreadable by the agent (docker)
    try:
        host_shadow = Path("/etc/shadow").read_text()
    except OSError:
        host_shadow = ""
    for line in host_shadow.splitlines():
        fields = line.split(":")
        if len(fields) > 1 and len(fields[1]) > 3:  # a real password hash
            assert fields[1] not in shadow.stdout


def test_executor_cannot_be_killed_or_hijacked(sb: PooledSandbox) -> None:
    for sig in ("KILL", "TERM", "INT", "HUP", "STOP"):
        sb.exec(f"kill -{sig} 1")
    assert sb.exec("echo alive").stdout == "alive\n"
    # Not dumpable: its stdin (our protocol) cannot be opened, nor can it be traced.
    forge = sb.exec("ls /proc/1/fd/ 2>&1; echo x > /proc/1/fd/0 && echo FORGED")
    assert "FORGED" not in forge.stdout


def test_dead_sandbox_is_replaced(pool: SandboxPool) -> None:
    lease = pool.acquire()
    before = pool.stats.replaced
    if pool.backend == "docker":
        from envhub.sandboxes.dockerapi import docker_client

        docker_client().api.kill(lease.container_id)
    else:
        os.kill(lease.sandbox._proc.pid, signal.SIGKILL)
    with pytest.raises(SandboxError):
        for _ in range(50):  # the death is noticed at the next call
            lease.exec("true")
            time.sleep(0.05)
    lease.release()
    pool.wait_refills()
    assert pool.stats.replaced == before + 1
    with pool.acquire() as fresh:
        assert fresh.exec("echo replaced").stdout == "replaced\n"


def test_symlinks_do_not_escape_through_copy_out(sb: PooledSandbox, tmp_path: Path) -> None:
    sb.exec("mkdir -p out/d && echo real > out/real.txt && ln -s /etc/passwd out/leak "
            "&& ln -s / out/root && ln -s ../.. out/d/up && mkfifo out/fifo")
    dest = tmp_path / "dest"
    skipped = sb.copy_out("out", str(dest))
    assert (dest / "real.txt").read_text() == "real\n"
    assert {"leak", "root", "d/up", "fifo"} <= set(skipped)
    for root, dirs, files in os.walk(dest):
        for name in dirs + files:
            assert not os.path.islink(os.path.join(root, name)), name
    # A symlink already on the host side is never written through either.
    victim = tmp_path / "victim"
    victim.mkdir()
    pre = tmp_path / "pre"
    pre.mkdir()
    (pre / "d").symlink_to(victim)
    sb.exec("mkdir -p out2/d && echo x > out2/d/pwned")
    with pytest.raises(ValueError):
        sb.copy_out("out2", str(pre))
    assert list(victim.iterdir()) == []
    with pytest.raises(ValueError):  # reading through the agent's symlink is refused too
        sb.read_file("out/leak")


LEAVE_STATE = r'''
import ctypes, os, subprocess
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
IPC_CREAT = 0o1000
shm = libc.shmget(0x5eed, 4096, IPC_CREAT | 0o600)
sem = libc.semget(0x5eed, 1, IPC_CREAT | 0o600)
msg = libc.msgget(0x5eed, IPC_CREAT | 0o600)
assert min(shm, sem, msg) >= 0, ctypes.get_errno()
addr = libc.shmat(shm, None, 0)
ctypes.memmove(addr, b"secret from episode 1", 21)
libc.shmdt(ctypes.c_void_p(addr))
mq = libc.mq_open(b"/envhub-leftover", os.O_CREAT | os.O_RDWR, 0o600, None)
for path in ("/tmp/leftover", "/dev/shm/leftover"):
    with open(path, "w") as fh:
        fh.write("secret")
# A detached process that keeps the segment attached.
subprocess.Popen(["python3", "-c", "import ctypes, time; libc = ctypes.CDLL(None); "
                  "libc.shmat.restype = ctypes.c_void_p; libc.shmat(%d, None, 0); time.sleep(1000)" % shm],
                 start_new_session=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                 stderr=subprocess.DEVNULL)
print(shm, sem, msg, mq)
'''

LOOK_FOR_STATE = r'''
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
for kind in ("shm", "sem", "msg"):
    with open("/proc/sysvipc/" + kind) as fh:
        for row in fh.read().splitlines()[1:]:
            print("ipc", kind, row.split()[:2])
print("shmget", libc.shmget(0x5eed, 0, 0))  # -1: no segment with episode 1's key
print("mq", libc.mq_open(b"/envhub-leftover", os.O_RDONLY, 0, None))  # -1: no such queue
for path in ("/tmp", "/dev/shm", "/dev/mqueue"):
    if os.path.isdir(path):
        print("dir", path, sorted(os.listdir(path)))
for pid in os.listdir("/proc"):
    if pid.isdigit() and int(pid) not in (1, os.getpid()):
        with open("/proc/%s/cmdline" % pid, "rb") as fh:
            print("proc", pid, fh.read().replace(b"\0", b" ").decode(errors="replace"))
'''


def test_no_state_left_by_the_previous_episode(pool: SandboxPool) -> None:
    """A warm pool's next episode starts pristine: SysV IPC (shm/sem/msg), POSIX message queues,
    /tmp, /dev/shm and processes the previous one left are gone after the reset."""
    with pool.acquire() as lease:
        first = lease.sandbox
        made = lease.exec(["python3", "-c", LEAVE_STATE])
        assert made.exit_code == 0, made.summary()
        assert "0x" not in made.stdout and made.stdout.split()[0] != "-1"
        before = lease.exec(["python3", "-c", LOOK_FOR_STATE])
        assert "ipc shm" in before.stdout and "ipc sem" in before.stdout and "ipc msg" in before.stdout
        assert "leftover" in before.stdout  # the check does see what episode 1 left
    with pool.acquire() as lease:
        assert lease.sandbox is first  # the same sandbox, reset: not a fresh one
        after = lease.exec(["python3", "-c", LOOK_FOR_STATE])
        assert after.exit_code == 0, after.summary()
        lines = after.stdout.splitlines()
        assert not [line for line in lines if line.startswith(("ipc ", "proc "))], after.stdout
        assert "shmget -1" in lines and "mq -1" in lines, after.stdout
        assert "leftover" not in after.stdout, after.stdout
