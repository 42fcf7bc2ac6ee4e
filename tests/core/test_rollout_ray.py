"""The Ray rollout backend on a local 2-CPU Ray cluster: the same records as in process, workers
killed mid-run (every episode accounted for; env_error or re-dispatched, never a policy outcome),
a worker that keeps dying quarantined, no container left behind, and the CLI's --backend ray."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import ray
from sandbox_fixtures import require_backend
from typer.testing import CliRunner

from envhub.cli.commands import app
from envhub.policies import GoldPolicy
from envhub.rollout.bench_concurrency import ENV_ID, SleepyEnv, run_bench
from envhub.rollout.episodes import plan_episodes
from envhub.rollout.ray_backend import REDISPATCHED_KEY, WORKER_DIED, RayCollector, RayEnvSpec
from envhub.rollout.runner import run_rollouts
from envhub.types import Outcome

FAST = {"tool_s": 0.02, "tool_calls": 2}
SLOW = {"tool_s": 0.1, "tool_calls": 3}  # 0.3 s an episode: a kill always finds one in flight


@pytest.fixture(scope="module", autouse=True)
def ray_cluster() -> Any:
    ray.init(num_cpus=2, include_dashboard=False, object_store_memory=100 * 1024**2, log_to_driver=False,
             configure_logging=False)
    yield
    ray.shutdown()


def spec(**kwargs: Any) -> RayEnvSpec:
    return RayEnvSpec(ENV_ID, kwargs=kwargs, imports=("envhub.rollout.bench_concurrency",))


def rollout(tmp_path: Path, name: str, kwargs: dict[str, Any], episodes: int, collector: Any = None,
            on_episode: Any = None, group_size: int = 1) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    result = run_rollouts(ENV_ID, None if collector else GoldPolicy(), out_dir=tmp_path / name, episodes=episodes,
                          group_size=group_size, concurrency=2, env_kwargs=kwargs, collector=collector,
                          on_episode=on_episode)
    rows = [json.loads(line) for line in result.trajectories.read_text().splitlines()]
    return result.report, rows


def assert_accounted(report: dict[str, Any], rows: list[dict[str, Any]], planned: int) -> None:
    """attempted = success + policy failures + truncations + infra, and every plan has one record."""
    assert report["planned"] == planned == report["attempted"] == len({r["episode_id"] for r in rows}) == len(rows)
    assert sum(report["by_class"].values()) == report["attempted"]


@pytest.mark.slow
def test_import_envhub_imports_no_ray() -> None:
    code = ("import envhub, envhub.rollout.runner, envhub.rollout.collect, envhub.cli.commands, envhub.rollout.ray_backend, "
            "envhub.rollout.bench_concurrency, sys; assert 'ray' not in sys.modules, 'ray imported'")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_ray_backend_matches_local_records(tmp_path: Path) -> None:
    local, local_rows = rollout(tmp_path, "local", FAST, 8, group_size=2)
    remote, remote_rows = rollout(tmp_path, "ray", FAST, 8, group_size=2,
                                  collector=RayCollector(spec(**FAST), "gold", concurrency=4))

    def view(rows: list[dict[str, Any]]) -> dict[str, tuple[Any, ...]]:
        return {r["episode_id"]: (r["task_id"], r["group_id"], r["sample_index"], r["outcome"], r["reward"],
                                  r["num_turns"], [m["content"] for m in r["messages"]]) for r in rows}

    assert view(remote_rows) == view(local_rows)
    assert remote["by_outcome"] == local["by_outcome"] and local["by_outcome"]["success"] == 8
    assert remote["policy"] == local["policy"] == "gold"
    assert remote["backend"] == "ray" and "ray" not in local
    assert remote["ray"] == {"workers": 2, "slots_per_worker": 2, "restarts": 0, "deaths": 0, "quarantined": [],
                             "restarting": [], "redispatched": 0}


def kill_worker_once(collector: RayCollector, index: int) -> tuple[Any, list[int]]:
    """An ``on_episode`` callback that SIGKILLs worker ``index`` when the first record arrives
    (the collector has given every worker its next episode by then); the pid killed."""
    killed: list[int] = []

    def on_episode(_record: Any) -> None:
        if not killed:
            pid = collector.worker_pids()[index]
            assert pid is not None
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)

    return on_episode, killed


@pytest.mark.slow
def test_killed_worker_ends_its_episode_as_env_error_and_restarts(tmp_path: Path) -> None:
    collector = RayCollector(spec(**SLOW), "gold", concurrency=2)
    on_episode, killed = kill_worker_once(collector, 0)
    report, rows = rollout(tmp_path, "killed", SLOW, 12, collector=collector, on_episode=on_episode)
    assert killed
    assert_accounted(report, rows, 12)
    lost = [r for r in rows if r["outcome"] != "success"]
    assert len(lost) == 1 and report["by_class"]["infra_failure"] == 1  # one slot per worker
    assert lost[0]["outcome"] == Outcome.ENV_ERROR.value  # never a policy outcome, never reward 0 as "wrong"
    assert lost[0]["outcome_detail"].startswith(f"{WORKER_DIED}: rollout worker 0 (pid {killed[0]}")
    assert report["by_outcome"]["success"] == 11
    stats = report["ray"]
    assert stats["deaths"] == 1 and stats["quarantined"] == [] and stats["redispatched"] == 0
    assert stats["restarts"] + len(stats["restarting"]) == 1  # Ray brings it back (max_restarts)


@pytest.mark.slow
def test_killed_worker_episode_is_redispatched_once_when_configured(tmp_path: Path) -> None:
    collector = RayCollector(spec(**SLOW), "gold", concurrency=2, redispatch=True)
    on_episode, killed = kill_worker_once(collector, 1)
    report, rows = rollout(tmp_path, "redispatched", SLOW, 12, collector=collector, on_episode=on_episode)
    assert killed
    assert_accounted(report, rows, 12)
    assert report["by_outcome"]["success"] == 12  # the lost episode ran again, on the other worker
    again = [r for r in rows if r["metrics"]["extra"].get(REDISPATCHED_KEY)]
    assert len(again) == 1 and again[0]["metrics"]["extra"][REDISPATCHED_KEY] == 1.0
    assert report["ray"]["redispatched"] == 1 and report["ray"]["deaths"] == 1


@pytest.mark.slow
def test_worker_that_keeps_dying_is_quarantined_and_every_plan_still_has_a_record(tmp_path: Path) -> None:
    """One worker that dies in every episode: restarted once, then quarantined; the episode it was
    re-dispatched with ends as env_error saying so, and the plans left say no worker is left."""
    kwargs = {**SLOW, "die_on_worker": 0}
    collector = RayCollector(spec(**kwargs), "gold", concurrency=1, workers=1, redispatch=True,
                             quarantine_after=2)
    report, rows = rollout(tmp_path, "quarantined", kwargs, 4, collector=collector)
    assert_accounted(report, rows, 4)
    assert report["by_outcome"]["env_error"] == 4
    assert all(r["outcome_detail"].startswith(WORKER_DIED) for r in rows)
    twice = [r for r in rows if "re-dispatched once; then" in r["outcome_detail"]]
    assert len(twice) == 1 and twice[0]["metrics"]["extra"][REDISPATCHED_KEY] == 1.0
    assert sum("no Ray rollout worker left" in r["outcome_detail"] for r in rows) == 3
    stats = report["ray"]
    assert stats["deaths"] == 2 and stats["restarts"] == 1 and stats["redispatched"] == 1
    assert [(q["worker"], q["deaths"], q["reason"]) for q in stats["quarantined"]] == [(0, 2, "died 2 times")]


@pytest.mark.slow
def test_run_consumes_plans_like_the_in_process_collector(tmp_path: Path) -> None:
    """``run`` again and again on one collector (as the trainer does each step), ``stop``, and an
    iterator closed early."""
    import threading

    plans = plan_episodes(ENV_ID, SleepyEnv().tasks.task_ids("train"), episodes=12)
    with RayCollector(spec(**FAST), "gold", concurrency=2) as collector:
        first = list(collector.run(plans[:3]))
        second = list(collector.run(plans[3:6]))
        assert sorted(r.episode_id for r in first + second) == sorted(p.episode_id for p in plans[:6])
        stop = threading.Event()
        stopped = []
        for record in collector.run(plans, stop=stop):
            stopped.append(record)
            stop.set()
        # the first record, then at most those in flight (2) and those done but not yet yielded (1)
        assert 1 <= len(stopped) <= 4
        abandoned = collector.run(plans)
        next(abandoned)
        abandoned.close()  # the episodes in flight are dropped; the collector goes on
        assert len(list(collector.run(plans[:2]))) == 2


@pytest.mark.slow
@pytest.mark.docker
def test_killed_worker_leaves_no_container_behind(tmp_path: Path) -> None:
    require_backend("docker")
    from envhub.sandboxes.docker_backend import owned_containers
    from envhub.sandboxes.dockerapi import LABEL_PID

    env = "envhub/Computation-v0"
    kwargs = {"sandbox": "docker", "sandbox_pool": 1}
    collector = RayCollector(RayEnvSpec(env, kwargs=kwargs), "gold", concurrency=2)
    pids = {str(p) for p in collector.worker_pids().values()}
    on_episode, killed = kill_worker_once(collector, 0)
    result = run_rollouts(env, None, out_dir=tmp_path / "docker", episodes=6, concurrency=2, env_kwargs=kwargs,
                          collector=collector, on_episode=on_episode)
    assert killed and result.report["attempted"] == 6
    assert result.report["by_outcome"]["success"] + result.report["by_outcome"]["env_error"] == 6
    assert result.report["by_outcome"]["env_error"] == 1  # the one episode the killed worker was running
    pids |= {str(p) for p in collector.worker_pids().values()}

    def left() -> list[str]:
        return [c.id[:12] for c in owned_containers() if c.labels.get(LABEL_PID) in pids]

    deadline = time.monotonic() + 20  # a killed owner's running containers remove themselves
    while left() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert left() == []


@pytest.mark.slow
def test_cli_rollout_backend_ray(tmp_path: Path) -> None:
    runner = CliRunner()
    out = tmp_path / "cli"
    args = ["rollout", "envhub/Computation-v0", "--policy", "noop", "--episodes", "4", "--sandbox", "process",
            "--out", str(out), "--no-progress"]
    done = runner.invoke(app, [*args, "--backend", "ray", "--concurrency", "2"])
    assert done.exit_code == 0, done.output
    report = json.loads((out / "report.json").read_text())
    assert report["backend"] == "ray" and report["ray"]["workers"] == 2
    assert report["by_class"]["policy_failure"] == 4 and "ray: 2 workers, 0 deaths" in done.output
    for bad, message in ([["--backend", "spark"], "unknown --backend 'spark'"],
                         [["--address", "auto"], "--address is the Ray cluster of --backend ray"],
                         [["--backend", "ray", "--remote", "http://127.0.0.1:1"], "does not combine"],
                         [["--backend", "ray", "--policy", "nosuch"], "unknown policy 'nosuch'"]):
        failed = runner.invoke(app, [*args, "--out", str(tmp_path / "bad"), *bad])
        assert failed.exit_code == 2 and message in failed.output, failed.output


@pytest.mark.slow
def test_bench_concurrency_measures_both_sides() -> None:
    lines: list[str] = []
    figures = run_bench(out=lines.append, episodes=16, concurrency=8, tool_calls=2, tool_s=0.05)
    assert figures["in_process_success"] == figures["ray_success"] == 16
    for side in ("in_process", "ray"):  # the ideal is a bound: no side can beat it
        assert 0 < figures[f"{side}_ratio"] <= 1.0
    assert any("of ideal" in line and "through Ray" in line for line in lines)
