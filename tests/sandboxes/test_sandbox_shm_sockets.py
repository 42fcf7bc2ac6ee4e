"""Shared memory and unix sockets: nothing of a sandbox's reaches the host or the next episode.

- ``/dev/shm``: docker and bwrap give each sandbox a tmpfs of its own, sized ``min(disk_mb,
  memory_mb)`` and charged to the sandbox's memory cgroup, emptied at reset and gone at close;
  one call that writes past the memory limit there is stopped inside it and leaves nothing on the
  host. The landlock backend has no mount namespace: the host's ``/dev/shm`` is outside its
  Landlock rules, so the same call writes nothing at all (``shm_open``, ``sem_open`` fail too).
- SysV IPC: docker's and bwrap's live in their own IPC namespace and go at reset; landlock, in the
  host's namespace, is refused SysV and POSIX-queue IPC by its seccomp filter.
- Unix sockets by path: listeners of the server's uid in the host's ``/tmp`` and ``/dev/shm`` (mode
  0777, so no file permission stands in the way), an abstract one and the Docker socket are
  unreachable -- docker and bwrap have no such path (their own ``/tmp``, ``/dev/shm``, no ``/var``)
  and a network namespace of their own; landlock refuses ``socket()`` and datagram
  ``socketpair()``, also where the executor runs as the server's own uid (``landlock-own-uid``).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import textwrap
import uuid
from collections.abc import Iterator

import pytest
from sandbox_fixtures import assert_no_leaked_containers, backend_params, require_backend

from envhub.sandboxes import SandboxSpec, new_sandbox
from envhub.sandboxes.base import Limits
from envhub.sandboxes.bwrap_backend import bwrap_args
from envhub.sandboxes.docker_backend import container_config
from envhub.sandboxes.executor import MEMORY_STAT_FILES
from envhub.sandboxes.resident import ResidentSandbox

#: Disk larger than memory, as the attacker had it: the shared-memory tmpfs is sized by memory.
LIMITS = Limits(memory_mb=128, disk_mb=1024, pids=64, timeout_s=30.0)
SPEC = SandboxSpec(limits=LIMITS)
BACKENDS = backend_params("docker", "bwrap", "landlock")
OWN_UID = pytest.param("landlock-own-uid", id="landlock-own-uid")
DOCKER_SOCKETS = ("/var/run/docker.sock", "/run/docker.sock")

#: Fills /dev/shm with 8 MiB files named MARKER-i, up to ``{mb}`` MiB; prints JSON: MiB written, errno.
FILL = """\
import errno, json
chunk, written, stopped = b"x" * (8 << 20), 0, None
try:
    for i in range({mb} // 8):
        with open("/dev/shm/{marker}-%d" % i, "wb") as fh:
            fh.write(chunk)
        written += 8
        print(json.dumps({{"written": written}}), flush=True)
except OSError as exc:
    stopped = errno.errorcode.get(exc.errno, exc.errno)
print(json.dumps({{"written": written, "stopped": stopped}}), flush=True)
"""
#: The sandbox's own memory cgroup's ``shmem`` (docker: read inside the container), in bytes.
SHMEM = f"""\
import os
for path in {MEMORY_STAT_FILES!r}:
    if os.path.exists(path):
        rows = dict(line.split() for line in open(path))
        print(rows.get("total_shmem", rows.get("shmem")))
        break
"""
#: One SysV segment, touched, detached; then a semaphore set, a message queue and a POSIX queue.
#: Prints JSON: each call's result ("ok" or the errno's name).
SYSV = """\
import ctypes, errno, json
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
out = {{}}
def name(result):
    return "ok" if result not in (-1, None, ctypes.c_void_p(-1).value) else errno.errorcode[ctypes.get_errno()]
shmid = libc.shmget({key}, 8 << 20, 0o1600)
out["shmget"] = name(shmid)
if shmid >= 0:
    address = libc.shmat(shmid, None, 0)
    out["shmat"] = name(address)
    ctypes.memset(address, 1, 8 << 20)
    libc.shmdt(ctypes.c_void_p(address))
out["semget"] = name(libc.semget({key}, 1, 0o1600))
out["msgget"] = name(libc.msgget({key}, 0o1600))
out["mq_open"] = name(libc.mq_open(b"/{marker}", 0o100 | 0o2, 0o600, None))
print(json.dumps(out))
"""
#: Tries every host socket; prints JSON: path -> "connected" / "sent", or the errno's name.
PROBE = """\
import errno, json, socket
out = {{}}
def attempt(key, family, kind, how, target):
    try:
        sock = socket.socket(family, kind)
        try:
            sock.settimeout(2)
            sock.connect(target) if how == "connect" else sock.sendto(b"hello", target)
            out[key] = "connected" if how == "connect" else "sent"
        finally:
            sock.close()
    except OSError as exc:
        out[key] = errno.errorcode.get(exc.errno, str(exc.errno))
for path in {streams!r}:
    attempt(path, socket.AF_UNIX, socket.SOCK_STREAM, "connect", path)
attempt("dgram", socket.AF_UNIX, socket.SOCK_DGRAM, "sendto", {dgram!r})
attempt("abstract", socket.AF_UNIX, socket.SOCK_STREAM, "connect", {abstract!r})
try:
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    a.sendto(b"hello", {dgram!r})
    out["dgram-pair"] = "sent"
except OSError as exc:
    out["dgram-pair"] = errno.errorcode.get(exc.errno, str(exc.errno))
print(json.dumps(out))
"""


def _open(backend: str, monkeypatch: pytest.MonkeyPatch) -> ResidentSandbox:
    if backend != "landlock-own-uid":
        require_backend(backend)
        return new_sandbox(backend, SPEC)
    require_backend("landlock")
    from envhub.sandboxes import landlock_backend

    with monkeypatch.context() as patched:  # as a server that is not root builds it: one uid for both
        patched.setattr(landlock_backend.os, "geteuid", lambda: 1000)
        sandbox = landlock_backend.LandlockSandbox(SPEC)
    assert sandbox.uid is None
    return sandbox.start()


@pytest.fixture
def sandbox(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[ResidentSandbox]:
    sb = _open(request.param, monkeypatch)
    try:
        yield sb
    finally:
        sb.close()
        assert_no_leaked_containers()


def _json_line(text: str) -> dict:
    return json.loads(text.strip().splitlines()[-1])


def _host_shm(marker: str) -> list[str]:
    return sorted(name for name in os.listdir("/dev/shm") if name.startswith(marker))


def _shmem_bytes(sb: ResidentSandbox) -> int:
    """What the sandbox's memory cgroup counts as shared memory (tmpfs pages, SysV segments)."""
    cgroup = getattr(sb, "cgroup", None)
    if cgroup is not None:
        return int(cgroup.shmem_bytes())
    result = sb.exec(["python3", "-I", "-c", SHMEM], timeout=20)
    assert result.exit_code == 0, result.summary()
    return int(result.stdout.strip())


def test_the_own_shm_is_sized_within_the_memory_limit() -> None:
    _, host = container_config(SPEC, "image", ["python3"])
    assert host["shm_size"] == "128m" and host["ipc_mode"] == "private"
    args = bwrap_args(SPEC, {})
    at = args.index("/dev/shm")
    assert args[at - 3:at] == ["--size", str(128 << 20), "--tmpfs"]
    small = SandboxSpec(limits=Limits(memory_mb=512, disk_mb=32))
    assert container_config(small, "image", ["python3"])[1]["shm_size"] == "32m"


@pytest.mark.parametrize("sandbox", BACKENDS, indirect=True)
def test_shm_past_the_memory_limit_stays_inside_and_goes_at_reset_and_close(sandbox: ResidentSandbox) -> None:
    sb, marker = sandbox, f"envhub-shm-{uuid.uuid4().hex[:12]}"
    attempt_mb = LIMITS.memory_mb + 64
    result = sb.exec(["python3", "-I", "-c", FILL.format(mb=attempt_mb, marker=marker)], timeout=30)
    lines = [json.loads(line) for line in result.stdout.splitlines() if line.strip()] or [{"written": 0}]
    written = lines[-1]["written"]
    assert _host_shm(marker) == [], "a sandbox wrote into the host's /dev/shm"
    if sb.backend == "landlock":
        assert (result.exit_code, lines[-1]) == (0, {"written": 0, "stopped": "EACCES"}), result.summary()
        refused = sb.exec(["python3", "-I", "-c", "import multiprocessing; multiprocessing.Lock()"], timeout=20)
        assert "PermissionError" in refused.stderr, refused.summary()  # sem_open: glibc's /dev/shm only
        return
    # Stopped inside the bound: killed by the memory cgroup, or the tmpfs (memory_mb) is full.
    assert result.oom_killed or lines[-1].get("stopped") == "ENOSPC", result.summary()
    assert 0 < written <= LIMITS.memory_mb, result.summary()
    held = sb.exec(["sh", "-c", "du -sm /dev/shm | cut -f1"], timeout=20)
    assert int(held.stdout.split()[0]) >= written - 8, held.summary()
    assert _shmem_bytes(sb) >= (written - 8) << 20  # counted against the sandbox's memory limit
    sb.reset()
    after = sb.exec(["ls", "-A", "/dev/shm"], timeout=20)
    assert after.exit_code == 0 and after.stdout == "", after.summary()
    sb.exec(["python3", "-I", "-c", FILL.format(mb=16, marker=marker)], timeout=30)
    container = getattr(sb, "container_id", None)
    sb.close()
    assert _host_shm(marker) == []
    if container:  # its /dev/shm was the container's own mount: gone with it
        from envhub.sandboxes.dockerapi import docker_client

        root = docker_client().info().get("DockerRootDir", "/var/lib/docker")
        assert not os.path.exists(os.path.join(root, "containers", container))


@pytest.mark.parametrize("sandbox", [*BACKENDS, OWN_UID], indirect=True)
def test_sysv_and_posix_queues_are_the_sandboxes_own_or_refused(sandbox: ResidentSandbox) -> None:
    sb, marker = sandbox, f"envhub-ipc-{uuid.uuid4().hex[:12]}"
    key = int.from_bytes(os.urandom(3), "big") | 0x0E000000
    result = sb.exec(["python3", "-I", "-c", SYSV.format(key=key, marker=marker)], timeout=20)
    assert result.exit_code == 0, result.summary()
    calls = _json_line(result.stdout)
    with open("/proc/sysvipc/shm") as fh:
        host_keys = {int(row.split()[0]) for row in fh.read().splitlines()[1:] if row.strip()}
    assert key not in host_keys, "the segment is in the host's IPC namespace"
    assert not os.path.exists(f"/dev/mqueue/{marker}")
    if sb.backend == "landlock":
        assert calls == dict.fromkeys(("shmget", "semget", "msgget", "mq_open"), "EPERM"), calls
        return
    assert calls == dict.fromkeys(("shmget", "shmat", "semget", "msgget", "mq_open"), "ok"), calls
    sb.reset()
    left = sb.exec(["sh", "-c", "cat /proc/sysvipc/shm /proc/sysvipc/sem /proc/sysvipc/msg | grep -v key; "
                                "ls -A /dev/mqueue"], timeout=20)
    assert left.stdout.strip() == "", left.summary()


@contextlib.contextmanager
def _host_listeners(marker: str) -> Iterator[dict[str, object]]:
    """Listeners of this process's uid, mode 0777: a stream socket in /tmp and one in /dev/shm, a
    datagram socket in /tmp and an abstract stream socket; all non-blocking."""
    paths = {"tmp": f"/tmp/{marker}.sock", "shm": f"/dev/shm/{marker}.sock", "dgram": f"/tmp/{marker}.dgram"}
    made: dict[str, object] = {}
    try:
        for key, path in paths.items():
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM if key == "dgram" else socket.SOCK_STREAM)
            made[key] = sock
            sock.bind(path)
            os.chmod(path, 0o777)
            if key != "dgram":
                sock.listen(8)
            sock.setblocking(False)
        abstract = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        made["abstract"] = abstract
        abstract.bind(f"\0{marker}")
        abstract.listen(8)
        abstract.setblocking(False)
        yield {**made, "paths": paths}
    finally:
        for key, sock in made.items():
            assert isinstance(sock, socket.socket)
            sock.close()
            with contextlib.suppress(FileNotFoundError):
                os.unlink(paths.get(key, ""))


