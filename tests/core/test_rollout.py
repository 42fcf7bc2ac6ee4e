import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sandbox_fixtures import backend_params, require_backend

import envhub
from envhub.parsing import format_tool_call
from envhub.policies import GoldPolicy, ScriptedPolicy, make_policy
from envhub.rollout.runner import plan_episodes, run_episode, run_rollouts
from envhub.store import JsonlStore, read_jsonl
from envhub.types import Outcome, TrajectoryRecord

ENV = "envhub/Computation-v0"


def test_gold_rollout_succeeds_on_every_episode(tmp_path):
    result = run_rollouts(ENV, make_policy("gold"), out_dir=tmp_path, episodes=50, concurrency=4)
    report = result.report
    assert report["attempted"] == 50 and report["strict_success_rate"] == 1.0
    assert report["by_class"]["infra_failure"] == 0
    assert report["tool_calls"] == 100 and report["tool_calls_per_success"] == 2.0
    records = [TrajectoryRecord.model_validate(r) for r in read_jsonl(tmp_path / "trajectories.jsonl")]
    assert len({r.episode_id for r in records}) == 50
    for rec in records:
        run, answer = rec.turns
        assert run.tool_calls[0].name == "python" and answer.tool_calls[0].name == "answer"
        printed = run.observation[0].content
        assert "exit code" not in printed and "Error" not in printed
        if rec.task_id.startswith(("comp-bigint", "comp-fraction", "comp-linear")):
            assert printed.strip() == answer.tool_calls[0].arguments["answer"]  # computed in the sandbox
    saved = json.loads((tmp_path / "report.json").read_text())
    for key in ("attempted", "by_outcome", "by_class", "strict_success_rate", "success_rate_excluding_infra",
                "tokens", "tool_calls", "wall_seconds", "tokens_per_success", "tool_calls_per_success"):
        assert key in saved


@pytest.mark.parametrize("backend", backend_params("docker", "bwrap"))
def test_the_python_tool_runs_in_the_chosen_sandbox_and_the_record_names_it(tmp_path, backend):
    """The tool's code runs inside the selected sandbox (a fact only true in there), and each
    record's versions name the sandbox image -- for docker down to its image id."""
    require_backend(backend)
    code = "import os, socket; print(os.getuid(), socket.gethostname(), os.getcwd())"
    whoami = ScriptedPolicy([format_tool_call("python", {"code": code}), format_tool_call("answer", {"answer": "0"})],
                            name="whoami")
    result = run_rollouts(ENV, whoami, out_dir=tmp_path, episodes=2, concurrency=1,
                          env_kwargs={"sandbox": backend})
    assert result.report["by_class"]["infra_failure"] == 0
    for rec in (TrajectoryRecord.model_validate(r) for r in read_jsonl(tmp_path / "trajectories.jsonl")):
        uid, _host, cwd = rec.turns[0].observation[0].content.split()
        assert cwd.startswith("/work") and cwd != os.getcwd() and uid != str(os.getuid()), (uid, cwd)
        image = rec.versions.sandbox_image or ""
        if backend == "docker":
            assert image.startswith("docker:envhub/base:") and "@sha256:" in image, image
        else:
            assert image == "bwrap:host", image


def test_noop_rollout_fails_every_episode_as_policy_failure(tmp_path):
    report = run_rollouts(ENV, make_policy("noop"), out_dir=tmp_path, episodes=50).report
    assert report["strict_success_rate"] == 0.0
    assert report["by_class"]["policy_failure"] == 50


def test_random_rollout_has_no_infra_failure(tmp_path):
    report = run_rollouts(ENV, make_policy("random"), out_dir=tmp_path, episodes=40, seed=3).report
    assert report["attempted"] == 40
    assert report["by_class"]["infra_failure"] == 0, report["by_outcome"]


