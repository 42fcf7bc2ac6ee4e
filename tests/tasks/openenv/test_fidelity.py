"""``envhub verify openenv:URL``: the fidelity checks of a hosted env against real server processes --
our Computation env served by ``python -m envhub.server`` (honest, with an oracle), and OpenEnv MCP
environments whose grading is wrong on purpose (``rigged_mcp_app.py``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from collections.abc import Iterator

import pytest

import envhub
from envhub.server.testing import serve_command_in_subprocess, serve_in_subprocess

pytest.importorskip("fastapi")
pytest.importorskip("openenv.core")

from envhub.tasks.openenv.fidelity import fidelity_plan
from envhub.verifiers.fidelity import FidelityReport, run_fidelity

HERE = os.path.dirname(os.path.abspath(__file__))
ENV_ID = "envhub/Computation-v0"
GENERIC = {"oracle", "nothing_done", "empty_answer", "huge_action", "malformed", "wrong_types"}


@pytest.fixture(autouse=True)
def _quiet_process_backend() -> Iterator[None]:
    with warnings.catch_warnings():  # the process backend's warning is expected here
        warnings.simplefilter("ignore", RuntimeWarning)
        yield


@pytest.fixture(scope="module")
def honest_url() -> Iterator[str]:
    # gold exposed: the bridge gets an oracle from the server. At the server's default 1 MiB message
    # limit the 1 MB huge action must still be the agent's (the bridge refuses it unsent)
    serve = [ENV_ID, "--sandbox", "process", "--expose-gold"]
    with serve_in_subprocess(serve) as (base, _proc):
        yield base


def _rigged(mode: str) -> Iterator[str]:
    pytest.importorskip("fastmcp")
    cmd = [sys.executable, "-m", "uvicorn", "rigged_mcp_app:app", "--host", "127.0.0.1", "--port", "0"]
    with serve_command_in_subprocess(cmd, cwd=HERE, env={**os.environ, "RIGGED_MODE": mode}) as (base, _proc):
        yield base


@pytest.fixture(scope="module")
def noop_rewarding_url() -> Iterator[str]:
    yield from _rigged("noop")


@pytest.fixture(scope="module")
def flaky_url() -> Iterator[str]:
    yield from _rigged("flaky")


def _fidelity(url: str, *, tasks: int, episodes: int, **env_args: object) -> FidelityReport:
    with envhub.make("openenv:" + url, **env_args) as env:
        ids = list(env.tasks.task_ids("train"))[:tasks]
        oracle, extra = fidelity_plan(env, episodes=episodes)
        return run_fidelity(env, ids, oracle=oracle, extra_checks=extra)


def _rows(report: FidelityReport, check: str) -> list:
    return [r for r in report.results if r.check == check or r.check.startswith(check + ":")]


def test_the_honest_server_passes_every_check_from_the_command_line(honest_url: str):
    cmd = [sys.executable, "-W", "ignore", "-m", "envhub.cli", "verify", "openenv:" + honest_url,
           "--limit", "2", "--episodes", "3", "--json"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads(done.stdout)
    assert report["env_id"] == "openenv:" + honest_url and report["fail"] == 0 and report["skip"] == 0
    assert len(report["tasks"]) == 2
    rows = [r for task_rows in report["tasks"].values() for r in task_rows]
    for task_rows in report["tasks"].values():
        assert {r["check"] for r in task_rows} >= GENERIC
    oracle = [r for r in rows if r["check"] == "oracle"]
    assert [r["got"] for r in oracle] == ["success, reward 1"] * 2  # the server's gold, through the bridge
    agreement = [r for r in rows if r["check"].startswith("agreement:")]
    assert len(agreement) == 3 and {r["status"] for r in agreement} == {"pass"}
    assert agreement[0]["check"] == "agreement:oracle" and "agree step by step" in agreement[0]["detail"]


def test_a_server_that_rewards_the_empty_answer_fails_the_floor(noop_rewarding_url: str):
    report = _fidelity(noop_rewarding_url, tasks=2, episodes=2, terminal_tool="answer")
    floor = _rows(report, "empty_answer")
    assert len(floor) == 2 and all(r.status == "fail" and r.got == "success, reward 1" for r in floor)
    # what needs no such flaw still passes: no infra from huge or malformed actions, agreement holds
    for check in ("nothing_done", "huge_action", "malformed", "wrong_types", "agreement"):
        assert {r.status for r in _rows(report, check)} == {"pass"}, check
    # an OpenEnv server has no reference solution: the oracle is skipped, not failed
    assert {(r.status, r.got) for r in _rows(report, "oracle")} == {("skip", "no oracle")}
    assert report.failures == 2


def test_a_server_that_grades_sessions_differently_fails_agreement(flaky_url: str):
    report = _fidelity(flaky_url, tasks=1, episodes=3, terminal_tool="answer")
    agreement = _rows(report, "agreement")
    assert len(agreement) == 3 and all(r.status == "fail" for r in agreement)
    assert all("GenericEnvClient" in r.detail for r in agreement)  # names the request where they part


def test_the_command_prints_a_table_and_exits_1_on_a_failed_check(noop_rewarding_url: str):
    cmd = [sys.executable, "-W", "ignore", "-m", "envhub.cli", "verify", "openenv:" + noop_rewarding_url,
           "--limit", "1", "--episodes", "0", "--env-arg", "terminal_tool=answer"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env={**os.environ, "COLUMNS": "200"})
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    assert "fidelity: openenv:" in done.stdout and "empty_answer" in done.stdout and "fail" in done.stdout
    assert "no oracle" in done.stdout
