"""``envhub.make("harbor:DIR")`` on tiny Harbor task directories (tasks/ here), with the real
Docker engine: images built offline ``FROM`` envhub's base image, one container per episode,
grading as Harbor does (tests copied in at submit, reward files read after a wipe).

The task dirs are copied to a temporary directory whose Dockerfiles name this checkout's base
image tag (``envhub.sandboxes.images.base_image_tag``), so a version bump does not break them.
"""

from __future__ import annotations

import json
import math
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from sandbox_fixtures import backend_problem

import envhub
from envhub.parsing import format_tool_call
from envhub.policies import GoldPolicy, NoopPolicy
from envhub.rollout.runner import run_rollouts
from envhub.tasks.harbor.env import HarborBridge
from envhub.tasks.harbor.grade import parse_reward
from envhub.tasks.harbor.task_dir import HarborTasks, NetworkMode, TaskConfig
from envhub.tasks.openenv.hosted_tasks import split_of
from envhub.types import Action, Outcome

TASKS = Path(__file__).resolve().parent / "tasks"
docker = pytest.mark.skipif(backend_problem("docker") is not None, reason="no Docker engine")


def call(name: str, **arguments: object) -> Action:
    return Action(text=format_tool_call(name, dict(arguments)))


@pytest.fixture(scope="module")
def task_set(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The task dirs, FROM this checkout's base image."""
    from envhub.sandboxes.images import base_image_tag

    root = tmp_path_factory.mktemp("harbor") / "tasks"
    shutil.copytree(TASKS, root)
    for dockerfile in root.glob("*/environment/Dockerfile"):
        dockerfile.write_text(re.sub(r"envhub/base:\S+", base_image_tag(), dockerfile.read_text()))
    return root


@pytest.fixture(scope="module")
def env(task_set: Path):
    made = envhub.make(f"harbor:{task_set}")
    assert isinstance(made, HarborBridge)
    yield made
    made.close()


# ---- task.toml and the task set (no Docker) ---------------------------------------------------------


def test_task_toml_parses_old_and_14_schemas_and_tolerates_unknown_keys():
    hello = TaskConfig.from_toml((TASKS / "hello" / "task.toml").read_text())
    assert hello.schema_version == "1.0"  # the old ``version`` key
    assert hello.verifier.user == "root" and hello.verifier.env == {"EXPECTED": "hello"}
    assert hello.agent.timeout_sec == 120.0 and hello.agent.user == "agent"
    assert (hello.environment.cpus, hello.environment.memory_mb) == (1, 512)
    assert hello.network_policy("agent") == (NetworkMode.NO_NETWORK, []) and hello.metadata["some_future_key"] == 3
    new = TaskConfig.from_toml((TASKS / "json-reward" / "task.toml").read_text())
    assert new.schema_version == "1.4" and new.verifier.environment_mode == "shared"
    assert new.environment.network_mode is NetworkMode.NO_NETWORK and new.network_policy("verifier")[0] == "no-network"
    assert TaskConfig.from_toml("").network_policy("agent") == ("public", [])  # Harbor's default: internet allowed
    phases = TaskConfig.from_toml('[environment]\nnetwork_mode = "allowlist"\nallowed_hosts = ["PyPI.org.", "10.0.0.0/8"]\n'
                                  '[verifier]\nnetwork_mode = "public"\n')
    assert phases.network_policy("agent") == ("allowlist", ["pypi.org", "10.0.0.0/8"])  # Harbor's normal form
    assert phases.network_policy("verifier") == ("public", [])  # a phase's own mode wins
    for bad, why in (('network_mode = "allowlist"\nallowed_hosts = ["https://pypi.org/simple"]', "allowed_hosts entry"),
                     ('allowed_hosts = ["pypi.org"]', "only valid with")):
        with pytest.raises(ValueError, match=why):
            TaskConfig.from_toml(f"[agent]\n{bad}\n")
    with pytest.raises(ValueError, match="timeout_sec"):
        TaskConfig.from_toml('[verifier]\ntimeout_sec = "soon"\n')
    with pytest.raises(ValueError):
        TaskConfig.from_toml("not toml [")


def test_a_set_splits_by_a_stable_hash_and_one_dir_is_train(tmp_path):
    source = HarborTasks(TASKS)
    ids = sorted(source.tasks)
    assert ids == ["broken-build", "hello", "json-reward"]
    for tid in ids:
        assert tid in source.task_ids(split_of(tid))
    task = source.get("hello")
    assert task.prompt.startswith("Write the word `hello`") and task.metadata["harbor"]["verifier"]["user"] == "root"
    single = HarborTasks(TASKS / "hello")
    assert single.task_ids("train") == ["hello"] and HarborTasks(TASKS).version == source.version
    with pytest.raises(ValueError, match="no Harbor task"):
        HarborTasks(tmp_path)
    separate = tmp_path / "sep"
    shutil.copytree(TASKS / "hello", separate)
    (separate / "task.toml").write_text('[verifier]\nenvironment_mode = "separate"\n')
    assert HarborBridge(str(separate)).grading_modes == {"sep": "separate"}  # runs (issue #42, item 3)
    compose = tmp_path / "compose"
    shutil.copytree(TASKS / "hello", compose)
    (compose / "environment" / "docker-compose.yaml").write_text("services:\n  main:\n    build: .\n")
    with pytest.raises(ValueError, match=r"multi-container task \(environment/docker-compose\.yaml\)"):
        HarborTasks(compose)  # refused, not run without its services (the agent would be blamed)
    gpu = tmp_path / "gpu"
    shutil.copytree(TASKS / "hello", gpu)
    (gpu / "task.toml").write_text((gpu / "task.toml").read_text().replace("[environment]", "[environment]\ngpus = 1"))
    with pytest.raises(ValueError, match=r"asks for 1 GPU\(s\) \(\[environment\] gpus\)"):
        HarborTasks(gpu)  # refused, not run without the device its tests need


@pytest.mark.parametrize(("name", "raw", "expected"), [
    ("reward.txt", b"1\n", 1.0), ("reward.txt", b" 0.25 ", 0.25), ("reward.json", b"0.5", 0.5),
    ("reward.json", b'{"reward": 1, "extra": 2}', 1.0), ("reward.txt", b"", None), ("reward.txt", b"yes", None),
    ("reward.txt", b"nan", None), ("reward.txt", b"inf", None), ("reward.json", b"true", None),
    ("reward.json", b'{"score": 1}', None), ("reward.json", b"{", None), ("reward.json", b'"1"', None),
])
def test_reward_files_count_only_finite_numbers(name, raw, expected):
    reward, why = parse_reward(name, raw)
    assert reward == expected, why
    assert reward is None or math.isfinite(reward)


# ---- episodes in Docker --------------------------------------------------------------------------------


@docker
@pytest.mark.docker
@pytest.mark.slow
def test_oracle_succeeds_and_noop_fails_on_both_reward_files(env: HarborBridge):
    gold = env.play("hello", env.gold_actions)
    assert (gold.outcome, gold.reward) == (Outcome.SUCCESS, 1.0), gold.detail
    assert gold.layers[0].details["test_exit"] == 3  # test.sh's exit status is ignored
    noop = env.play("hello", lambda task: [call("submit")])
    assert (noop.outcome, noop.reward) == (Outcome.WRONG_ANSWER, 0.0), noop.detail
    json_gold = env.play("json-reward", env.gold_actions)  # reward.json wins over reward.txt (0)
    assert (json_gold.outcome, json_gold.reward) == (Outcome.SUCCESS, 1.0), json_gold.detail
    partial = env.play("json-reward", lambda task: [call("bash", command="printf 'a\\n' > /work/lines.txt"),
                                                    call("submit")])
    assert partial.outcome is Outcome.WRONG_ANSWER and partial.reward == pytest.approx(1 / 3)
    missing = env.play("json-reward", lambda task: [call("submit")])  # test.sh writes no reward file
    assert (missing.outcome, missing.reward) == (Outcome.WRONG_ANSWER, 0.0) and "neither" in missing.detail


@docker
@pytest.mark.docker
@pytest.mark.slow
def test_a_declared_range_is_the_floor_of_unscored_failures_and_the_limit_of_rewards(task_set: Path):
    """With rewards declared in [-1, 0.5]: a missing reward file and envhub's own format error earn -1
    (0 would pay for failing), a reward in range is kept, and one above it (the oracle's 1) is a wrong
    answer at the floor -- never infra, never clamped into a success."""
    with envhub.make(f"harbor:{task_set}", reward_range=[-1, 0.5], budget={"max_format_errors": 0}) as env:
        missing = env.play("json-reward", lambda task: [call("submit")])
        assert (missing.outcome, missing.reward) == (Outcome.WRONG_ANSWER, -1.0), missing.detail
        partial = env.play("json-reward", lambda task: [call("bash", command="printf 'a\\n' > /work/lines.txt"),
                                                        call("submit")])
        assert partial.outcome is Outcome.WRONG_ANSWER and partial.reward == pytest.approx(1 / 3)
        over = env.play("hello", env.gold_actions)
        assert (over.outcome, over.reward) == (Outcome.WRONG_ANSWER, -1.0) and "outside" in over.detail
        garbage = env.play("hello", lambda task: [Action(text="no tool call at all")])
        assert (garbage.outcome, garbage.reward) == (Outcome.FORMAT_ERROR, -1.0), garbage.detail


@docker
@pytest.mark.docker
@pytest.mark.slow
def test_the_bash_tool_runs_as_the_agent_clips_output_and_times_out(env: HarborBridge):
    env.reset(task_id="hello")
    obs = env.step(call("bash", command="id -un; pwd; ls /tests /solution 2>&1; exit 4"))
    text = obs.messages[0].content
    assert text.startswith("[exit 4]") and "agent\n/app\n" in text
    assert "No such file" in text  # neither the tests nor the solution are in the agent's container
    obs = env.step(call("bash", command="head -c 300000 /dev/zero | tr '\\0' x"))
    assert obs.messages[0].content.startswith("[exit 0; output clipped: the first 65536 of 300000 bytes]")
    assert len(obs.messages[0].content) <= env.budget.max_observation_chars + 200
    t0 = time.monotonic()
    obs = env.step(call("bash", command="sleep 30", timeout_s=2))
    assert obs.messages[0].content.startswith("[timed out after 2s]") and time.monotonic() - t0 < 15
    assert env.step(call("bash", command="getent hosts example.com || echo offline")).messages[0].content.endswith(
        "offline\n")
    assert env.step(call("submit")).outcome is Outcome.WRONG_ANSWER


@docker
@pytest.mark.docker
@pytest.mark.slow
def test_a_broken_dockerfile_is_env_error_at_reset(env: HarborBridge):
    obs = env.reset(task_id="broken-build")
    assert obs.done and obs.outcome is Outcome.ENV_ERROR and "docker build" in obs.verdict.detail
    again = env.reset(task_id="broken-build")  # remembered: not rebuilt
    assert again.outcome is Outcome.ENV_ERROR


@docker
@pytest.mark.docker
@pytest.mark.slow
def test_reward_files_the_agent_wrote_are_wiped_and_its_writers_killed(env: HarborBridge):
    pre = env.play("json-reward", lambda task: [
        call("bash", command="mkdir -p /logs/verifier && echo 1 > /logs/verifier/reward.txt && "
                             "echo '{\"reward\": 1}' > /logs/verifier/reward.json"),
        call("submit")])
    assert (pre.outcome, pre.reward) == (Outcome.WRONG_ANSWER, 0.0), pre.detail
    writer = ("nohup sh -c 'while :; do mkdir -p /logs/verifier; echo 1 > /logs/verifier/reward.txt; "
              "sleep 0.05; done' >/dev/null 2>&1 &")
    bg = env.play("json-reward", lambda task: [call("bash", command=writer), call("submit")])
    assert (bg.outcome, bg.reward) == (Outcome.WRONG_ANSWER, 0.0), bg.detail
    hello = env.play("hello", lambda task: [call("bash", command="echo 1 > /tmp/reward.txt"), call("submit")])
    assert hello.outcome is Outcome.WRONG_ANSWER


@docker
@pytest.mark.docker
@pytest.mark.slow
def test_nothing_the_agent_does_is_infra_but_a_container_killed_before_it_acted_is(env: HarborBridge):
    slow = env.play("json-reward", lambda task: [call("bash", command="echo slow > /work/lines.txt"),
                                                 call("submit")])  # test.sh sleeps past timeout_sec = 5
    assert slow.outcome is Outcome.WRONG_ANSWER and "timeout_sec" in slow.detail
    suicide = env.play("json-reward", lambda task: [call("bash", command="kill -9 1"), call("submit")])
    assert suicide.outcome is Outcome.WRONG_ANSWER, suicide.detail  # the agent (root) ended its own container
    env.reset(task_id="hello")
    assert env.container is not None
    subprocess.run(["docker", "kill", env.container.name], capture_output=True, check=False)
    obs = env.step(call("bash", command="echo hi"))
    assert obs.outcome is Outcome.ENV_ERROR, obs.verdict
    env.reset(task_id="hello")
    subprocess.run(["docker", "kill", env.container.name], capture_output=True, check=False)
    assert env.step(call("submit")).outcome is Outcome.ENV_ERROR  # a noop on a dead container


@docker
@pytest.mark.docker
@pytest.mark.slow
def test_agent_timeout_sec_is_the_wall_time_budget(task_set: Path, tmp_path):
    short = tmp_path / "short"
    shutil.copytree(task_set / "hello", short)
    toml = (short / "task.toml").read_text().replace("timeout_sec = 120.0", "timeout_sec = 3.0")
    (short / "task.toml").write_text(toml)
    with envhub.make(f"harbor:{short}") as env:
        env.reset(task_id="short")
        t0 = time.monotonic()
        obs = env.step(call("bash", command="sleep 20", timeout_s=60))
        assert obs.done and obs.outcome is Outcome.BUDGET_EXHAUSTED and time.monotonic() - t0 < 15


@docker
@pytest.mark.docker
@pytest.mark.slow
def test_noop_and_gold_through_the_rollout_runner(task_set: Path, tmp_path):
    target = f"harbor:{task_set / 'hello'}"
    noop = run_rollouts(target, NoopPolicy(), out_dir=tmp_path / "noop", episodes=2, concurrency=1)
    assert noop.report["by_outcome"]["wrong_answer"] == noop.report["attempted"] == 2, noop.report["by_outcome"]
    gold = run_rollouts(target, GoldPolicy(), out_dir=tmp_path / "gold", episodes=2, concurrency=1)
    assert gold.report["by_outcome"]["success"] == gold.report["attempted"] == 2, gold.report["by_outcome"]
    record = json.loads((tmp_path / "gold" / "trajectories.jsonl").read_text().splitlines()[0])
    assert record["reward"] == 1.0 and record["task_id"] == "hello"
