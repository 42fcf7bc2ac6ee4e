"""The in-sandbox probe runner: isolation, containment and speed, on the host and in real sandboxes.

The runner runs the hand-made project of ``tests/probe_scenarios.py`` -- ordinary tests, cases,
fixtures and ``raises``, then every way a submission can misbehave (hang, flood, fork bomb, a
setsid'd double-forked writer, forged frames, failing imports, ``os._exit`` at import, ``sys.exit``
in a test, signals to the runner) -- as a plain subprocess on the host and, through ``exec`` and
``exec_python``, inside real docker and bwrap sandboxes. Every test must be reported once with the
exact status and observations, and the runner must end (a hang guard: a run takes about 2.5 s, the
hanging test's ``TIMEOUT_S`` and start-up).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import sandbox_fixtures
from probe_scenarios import (
    BOMB,
    MODULES,
    PLAN,
    RUNNER,
    RUNNER_SOURCE,
    SRC,
    TESTS,
    check_attacks,
    int_enc,
    parse,
    project,
)
from sandbox_fixtures import backend_params, get_sandbox

from envhub.sandboxes import SandboxSpec
from envhub.sandboxes.base import Limits
from envhub.verifiers.probes import reaper

LIMITS = Limits(cpus=1.0, memory_mb=512, pids=64, timeout_s=60.0, output_bytes=1 << 20, disk_mb=64)
#: a hang guard on a runner's run of the attack project, which takes about 2.5 s (on the host or in a
#: sandbox): ten times that and more
HANG_GUARD_S = 30.0
sandboxes = sandbox_fixtures.sandboxes


EXEC_STYLE = ("import sys; exec(compile(open(sys.argv[1]).read() + '\\nimport sys; sys.exit(main(sys.argv[2]))',"
              " 'runner', 'exec'), {'__name__': 'envhub_probe_runner'})")


@pytest.mark.slow
@pytest.mark.parametrize("style", ["script", "exec"])
def test_runner_on_the_host_reports_every_attack_once(tmp_path: Path, style: str) -> None:
    for rel, text in project(TESTS, MODULES, SRC, skip={BOMB}).items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text, encoding="utf-8")
    argv = [sys.executable, "-I", RUNNER, PLAN] if style == "script" else [sys.executable, "-I", "-c", EXEC_STYLE,
                                                                           RUNNER, PLAN]
    bystander = subprocess.Popen(["sleep", "60"])  # same uid, not the runner's descendant: must survive
    t0 = time.monotonic()
    try:
        proc = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=60)
        wall = time.monotonic() - t0
        assert bystander.poll() is None
    finally:
        bystander.kill()
        bystander.wait()
    assert proc.returncode == 0, proc.stderr
    root = os.geteuid() == 0  # root may open a non-dumpable process's fds; a sandbox's uid may not
    records = parse(proc.stdout, set(range(len(TESTS))) - {BOMB}, forged_ok=root)
    check_attacks(records, "opened" if root else "denied", bomb=False)
    assert wall < HANG_GUARD_S, f"the runner stalled: {wall:.1f}s"


def test_runner_rejects_a_bad_plan(tmp_path: Path) -> None:
    (tmp_path / "plan.json").write_text(json.dumps({"probe_dir": ".", "batches": [
        {"module": "m.py", "tests": [{"index": 1, "function": "f"}, {"index": 1, "function": "g"}]}]}))
    (tmp_path / RUNNER).parent.mkdir()
    (tmp_path / RUNNER).write_text(RUNNER_SOURCE)
    proc = subprocess.run([sys.executable, "-I", RUNNER, "plan.json"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=30)
    assert proc.returncode == 2 and "test index 1 appears twice" in proc.stderr and proc.stdout == ""


def test_each_batch_has_its_deadline_and_the_run_one_budget(tmp_path: Path) -> None:
    """A stalled batch ends at its own deadline; once the run's budget is spent, the batch running
    then ends and later ones run nothing: the runner reports every test, in about the budget."""
    order = [("test_hang", "test_hang", {}), ("test_hang", "test_never", {}), ("test_alive", "test_alive", {}),
             ("test_hang", "test_hang", {}), ("test_alive", "test_alive", {})]
    files = project(order, MODULES, SRC)
    body = json.loads(files[PLAN])
    for batch, limit in zip(body["batches"], (1.0, 1.0, 30.0, 30.0), strict=True):
        batch["timeout_s"] = limit
    files[PLAN] = json.dumps({**body, "budget_s": 1.8})
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text, encoding="utf-8")
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-I", RUNNER, PLAN], cwd=tmp_path, capture_output=True, text=True,
                          timeout=60)
    wall = time.monotonic() - t0
    records = parse(proc.stdout, set(range(len(order))))
    got = {i: (r["status"], r["detail"]) for i, r in records.items()}
    assert got[0] == ("timeout", "the batch ran past its 1s limit") and records[0]["observations"] == [[1, int_enc(1)]]
    assert got[1] == ("timeout", "not run: the batch ran past its 1s limit")
    assert got[2] == ("ok", "")
    assert got[3] == ("timeout", "the run's grading budget of 1.8s was spent"), got  # its 30 s cut to the budget
    assert got[4] == ("timeout", "not run: the run's grading budget of 1.8s was spent"), got
    # spent, not skipped: the budget is a floor; the ceiling is a hang guard (the run takes ~1.9 s)
    assert 1.8 <= wall < 20, f"the run took {wall:.1f}s for a budget of 1.8s"


def test_kills_only_descendants() -> None:
    assert not reaper.descends_from(os.getppid(), os.getpid())
    assert reaper.descends_from(os.getpid(), os.getppid())
    assert os.getpid() not in reaper.descendants(os.getpid())


# ---- inside real sandboxes ------------------------------------------------------------------------

def _sandbox(opened: dict[str, Any], backend: str) -> Any:
    return get_sandbox(opened, backend, SandboxSpec(limits=LIMITS, role="grading",
                                                    preload=("decimal", "fractions", "json")))


def _run(sb: Any, mode: str, cwd: str) -> Any:
    if mode == "exec":
        return sb.exec(["python3", "-I", RUNNER, PLAN], cwd=cwd, timeout=60)
    return sb.exec_python(RUNNER_SOURCE + f"\nimport sys; sys.exit(main({PLAN!r}))", cwd=cwd, timeout=60)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["exec", "exec_python"])
@pytest.mark.parametrize("backend", backend_params("docker", "bwrap"))
def test_runner_in_a_sandbox_contains_every_attack(sandboxes: dict[str, Any], backend: str, mode: str) -> None:
    sb = _sandbox(sandboxes, backend)
    sb.write_files({f"{mode}/{rel}": text for rel, text in project(TESTS, MODULES, SRC).items()})
    result = _run(sb, mode, mode)
    assert result.exit_code == 0 and not result.truncated, result.summary()[-3000:]
    check_attacks(parse(result.stdout, set(range(len(TESTS)))), "denied", bomb=True)
    assert result.duration_s < HANG_GUARD_S, f"the runner stalled: {result.duration_s:.1f}s"
    left = sb.exec(["python3", "-c", "import os; print(sum(p.isdigit() for p in os.listdir('/proc')))"])
    assert left.stdout == "2\n", sb.exec("ps -eo pid,ppid,args").stdout  # the executor and this python


TIMING_MODULE = """
    from envhub_probe import cases, observe
    import shop
    @cases("n", [1, 2, 3])
    def test_f{n}(n):
        cart = shop.Cart()
        cart.add("a", n)
        observe(cart.count(), 1)
        observe(cart.items, 2)
        observe([n, "x", 1.5], 3)
    """


@pytest.mark.parametrize("backend", backend_params("docker", "bwrap"))
def test_thirty_test_functions_take_little_runner_time(sandboxes: dict[str, Any], backend: str) -> None:
    """One batch per test function (as the grader plans them), three cases each, via exec_python."""
    sb = _sandbox(sandboxes, backend)
    modules = {f"test_t{n}": TIMING_MODULE.format(n=n) for n in range(30)}
    tests = [(f"test_t{n}", f"test_f{n}", {"n": row}) for n in range(30) for row in range(3)]
    files = {f"timing/{rel}": text for rel, text in project(tests, modules, SRC).items()}
    for _ in range(3):
        sb.write_files(files)  # the runner takes its probes off the disk: each run gets them anew
        result = _run(sb, "exec_python", "timing")
        records = parse(result.stdout, set(range(90)))
        assert all(r["status"] == "ok" for r in records.values())
        assert records[0]["observations"][2] == [3, ["list", [int_enc(1), ["str", "x"], ["float", "1.5"]]]]
        stats = [json.loads(line) for line in result.stderr.splitlines() if line.startswith('{"batch"')]
        batches = sum(s["run_s"] + s["kill_s"] for s in stats)
        cpu = sum(s["cpu_s"] for s in stats)
        assert len(stats) == 30
        print(f"\n{backend}: 30 batches of 3 tests: {batches * 1000:.1f} ms wall in batches "
              f"({batches / 30 * 1000:.2f} ms per batch, CPU {cpu / 30 * 1000:.2f} ms per batch), "
              f"{result.duration_s * 1000:.1f} ms runner wall")


SNOOP_SRC = {"snoop.py": '''
import gc, os

def find(secret):
    """True if ``secret`` is anywhere this process can read: files under the grading dir, or memory."""
    for root, _, names in os.walk("."):
        for name in names:
            try:
                with open(os.path.join(root, name), "rb") as fh:
                    if secret.encode() in fh.read():
                        return True
            except OSError:
                pass
    try:
        objects = gc.get_objects()
    except RuntimeError:  # the probe runtime's audit hook refuses the object graph
        objects = []
    for obj in objects:
        consts = getattr(obj, "co_consts", ())
        if any(isinstance(c, str) and secret in c for c in consts):
            return True
        if isinstance(obj, (bytes, bytearray)) and secret.encode() in obj:
            return True
    return False
'''}
SNOOP_MODULES = {
    "test_a": """
        from envhub_probe import observe
        from snoop import find

        def test_a():
            observe(find("SECRET" + "-OF-B"), 0)
    """,
    "test_b": """
        from envhub_probe import cases, observe

        @cases("row", ["SECRET-OF-B"])
        def test_b(row):
            observe(len(row), 0)
    """,
}


@pytest.mark.parametrize("backend", backend_params("docker", "bwrap"))
def test_no_child_can_read_another_tests_probe(sandboxes: dict[str, Any], backend: str) -> None:
    """One test's inputs may be another's expected values: the probes leave the disk before anything
    submitted runs, and each child blanks every other test's probe in its memory."""
    sb = _sandbox(sandboxes, backend)
    tests = [("test_a", "test_a", {}), ("test_b", "test_b", {"row": 0})]
    sb.write_files({f"snoop/{rel}": text for rel, text in project(tests, SNOOP_MODULES, SNOOP_SRC).items()})
    result = _run(sb, "exec_python", "snoop")
    records = parse(result.stdout, {0, 1})
    assert records[0]["status"] == "ok" and records[0]["observations"] == [[0, ["bool", False]]]
    assert records[1]["observations"] == [[0, int_enc(len("SECRET-OF-B"))]]
    left = sb.exec(["sh", "-c", "ls snoop/.envhub_probe/tests/ 2>/dev/null | wc -l"]).stdout.strip()
    assert left == "0"