def test_groups_share_a_task_and_ids_are_stable():
    ids = [f"t{i}" for i in range(10)]
    plans = plan_episodes(ENV, ids, episodes=12, group_size=4, seed=1)
    assert len(plans) == 12 and len({p.group_id for p in plans}) == 3
    for g in {p.group_id for p in plans}:
        members = [p for p in plans if p.group_id == g]
        assert len({p.task_id for p in members}) == 1 and [p.sample_index for p in members] == [0, 1, 2, 3]
    assert plans == plan_episodes(ENV, ids, episodes=12, group_size=4, seed=1)
    with pytest.raises(ValueError, match="multiple of --group-size"):
        plan_episodes(ENV, ids, episodes=10, group_size=4)


def test_an_exception_inside_one_episode_is_that_episodes_env_error(tmp_path):
    class Exploding:
        name = "exploding"

        def describe(self):
            return {}

        def start(self, env, obs, *, seed):
            if env.episode.task.task_id.endswith("7"):
                raise RuntimeError("boom in agent start")
            return GoldPolicy().start(env, obs, seed=seed)

    result = run_rollouts(ENV, Exploding(), out_dir=tmp_path, episodes=30, concurrency=3)
    records = list(read_jsonl(result.trajectories))
    assert len(records) == 30
    bad = [r for r in records if r["task_id"].endswith("7")]
    assert bad and all(r["outcome"] == "env_error" and "boom in agent start" in r["outcome_detail"] for r in bad)
    assert all(r["outcome"] == "success" for r in records if not r["task_id"].endswith("7"))
    assert result.report["strict_success_rate"] == (30 - len(bad)) / 30


def test_engine_failure_is_engine_error():
    class Agent:
        def act(self, obs):
            raise envhub.EngineError("server returned 503")

        def token_view(self):
            return None

    class Failing:
        name = "failing"

        def describe(self):
            return {}

        def start(self, env, obs, *, seed):
            return Agent()

    env = envhub.make(ENV)
    plan = plan_episodes(ENV, env.tasks.task_ids("train"), episodes=1)[0]
    record = run_episode(env, Failing(), plan, {})
    assert record.outcome is Outcome.ENGINE_ERROR and "503" in record.outcome_detail


def test_unwritable_out_is_a_clear_error(tmp_path):
    target = tmp_path / "ro"
    target.mkdir()
    target.chmod(0o500)
    if os.geteuid() == 0:  # root ignores mode bits; a file in the way is unwritable for everyone
        target = tmp_path / "file"
        target.write_text("x")
    with pytest.raises((PermissionError, OSError), match="cannot write to output directory"):
        run_rollouts(ENV, make_policy("noop"), out_dir=target / "sub" if os.geteuid() == 0 else target, episodes=1)


