"""Regression tests for the fault defects found from outside (issue 13, item 5): leftovers of a
``kill -9``, a full disk under ``--out``, and bad ``verify`` / ``rollout`` arguments."""

from __future__ import annotations

import contextlib
import json
import os
import re
import resource
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from sandbox_fixtures import require_backend
from typer.testing import CliRunner

from envhub.cli.commands import app
from envhub.policies import make_policy
from envhub.registry import make
from envhub.rollout.runner import run_rollouts
from envhub.verifiers.suite import grade_submissions, run_suite

ENV = "envhub/Computation-v0"
TASK = "comp-bigint-L1-0"


def cli(*args: str):
    return CliRunner().invoke(app, list(args))


# ---- verify and rollout refuse bad arguments up front -------------------------------------------


def test_verify_an_unknown_task_id_is_one_up_front_error():
    res = cli("verify", ENV, "--tasks", "20", "--sandbox", "process")
    assert res.exit_code == 2, res.output
    assert "unknown task id '20'" in res.stderr and "violation" not in res.output
    res = cli("verify", ENV, "--tasks", f"{TASK},nope-1,nope-2", "--sandbox", "process")
    assert res.exit_code == 2 and "'nope-1', 'nope-2'" in res.stderr
    res = cli("verify", ENV, "--tasks", " , ", "--sandbox", "process")
    assert res.exit_code == 2 and "names no task id" in res.stderr


