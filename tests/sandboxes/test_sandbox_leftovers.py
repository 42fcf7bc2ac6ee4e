"""What a ``kill -9`` of a sandbox's owner leaves, and the next start of that backend sweeping it.

A killed owner runs no cleanup: its scratch dirs (process, landlock), cgroups (bwrap) or
container (docker) stay. The next envhub process that starts a sandbox of the same backend removes
those of dead owners -- never a live owner's, never another user's or another host's, and never
anything a symlink the agent planted points at.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sandbox_fixtures import backend_params, require_backend

from envhub.sandboxes import leftovers

#: Opens a sandbox of ``argv[1]``, has the agent write a file and plant links to ``argv[2]`` (a
#: directory outside every sandbox), prints what the sandbox owns, then waits to be killed.
HOLDER = textwrap.dedent("""\
    import json, os, sys, time
    from envhub.sandboxes import new_sandbox

    backend, victim = sys.argv[1], sys.argv[2]
    sb = new_sandbox(backend)
    sb.write_files({"agent.txt": "the agent's file"})
    made = sb.exec(["sh", "-c", f"mkdir -p deep/er && ln -s {victim} deep/er/dir-link "
                                f"&& ln -s {victim}/keep.txt file-link"])
    assert made.exit_code == 0, made
    cgroup = getattr(sb, "cgroup", None)
    print(json.dumps({"scratch": os.path.dirname(sb.workdir) if backend in ("process", "landlock") else None,
                      "container": getattr(sb, "container_id", None),
                      "cgroups": sorted(cgroup.paths.values()) if cgroup is not None else []}), flush=True)
    time.sleep(300)
""")
#: A fresh envhub process's first sandbox of ``argv[1]``: its start sweeps.
NEXT_START = "import sys\nfrom envhub.sandboxes import new_sandbox\nnew_sandbox(sys.argv[1]).close()\n"


@pytest.fixture
def scratch_root() -> Iterator[str]:
    """The temp dir of the processes under test; traversable by the landlock executor's own uid."""
    root = tempfile.mkdtemp(prefix="envhub-test-leftovers-")
    os.chmod(root, 0o755)
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    """A directory outside every sandbox, with a file: what a planted link must not cost."""
    (tmp_path / "victim").mkdir()
    (tmp_path / "victim" / "keep.txt").write_text("not the agent's")
    return tmp_path / "victim"