def _nothing_arrived(sock: object) -> bool:
    assert isinstance(sock, socket.socket)
    try:
        if sock.type == socket.SOCK_DGRAM:
            sock.recv(64)
        else:
            sock.accept()[0].close()
    except BlockingIOError:
        return True
    return False


@pytest.mark.parametrize("sandbox", [*BACKENDS, OWN_UID], indirect=True)
def test_no_unix_socket_of_the_host_by_path(sandbox: ResidentSandbox) -> None:
    sb, marker = sandbox, f"envhub-sock-{uuid.uuid4().hex[:12]}"
    with _host_listeners(marker) as host:
        paths = host["paths"]
        assert isinstance(paths, dict)
        streams = [paths["tmp"], paths["shm"], *(p for p in DOCKER_SOCKETS if os.path.exists(p))]
        program = PROBE.format(streams=streams, dgram=paths["dgram"], abstract=f"\0{marker}")
        result = sb.exec(["python3", "-I", "-c", program], timeout=30)
        assert result.exit_code == 0, result.summary()
        reached = _json_line(result.stdout)
        assert all(_nothing_arrived(host[key]) for key in ("tmp", "shm", "dgram", "abstract"))
    if sb.backend == "landlock":  # no socket() of any family; no datagram pair
        assert set(reached.values()) == {"EACCES"}, reached
    else:  # no such path in its own mount namespace; its own network namespace for abstract names
        expected = {**dict.fromkeys([*streams, "dgram", "dgram-pair"], "ENOENT"), "abstract": "ECONNREFUSED"}
        assert reached == expected, reached
    assert len(reached) == len(streams) + 3


