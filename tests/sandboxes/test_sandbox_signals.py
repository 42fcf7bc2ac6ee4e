"""SIGTERM / SIGINT cleanup on the paths envhub really runs: sandboxes started on worker threads
(rollout, verify, serve), the CLI entry point, a signal while a container is still starting, a
main thread stuck holding a lock, and forked children. Real docker and real subprocesses.

Each check looks *right after* the signalled process exited: by then a close must already have
removed what it owned -- not docker's ``auto_remove`` a moment later, nor ``prune``.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from sandbox_fixtures import require_backend

from envhub.sandboxes.dockerapi import LABEL_PID

#: A sandbox created inside a ThreadPoolExecutor worker (as rollout / verify / serve do), then
#: the main thread waits for a signal. Prints what the sandbox owns.
WORKER_CHILD = textwrap.dedent("""\
    import sys, time
    from concurrent.futures import ThreadPoolExecutor
    from envhub.sandboxes import create_sandbox

    backend = sys.argv[1]
    with ThreadPoolExecutor(max_workers=2) as pool:
        sandboxes = [f.result() for f in [pool.submit(create_sandbox, backend) for _ in range(2)]]
    try:  # before the prints: the test signals as soon as it has read them
        for sb in sandboxes:
            print(getattr(sb, "container_id", None) or sb._ident(), flush=True)
        time.sleep(120)
    except KeyboardInterrupt:
        # SIGINT keeps its meaning: a KeyboardInterrupt the program can catch -- the sandboxes
        # were closed first, and the program can go on and start new ones.
        assert all(sb.closed for sb in sandboxes)
        with create_sandbox(backend) as again:
            print("caught", again.exec("echo again").stdout.strip(), flush=True)
        sys.exit(3)
""")


def _docker_api():
    from envhub.sandboxes.dockerapi import docker_client

    return docker_client().api


def _containers_of(pid: int) -> list[str]:
    rows = _docker_api().containers(all=True, filters={"label": [f"{LABEL_PID}={pid}"]})
    return [r["Id"][:12] for r in rows]


def _spawn(argv: list[str], backend: str, count: int = 2) -> tuple[subprocess.Popen[str], list[str]]:
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    owned = [proc.stdout.readline().strip() for _ in range(count)]
    if not all(owned):
        proc.kill()
        raise AssertionError(f"the child did not start its {backend} sandboxes: {proc.communicate()}")
    return proc, owned


@pytest.mark.slow
@pytest.mark.docker
def test_sigterm_removes_containers_started_on_worker_threads() -> None:
    require_backend("docker")
    api = _docker_api()
    proc, ids = _spawn([sys.executable, "-c", WORKER_CHILD, "docker"], "docker")
    assert len(_containers_of(proc.pid)) == 2
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=60)
    left = _containers_of(proc.pid)  # at once: not a moment later, when auto_remove would be done
    assert proc.returncode == -signal.SIGTERM  # the default action still ends the process
    assert left == [], f"containers left after SIGTERM: {left}"
    for cid in ids:
        assert not api.containers(all=True, filters={"id": cid})


def test_sigterm_removes_process_scratch_dirs_of_worker_threads() -> None:
    proc, dirs = _spawn([sys.executable, "-W", "ignore", "-c", WORKER_CHILD, "process"], "process")
    assert all(os.path.isdir(d) and os.path.basename(d).startswith("envhub-proc-") for d in dirs)
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGTERM
    assert [d for d in dirs if os.path.exists(d)] == []


@pytest.mark.slow
@pytest.mark.docker
def test_sigint_closes_then_raises_keyboard_interrupt() -> None:
    require_backend("docker")
    proc, ids = _spawn([sys.executable, "-c", WORKER_CHILD, "docker"], "docker")
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 3, err  # caught as KeyboardInterrupt, went on, exited on its own
    assert "caught again" in out
    assert _containers_of(proc.pid) == []
    assert not any(_docker_api().containers(all=True, filters={"id": cid}) for cid in ids)


#: Starts a docker sandbox on the *main* thread and never gets to use it: the test signals the
#: process as soon as the container exists, i.e. while the start (attach, first ping) is under way.
STARTING_CHILD = textwrap.dedent("""\
    import time
    from envhub.sandboxes import create_sandbox

    create_sandbox("docker")
    time.sleep(120)