def _hold(backend: str, victim: Path, env: dict[str, str]) -> tuple[subprocess.Popen[str], dict[str, Any]]:
    proc = subprocess.Popen([sys.executable, "-W", "ignore", "-c", HOLDER, backend, str(victim)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line:
        proc.kill()
        raise AssertionError(f"the holder did not start its {backend} sandbox: {proc.communicate()}")
    return proc, json.loads(line)


def _container_state(cid: str | None) -> str | None:
    """The container's state, or None when it does not exist (or there is none)."""
    if cid is None:
        return None
    from envhub.sandboxes.dockerapi import docker_client, is_not_found

    try:
        return str(docker_client().api.inspect_container(cid)["State"]["Status"])
    except Exception as exc:
        if is_not_found(exc):
            return None
        raise


def _gone_within(check: Any, timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while check() is not None:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


@pytest.mark.slow
@pytest.mark.parametrize("backend", backend_params("docker", "bwrap", "landlock", "process"))
def test_a_killed_owners_leftovers_go_at_the_next_start_of_its_backend(backend: str, scratch_root: str,
                                                                      victim: Path) -> None:
    require_backend(backend)
    env = {**os.environ, "TMPDIR": scratch_root}
    dead, left = _hold(backend, victim, env)
    live, kept = _hold(backend, victim, env)
    try:
        dead.send_signal(signal.SIGKILL)
        dead.wait(timeout=30)
        if left["scratch"]:  # a kill -9 runs no cleanup: the agent's files are still there
            assert (Path(left["scratch"]) / "work" / "agent.txt").is_file()
            assert (Path(left["scratch"]) / "work" / "deep" / "er" / "dir-link").is_symlink()
        assert all(os.path.isdir(p) for p in left["cgroups"])

        nxt = subprocess.run([sys.executable, "-W", "ignore", "-c", NEXT_START, backend], env=env,
                             capture_output=True, text=True, timeout=120)
        assert nxt.returncode == 0, nxt.stderr[-2000:]

        if left["scratch"]:
            assert not os.path.lexists(left["scratch"])
            assert (Path(kept["scratch"]) / "work" / "agent.txt").read_text() == "the agent's file"
        assert not any(os.path.exists(p) for p in left["cgroups"])
        assert all(os.path.isdir(p) for p in kept["cgroups"])
        assert _gone_within(lambda: _container_state(left["container"]))
        if kept["container"]:
            assert _container_state(kept["container"]) == "running"
        assert (victim / "keep.txt").read_text() == "not the agent's"  # no link was followed
        assert live.poll() is None
    finally:
        live.terminate()  # a signal the owner handles: it closes its sandbox
        live.wait(timeout=60)
        for proc in (dead, live):
            for stream in (proc.stdout, proc.stderr):
                if stream is not None:
                    stream.close()
    if kept["scratch"]:
        assert not os.path.lexists(kept["scratch"])


def _scratch(root: Path, pid: int, start: int, *, kind: str = "proc", host: str | None = None,
             suffix: str = "x") -> Path:
    path = root / f"envhub-{kind}-{pid}-{start}-{host or leftovers._host_tag()}-{suffix}"
    path.mkdir()
    (path / "work").mkdir()
    (path / "work" / "agent.txt").write_text("the agent's file")
    return path


def _start_of(pid: int) -> int:
    found = leftovers._state_and_start(pid)
    assert found is not None
    return found[1]


def test_the_sweep_removes_only_dead_owners_scratch_and_follows_no_link(tmp_path: Path, victim: Path) -> None:
    root = tmp_path / "tmp"
    root.mkdir()
    finished = subprocess.Popen(["true"])
    finished.wait()
    sleeper = subprocess.Popen(["sleep", "60"])
    zombie = subprocess.Popen(["sleep", "60"])
    zombie.kill()  # not reaped yet: a zombie owns nothing
    try:
        me = os.getpid()
        dead = _scratch(root, finished.pid, 123, suffix="dead")
        (dead / "work" / "dir-link").symlink_to(victim)
        (dead / "work" / "file-link").symlink_to(victim / "keep.txt")
        nested = dead / "work" / "a" / "b"
        nested.mkdir(parents=True)
        (nested / "up").symlink_to(victim)
        nested.chmod(0o000)  # the agent's modes do not stop the removal
        reused = _scratch(root, sleeper.pid, _start_of(sleeper.pid) + 1, suffix="reused")
        undead = _scratch(root, zombie.pid, _start_of(zombie.pid), suffix="zombie")
        gone = [dead, reused, undead]

        keep = [_scratch(root, sleeper.pid, _start_of(sleeper.pid), suffix="live"),
                _scratch(root, me, _start_of(me), suffix="mine"),
                _scratch(root, finished.pid, 123, kind="landlock", suffix="other-backend"),
                _scratch(root, finished.pid, 123, host="00000000", suffix="other-host"),
                root / "envhub-proc-1-2-3-unrecorded"]
        keep[-1].mkdir()
        link = root / f"envhub-proc-{finished.pid}-123-{leftovers._host_tag()}-link"
        link.symlink_to(victim)  # named like a dead owner's scratch: the link goes nowhere, nor its target
        if os.geteuid() == 0:
            theirs = _scratch(root, finished.pid, 123, suffix="theirs")
            os.chown(theirs, 12345, 12345)
            keep.append(theirs)

        deadline = time.monotonic() + 10
        while (leftovers._state_and_start(zombie.pid) or (b"",))[0] != b"Z" and time.monotonic() < deadline:
            time.sleep(0.05)  # the kill takes a moment; poll() would reap it
        assert leftovers.sweep_scratch("process", root=str(root)) == len(gone)
        assert [p.name for p in gone if os.path.lexists(p)] == []
        assert [p.name for p in keep if not p.is_dir()] == []
        assert link.is_symlink() and (victim / "keep.txt").read_text() == "not the agent's"
        assert leftovers.sweep_scratch("process", root=str(root)) == 0
    finally:
        for proc in (sleeper, zombie):
            proc.kill()
            proc.wait()