#: What a landlock sandbox keeps: stream socketpairs, processes that talk over pipes, fork and spawn.
LANDLOCK_KEEPS = """\
import multiprocessing, socket, subprocess, sys


def child(conn):
    conn.send(conn.recv() * 2)


if __name__ == "__main__":
    a, b = socket.socketpair()
    a.sendall(b"pair")
    assert b.recv(4) == b"pair"
    assert subprocess.run(["sh", "-c", "echo ok | cat"], capture_output=True, text=True).stdout == "ok\\n"
    for method in ("fork", "spawn"):
        ctx = multiprocessing.get_context(method)
        parent, other = ctx.Pipe()
        proc = ctx.Process(target=child, args=(other,))
        proc.start()
        parent.send(21)
        assert parent.recv() == 42
        proc.join(20)
        assert proc.exitcode == 0
    print("ok")
"""


@pytest.mark.parametrize("sandbox", [pytest.param("landlock", id="landlock")], indirect=True)
def test_landlock_keeps_pipes_stream_pairs_and_processes(sandbox: ResidentSandbox) -> None:
    sandbox.write_files({"keeps.py": textwrap.dedent(LANDLOCK_KEEPS)})
    result = sandbox.exec(["python3", "keeps.py"], timeout=60)
    assert result.exit_code == 0 and result.stdout.strip() == "ok", result.summary()