""")


@pytest.mark.slow
@pytest.mark.docker
def test_sigterm_while_the_container_is_still_starting() -> None:
    require_backend("docker")
    proc = subprocess.Popen([sys.executable, "-c", STARTING_CHILD], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not _containers_of(proc.pid):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.005)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGTERM, err
    left = _containers_of(proc.pid)
    assert left == [], f"a container created before the first ping outlived SIGTERM: {left}; {err}"


#: The handler must not hang even when the main thread holds the cleanup lock and one resource's
#: close never returns: it gives up on that one after SIGNAL_CLEANUP_S and the rest are closed.
STUCK_CHILD = textwrap.dedent("""\
    import os, signal, threading, time
    from concurrent.futures import ThreadPoolExecutor
    from envhub.sandboxes import cleanup, create_sandbox

    class Stuck:
        def close(self):
            threading.Event().wait()

    cleanup.SIGNAL_CLEANUP_S = 2.0
    with ThreadPoolExecutor(max_workers=1) as pool:
        sb = pool.submit(create_sandbox, "process").result()
    cleanup.track(Stuck())
    print(sb._ident(), flush=True)
    with cleanup._lock:  # the signal lands while the main thread is inside the registry
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(60)
""")


@pytest.mark.slow
def test_signal_handler_is_bounded_and_needs_no_lock() -> None:
    proc, (scratch,) = _spawn([sys.executable, "-W", "ignore", "-c", STUCK_CHILD], "process", count=1)
    # a hang guard: the handler gives up on the stuck close after SIGNAL_CLEANUP_S (2 s); a handler
    # that waited for it (forever) or never ran (the 60 s sleep) overruns the 30 s
    proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGTERM
    assert not os.path.exists(scratch)


#: A forked child inherits the handlers and the registry; its SIGTERM must not tear down the
#: parent's sandboxes.
FORK_CHILD = textwrap.dedent("""\
    import os, signal, time
    from envhub.sandboxes import create_sandbox

    sb = create_sandbox("process")
    pid = os.fork()
    if pid == 0:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(30)
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == -signal.SIGTERM
    print(sb.exec("echo parent-ok").stdout.strip(), os.path.isdir(sb._ident()), flush=True)
    sb.close()
""")


def test_a_forked_child_does_not_close_the_parents_sandboxes() -> None:
    out = subprocess.run([sys.executable, "-W", "ignore", "-c", FORK_CHILD], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "parent-ok True"


def _envhub() -> list[str]:
    exe = shutil.which("envhub")
    return [exe] if exe else [sys.executable, "-m", "envhub.cli"]


@pytest.mark.docker
@pytest.mark.slow
def test_sigterm_mid_rollout_leaves_no_container(tmp_path: Path) -> None:
    require_backend("docker")
    proc = subprocess.Popen([*_envhub(), "rollout", "envhub/CodeRepair-v0", "--policy", "gold",
                             "--episodes", "400", "--concurrency", "4", "--sandbox", "docker",
                             "--out", str(tmp_path / "run"), "--no-progress"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 180
    while len(_containers_of(proc.pid)) < 3:  # episodes are under way (agent + grading sandboxes)
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.05)
    time.sleep(1.0)  # mid-run: containers being started, used, reset and removed
    assert proc.poll() is None, "the rollout finished before the signal: give it more episodes"
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=60)
    left = _containers_of(proc.pid)
    # SIGTERM stops a rollout as Ctrl-C does: it says what is on disk and exits 128 + 15
    assert proc.returncode == 128 + signal.SIGTERM, proc.stderr.read() if proc.stderr else ""
    assert left == [], f"containers left by the rollout after SIGTERM: {left}"


@pytest.mark.docker
@pytest.mark.slow
def test_sigterm_to_envhub_serve_leaves_no_container() -> None:
    """uvicorn captures SIGTERM, shuts down, restores the handler it found (ours, installed by the
    CLI entry point) and re-raises the signal: the env's sandboxes must be gone at exit."""
    require_backend("docker")
    pytest.importorskip("uvicorn")
    import socket

    import httpx

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    proc = subprocess.Popen([*_envhub(), "serve", "envhub/CodeRepair-v0", "--port", str(port),
                             "--sandbox", "docker"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            try:
                if httpx.get(url + "/health", timeout=5).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        assert httpx.post(url + "/reset", json={}, timeout=120).status_code == 200
        while not _containers_of(proc.pid):  # the env's sandbox (a pooled one may outlive the request)
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.05)
    except BaseException:
        proc.kill()
        raise
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=60)
    left = _containers_of(proc.pid)
    assert proc.returncode == -signal.SIGTERM, proc.stderr.read() if proc.stderr else ""
    assert left == [], f"containers left by envhub serve after SIGTERM: {left}"