def test_verify_submissions_that_grade_nothing_exit_non_zero(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n  \n")
    res = cli("verify", ENV, "--submissions", str(empty))
    assert res.exit_code == 2 and "holds no submissions" in res.stderr and str(empty) in res.stderr
    invalid = tmp_path / "invalid.jsonl"
    invalid.write_text('{"submission": "1"}\n\n{"task_id": "nope-1", "submission": "1"}\n')
    res = cli("verify", ENV, "--submissions", str(invalid))
    assert res.exit_code == 1
    assert "none of the 2 submissions" in res.stderr
    assert f"{invalid}:1:" in res.stderr and f"{invalid}:3:" in res.stderr  # the lines are named
    assert [json.loads(line).get("outcome") for line in res.stdout.splitlines()] == [None, None]


def test_verify_submissions_partly_ungraded_still_grade_the_rest(tmp_path):
    good = make(ENV).tasks.get(TASK).hidden["answer"]
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text(json.dumps({"task_id": TASK, "submission": good}) + "\n" + '{"task_id": 3}\n')
    res = cli("verify", ENV, "--submissions", str(mixed))
    assert res.exit_code == 0, res.output
    assert [json.loads(line).get("outcome") for line in res.stdout.splitlines()] == ["success", None]
    assert f"{mixed}:2:" in res.stderr


def test_verify_output_that_cannot_be_written_is_a_message(tmp_path):
    good = make(ENV).tasks.get(TASK).hidden["answer"]
    subs = tmp_path / "subs.jsonl"
    subs.write_text(json.dumps({"task_id": TASK, "submission": good}) + "\n")
    blocker = tmp_path / "file"
    blocker.write_text("keep me")
    res = cli("verify", ENV, "--submissions", str(subs), "--out", str(blocker / "graded.jsonl"))
    assert res.exit_code == 1 and f"cannot write {blocker / 'graded.jsonl'}" in res.stderr
    assert blocker.read_text() == "keep me"


@pytest.mark.parametrize("args", [
    ("rollout", ENV, "--concurrency", "0"),
    ("rollout", ENV, "--concurrency", "-3"),
    ("rollout", ENV, "--episodes", "0"),
    ("rollout", ENV, "--group-size", "0"),
    ("verify", ENV, "--jobs", "0"),
    ("verify", ENV, "--limit", "-1"),
], ids=lambda a: " ".join(a[2:]) if isinstance(a, tuple) else a)
def test_non_positive_counts_are_refused(tmp_path, args):
    extra = ("--out", str(tmp_path / "run"), "--no-progress") if args[0] == "rollout" else ()
    res = cli(*args, *extra)
    assert res.exit_code == 2, res.output
    said = " ".join(re.sub(r"[│╭╮╰╯─]", " ", res.output).split())  # typer's error box, unwrapped
    assert f"Invalid value for '{args[2]}'" in said
    assert not (tmp_path / "run").exists()  # nothing was started


def test_the_library_refuses_non_positive_counts_too(tmp_path):
    with pytest.raises(ValueError, match="concurrency"):
        run_rollouts(ENV, make_policy("noop"), out_dir=tmp_path, episodes=1, concurrency=0)
    with pytest.raises(ValueError, match="jobs"):
        run_suite(lambda: make(ENV), [TASK], jobs=0)
    with pytest.raises(ValueError, match="jobs"):
        grade_submissions(lambda: make(ENV), [], jobs=0)
    with pytest.raises(ValueError, match="unknown task id"):
        run_suite(lambda: make(ENV), ["20"])


def test_a_corrupt_middle_line_names_the_file_and_line(tmp_path):
    out = tmp_path / "run"
    run_rollouts(ENV, make_policy("noop"), out_dir=out, episodes=3)
    path = out / "trajectories.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(lines[0] + b'{"episode_id": "x", "oops\n' + lines[2])
    res = cli("rollout", ENV, "--policy", "noop", "--episodes", "3", "--out", str(out), "--no-progress")
    assert res.exit_code == 2, res.output
    assert f"{path}:2:" in res.stderr and "not JSON" in res.stderr and "Traceback" not in res.output
    path.write_bytes(lines[0] + b"[1, 2]\n" + lines[2])
    with pytest.raises(ValueError, match=r"trajectories\.jsonl:2: a JSON list"):
        run_rollouts(ENV, make_policy("noop"), out_dir=out, episodes=3)
    path.write_bytes(lines[0] + b'{"no_id": 1}\n' + lines[2])
    with pytest.raises(ValueError, match=r"trajectories\.jsonl:2: a record without 'episode_id'"):
        run_rollouts(ENV, make_policy("noop"), out_dir=out, episodes=3)


# ---- a full disk under --out ---------------------------------------------------------------------


@contextlib.contextmanager
def small_tmpfs(where: Path, size: str) -> Iterator[Path]:
    where.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({mounted.stderr.strip()}); the RLIMIT_FSIZE case covers this")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def rollout_cmd(out: Path) -> list[str]:
    return [sys.executable, "-m", "envhub.cli", "rollout", ENV, "--policy", "gold", "--episodes", "40",
            "--concurrency", "2", "--out", str(out), "--no-progress"]


def check_kept_and_reported(res: subprocess.CompletedProcess[str], out: Path, cause: str) -> int:
    assert res.returncode == 1, res.stdout + res.stderr
    assert "Traceback" not in res.stderr
    assert f"writing {out / 'trajectories.jsonl'} failed: {cause}" in res.stderr
    assert "rerun the same command to resume" in res.stderr
    data = (out / "trajectories.jsonl").read_bytes()
    assert data.endswith(b"\n"), "no torn record is left behind"
    kept = [json.loads(line) for line in data.splitlines()]
    assert 0 < len(kept) < 40 and all(r["outcome"] == "success" for r in kept)
    report = json.loads((out / "report.json").read_text())
    assert report["attempted"] == len(kept) and report["planned"] == 40
    assert cause in report["incomplete"]["error"]
    assert f"{len(kept)} of 40 episodes are on disk" in res.stderr
    assert not (out / ".envhub-reserve").exists()
    return len(kept)


def check_resumed(out: Path, kept: int) -> None:
    res = subprocess.run(rollout_cmd(out), capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    ids = [json.loads(line)["episode_id"] for line in (out / "trajectories.jsonl").read_text().splitlines()]
    assert len(ids) == 40 == len(set(ids))
    report = json.loads((out / "report.json").read_text())
    assert "incomplete" not in report and report["skipped_already_done"] == kept


@pytest.mark.slow
def test_a_full_disk_keeps_what_was_written_and_says_so(tmp_path):
    """A 64 KiB tmpfs as ``--out``: it fills after ~10 episodes of 40."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root; the RLIMIT_FSIZE case covers this")
    with small_tmpfs(tmp_path / "disk", "64k") as disk:
        out = disk / "run"
        res = subprocess.run(rollout_cmd(out), capture_output=True, text=True, timeout=300)
        kept = check_kept_and_reported(res, out, "No space left on device")
        subprocess.run(["mount", "-o", "remount,size=4m", str(disk)], check=True)
        check_resumed(out, kept)


@pytest.mark.slow
def test_a_file_size_limit_keeps_what_was_written_and_says_so(tmp_path):
    """The same through RLIMIT_FSIZE (no root needed): writes past 48 KiB fail with EFBIG."""
    out = tmp_path / "run"

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (48 * 1024, 48 * 1024))

    res = subprocess.run(rollout_cmd(out), capture_output=True, text=True, timeout=300, preexec_fn=limit)
    kept = check_kept_and_reported(res, out, "File too large")
    check_resumed(out, kept)


# ---- containers a kill -9 left behind --------------------------------------------------------------


def _labelled_container(client, pid: int, host: str, command: tuple[str, ...] = ("true",)) -> str:
    from envhub.sandboxes import base_image_tag
    from envhub.sandboxes.dockerapi import LABEL_HOST, LABEL_OWNED, LABEL_PID

    labels = {LABEL_OWNED: "1", LABEL_PID: str(pid), LABEL_HOST: host, "envhub.backend": "docker"}
    return client.api.create_container(base_image_tag(), command=list(command), labels=labels,
                                       host_config=client.api.create_host_config(network_mode="none"))["Id"]


@pytest.mark.docker
def test_containers_of_dead_owners_are_swept_at_the_next_start():
    """What a ``kill -9`` mid-creation leaves: containers in state Created whose owner is gone.
    The next process's first docker sandbox removes them, and only them: a live owner's, another
    host's and a running one stay."""
    require_backend("docker")
    from envhub.sandboxes.dockerapi import docker_client

    client = docker_client()
    dead = subprocess.Popen(["true"])
    dead.wait()
    live = subprocess.Popen(["sleep", "120"])
    here = socket.gethostname()
    made: list[str] = []
    try:
        made += [_labelled_container(client, dead.pid, here) for _ in range(2)]
        exited = _labelled_container(client, dead.pid, here)
        client.api.start(exited)
        client.api.wait(exited, timeout=30)
        made.append(exited)
        running = _labelled_container(client, dead.pid, here, ("sleep", "120"))
        client.api.start(running)
        keep = [_labelled_container(client, live.pid, here), _labelled_container(client, dead.pid, "elsewhere"),
                running]
        made += keep
        script = ("from envhub.sandboxes import new_sandbox\n"
                  "sb = new_sandbox('docker')\n"
                  "assert sb.exec('echo ok').stdout.strip() == 'ok'\n"
                  "sb.close()\n")
        subprocess.run([sys.executable, "-c", script], check=True, timeout=120, capture_output=True)
        left = {row["Id"] for row in client.api.containers(all=True, filters={"label": "envhub.owned=1"})}
        assert [c for c in made if c in left] == keep
    finally:
        live.kill()
        live.wait()
        for cid in made:
            with contextlib.suppress(Exception):
                client.api.remove_container(cid, force=True)


def test_a_reused_pid_does_not_keep_a_dead_owners_container():
    """A live process holds the pid now but started after the container was made: not its owner."""
    from envhub.sandboxes.dockerapi import LABEL_HOST, LABEL_OWNED, LABEL_PID
    from envhub.sandboxes.leftovers import owner_gone

    live = subprocess.Popen(["sleep", "60"])
    try:
        labels = {LABEL_OWNED: "1", LABEL_PID: str(live.pid), LABEL_HOST: socket.gethostname()}
        assert owner_gone(labels, created=1.0e9)  # made in 2001, long before this process started
        assert not owner_gone(labels, created=4.0e9)  # made after it started: it may be the owner
        assert not owner_gone({**labels, LABEL_PID: str(os.getpid())}, created=1.0e9)  # never our own
        assert not owner_gone({**labels, LABEL_HOST: "elsewhere"}, created=1.0e9)
        assert not owner_gone({**labels, LABEL_PID: "x"}, created=1.0e9)
    finally:
        live.kill()
        live.wait()


def test_closing_a_pool_while_it_starts_a_refill_never_joins_an_unstarted_thread():
    """The SIGTERM cleanup's "cannot join thread before it is started": close() raced the refill."""
    import threading

    from envhub.sandboxes import SandboxPool

    errors: list[BaseException] = []
    for _ in range(300):
        pool = SandboxPool("process", size=0, prestart=False)
        refill = threading.Thread(target=lambda p=pool: _record_errors(p._refill_in_background, errors))
        refill.start()
        _record_errors(pool.close, errors)
        refill.join()
    assert not errors, errors[:3]


def _record_errors(call, errors: list[BaseException]) -> None:
    try:
        call()
    except BaseException as exc:
        errors.append(exc)


def test_resuming_with_another_group_size_is_refused(tmp_path):
    out = tmp_path / "run"
    policy = make_policy("gold")
    run_rollouts("envhub/Computation-v0", policy, episodes=2, group_size=1, out_dir=out,
                 env_kwargs={"sandbox": "process"})
    assert json.loads((out / "run.json").read_text())["group_size"] == 1
    with pytest.raises(ValueError, match="group_size"):
        run_rollouts("envhub/Computation-v0", policy, episodes=4, group_size=2, out_dir=out,
                     env_kwargs={"sandbox": "process"})


KILLED_HOLDER = """
import os, sys, time
from envhub.sandboxes import SandboxSpec, create_sandbox
sb = create_sandbox("process", SandboxSpec(), pool=0)
sb.exec(["true"])
print(os.path.dirname(sb.workdir), flush=True)
time.sleep(60)
"""


def test_scratch_dirs_of_a_killed_process_sandbox_are_swept_at_the_next_start(tmp_path):
    """kill -9 runs no cleanup: the next process sandbox anywhere on the machine removes what a
    dead owner left, never a live process's directory."""
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    holder = subprocess.Popen([sys.executable, "-c", KILLED_HOLDER], stdout=subprocess.PIPE, text=True, env=env)
    dead = Path(holder.stdout.readline().strip())
    assert dead.is_dir() and dead.parent == tmp_path
    holder.kill()
    holder.wait()
    live = subprocess.Popen([sys.executable, "-c", KILLED_HOLDER], stdout=subprocess.PIPE, text=True, env=env)
    try:
        alive = Path(live.stdout.readline().strip())  # its own start swept the dead one's
        assert alive.is_dir() and not dead.exists()
        again = subprocess.run([sys.executable, "-c", KILLED_HOLDER.replace("time.sleep(60)", "")], env=env,
                               capture_output=True, text=True, timeout=60)
        assert again.returncode == 0 and alive.is_dir()  # a live owner's directory stays
    finally:
        live.kill()
        live.wait()