def test_store_repairs_a_torn_last_line_and_skips_duplicates(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text('{"episode_id": "a"}\n{"episode_id": "b", "tor')
    with JsonlStore(path) as store:
        assert store.keys == {"a"}
        store.append({"episode_id": "a"})
        store.append({"episode_id": "b"})
    assert path.read_text() == '{"episode_id": "a"}\n{"episode_id": "b"}\n'


@pytest.mark.slow
def test_kill_minus_9_mid_run_then_resume_completes_without_duplicates(tmp_path):
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "envhub.cli", "rollout", ENV, "--policy", "gold", "--episodes", "60",
           "--concurrency", "2", "--out", str(out), "--no-progress"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    path = out / "trajectories.jsonl"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if path.exists() and path.read_bytes().count(b"\n") >= 5:
            break
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    partial = path.read_bytes()
    done_before = partial.count(b"\n")
    assert 5 <= done_before < 60, "the run must be killed mid-way for this test to mean anything"
    subprocess.run(cmd, check=True, capture_output=True, timeout=300)
    data = path.read_bytes()
    assert data.endswith(b"\n")
    records = [json.loads(line) for line in data.splitlines()]
    ids = [r["episode_id"] for r in records]
    assert len(ids) == 60 == len(set(ids))
    report = json.loads((out / "report.json").read_text())
    assert report["attempted"] == 60 and report["strict_success_rate"] == 1.0
    assert report["skipped_already_done"] >= done_before - 1


def test_rerun_with_same_out_skips_everything(tmp_path):
    run_rollouts(ENV, make_policy("noop"), out_dir=tmp_path, episodes=6)
    again = run_rollouts(ENV, make_policy("noop"), out_dir=tmp_path, episodes=6)
    assert again.skipped == 6 and again.report["attempted"] == 6
    assert Path(tmp_path / "trajectories.jsonl").read_text().count("\n") == 6


def test_resuming_with_other_settings_is_refused_and_loses_nothing(tmp_path):
    """Episode ids do not name the policy: resuming a noop run with gold would skip every episode
    and label noop's results gold. The directory remembers what its episodes are."""
    run_rollouts(ENV, make_policy("noop"), out_dir=tmp_path, episodes=3)
    before = (tmp_path / "trajectories.jsonl").read_bytes()
    with pytest.raises(ValueError, match=r"another run.*policy"):
        run_rollouts(ENV, make_policy("gold"), out_dir=tmp_path, episodes=3)
    with pytest.raises(ValueError, match=r"another run.*split"):
        run_rollouts(ENV, make_policy("noop"), out_dir=tmp_path, episodes=3, split="validation")
    assert (tmp_path / "trajectories.jsonl").read_bytes() == before
    again = run_rollouts(ENV, make_policy("noop"), out_dir=tmp_path, episodes=5)  # same run, extended
    assert again.skipped == 3 and again.report["attempted"] == 5
    res = subprocess.run([sys.executable, "-m", "envhub.cli", "rollout", ENV, "--policy", "gold", "--episodes", "3",
                          "--out", str(tmp_path), "--no-progress"], capture_output=True, text=True, timeout=300)
    assert res.returncode == 2 and "another run" in res.stderr


def test_ctrl_c_stops_a_rollout_promptly_and_keeps_what_finished(tmp_path):
    proc = subprocess.Popen([sys.executable, "-m", "envhub.cli", "rollout", ENV, "--policy", "gold",
                             "--episodes", "5000", "--concurrency", "2", "--out", str(tmp_path), "--no-progress"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    path = tmp_path / "trajectories.jsonl"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and (not path.exists() or path.read_bytes().count(b"\n") < 5):
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    interrupted = time.monotonic()
    proc.wait(timeout=60)
    # a hang guard: the run ends ~0.3 s after the signal; running the other ~5000 episodes first takes minutes
    assert time.monotonic() - interrupted < 15
    done = [json.loads(line) for line in path.read_text().splitlines()]
    assert 5 <= len(done) < 5000 and all(r["outcome"] == "success" for r in done)


@pytest.mark.parametrize("backend", backend_params("docker", "bwrap"))
def test_a_sandbox_that_dies_mid_episode_is_env_error_not_the_agents_failure(backend):
    """The container (or bwrap process) is killed between two tool calls: that episode ends as
    env_error -- infrastructure, left out of the loss -- and the next episode runs normally."""
    require_backend(backend)
    env = envhub.make(ENV, sandbox=backend)
    task = env.tasks.get(env.tasks.task_ids("train")[0])
    env.reset(task_id=task.task_id)
    obs = env.step(format_tool_call("python", {"code": "print(6 * 7)"}))
    assert "42" in obs.messages[-1].content
    lease = env.episode.sandbox
    if backend == "docker":
        from envhub.sandboxes.dockerapi import docker_client

        docker_client().api.kill(lease.container_id)
    else:
        os.kill(lease.sandbox._proc.pid, signal.SIGKILL)
    for _ in range(50):  # the death is noticed at the next call
        obs = env.step(format_tool_call("python", {"code": "print(1)"}))
        if obs.done:
            break
        time.sleep(0.05)
    assert obs.done and obs.outcome is Outcome.ENV_ERROR, obs
    verdict = env.play(task.task_id, env.gold_actions)
    assert verdict.outcome is Outcome.SUCCESS
    env.close()
