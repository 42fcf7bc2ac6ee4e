"""``envhub.server.client``: a remote env with the local API, reconnection, and the rollout runner on top."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi")

import envhub
from envhub.episode import EpisodeEnv
from envhub.errors import EpisodeFinishedError
from envhub.policies import PolicyOutput
from envhub.rollout.runner import run_rollouts
from envhub.server import ServerConfig, create_app
from envhub.server.client import RemoteEnv, RemoteError, SessionLostError, connect, remote_env_factory
from envhub.server.testing import serve_in_thread
from envhub.types import Observation, Outcome, Sample

ENV_ID = "envhub/Computation-v0"
TASK = "comp-bigint-L1-0"


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    app = create_app(ENV_ID, ServerConfig(max_sessions=16, session_ttl_s=30, expose_gold=True))
    with serve_in_thread(app) as base:
        yield base


@pytest.fixture(scope="module")
def local() -> envhub.Env:
    return envhub.make(ENV_ID)


def gold_answer(local: envhub.Env, task_id: str) -> str:
    return local.gold_actions(local.tasks.get(task_id))[-1].text


def kill_socket(env: RemoteEnv) -> None:
    env._ws.socket.shutdown(socket.SHUT_RDWR)


def test_remote_env_mirrors_the_local_api(url: str, local: envhub.Env):
    with connect(url) as env:
        assert (env.env_id, env.version, env.split) == (ENV_ID, str(local.version), "train")
        assert env.tasks.version == local.tasks.version
        assert env.tasks.task_ids("test") == list(local.tasks.task_ids("test"))
        assert [t.name for t in env.tool_specs] == ["python", "answer"] and env.terminal_tool == "answer"
        obs = env.reset(task_id=TASK)
        assert isinstance(obs, Observation) and [m.role for m in obs.messages] == ["system", "user"]
        assert env.episode is not None and env.episode.task.task_id == TASK
        assert env.episode.task.hidden == {}  # never sent
        obs = env.step(gold_answer(local, TASK))
        assert obs.done and obs.outcome is Outcome.SUCCESS and obs.reward == 1.0
        episode = env.episode
        assert episode.done and episode.verdict.outcome is Outcome.SUCCESS and len(episode.turns) == 1
        assert [m.role for m in episode.messages] == ["system", "user", "assistant"]
        with pytest.raises(EpisodeFinishedError):
            env.step("too late")


def test_a_local_and_a_served_env_both_keep_the_episode_contract(url: str, local: envhub.Env):
    """What run_episode, the env workers and the Gymnasium face take: a local env or a served one."""
    with connect(url) as remote:
        assert isinstance(local, EpisodeEnv) and isinstance(remote, EpisodeEnv)
        remote.reset(task_id=TASK)
        assert isinstance(remote, EpisodeEnv)  # with an episode view as well
    assert not isinstance(local.tasks, EpisodeEnv)


def test_gold_actions_from_the_server_and_locally(url: str, local: envhub.Env):
    with connect(url) as env:
        env.reset(task_id=TASK)
        expected = local.gold_actions(local.tasks.get(TASK))
        assert env.gold_actions(env.episode.task) == expected  # served (--expose-gold)
        env.info["gold_exposed"] = False
        assert env.gold_actions(env.episode.task) == expected  # from the local copy of the env


def test_reconnects_and_resumes_the_same_episode(url: str, local: envhub.Env):
    with connect(url) as env:
        env.reset(task_id=TASK)
        sid = env.session_id
        env.step("not a tool call")
        kill_socket(env)
        obs = env.step(gold_answer(local, TASK))  # resumes transparently
        assert env.session_id == sid and obs.outcome is Outcome.SUCCESS
        assert len(env.episode.turns) == 2


def test_a_lost_session_ends_the_episode_as_infra(local: envhub.Env):
    app = create_app(ENV_ID, ServerConfig(max_sessions=4, session_ttl_s=0.5))
    with serve_in_thread(app) as base, connect(base, reconnect_window_s=5) as env:
        env.reset(task_id=TASK)
        assert env.episode is not None
        kill_socket(env)
        deadline = time.monotonic() + 15
        while env._http_get("/envhub/info")["active_sessions"] and time.monotonic() < deadline:
            time.sleep(0.05)
        with pytest.raises(SessionLostError):
            env.step("hello")
        obs = env.abort(Outcome.ENV_ERROR, "lost")
        assert obs.done and env.episode.verdict.outcome is Outcome.ENV_ERROR


def test_capacity_and_auth_errors(local: envhub.Env):
    app = create_app(ENV_ID, ServerConfig(max_sessions=1, session_ttl_s=30, token="tok"))
    with serve_in_thread(app) as base:
        with pytest.raises(RemoteError, match=r"UNAUTHORIZED|401"):
            connect(base)
        with connect(base, token="tok") as first, connect(base, token="tok") as second:
            first.reset(task_id=TASK)
            with pytest.raises(RemoteError, match="CAPACITY_REACHED"):
                second.reset(task_id=TASK)


class _AnswerPolicy:
    """Submits the gold answer at once (needs no sandbox), via the remote env's episode view."""

    name = "answer"

    def __init__(self, local: envhub.Env) -> None:
        self.local = local

    def start(self, env: Any, observation: Observation, *, seed: int) -> Any:
        text = gold_answer(self.local, env.episode.task.task_id)

        class Agent:
            def act(self, obs: Observation) -> PolicyOutput:
                return PolicyOutput(text=text)

            def token_view(self) -> None:
                return None

        return Agent()

    def describe(self) -> dict[str, Any]:
        return {"model": "scripted:answer"}


def test_rollout_runner_drives_remote_envs(url: str, local: envhub.Env, tmp_path: Path):
    result = run_rollouts(ENV_ID, _AnswerPolicy(local), out_dir=tmp_path, episodes=6, group_size=2,
                          concurrency=3, env_factory=remote_env_factory(url))
    assert result.report["planned"] == 6
    records = [json.loads(line) for line in (tmp_path / "trajectories.jsonl").read_text().splitlines()]
    assert len(records) == 6 and {r["outcome"] for r in records} == {"success"}
    assert all(r["env_id"] == ENV_ID and r["num_turns"] == 1 for r in records)
    assert records[0]["versions"]["task_set"] == local.tasks.version
    assert records[0]["messages"][0]["role"] == "system"


class _SampledAnswerPolicy(_AnswerPolicy):
    """:class:`_AnswerPolicy` as a model would answer: with token ids, logprobs and a weight version."""

    def start(self, env: Any, observation: Observation, *, seed: int) -> Any:
        inner = super().start(env, observation, seed=seed)

        class Agent:
            def act(self, obs: Observation) -> PolicyOutput:
                return PolicyOutput(text=inner.act(obs).text, sample=Sample(
                    token_ids=[5, 6], logprobs=[-0.5, -0.25], finish_reason="stop", weight_version="v9"))

            def token_view(self) -> None:
                return None

        return Agent()


def test_the_sample_of_a_remote_turn_stays_here_and_lands_on_the_turn(url: str, local: envhub.Env):
    from envhub.rollout.collect import collect
    from envhub.rollout.episodes import plan_episodes

    plans = plan_episodes(ENV_ID, local.tasks.task_ids("train"), episodes=2)
    records = list(collect(plans, remote_env_factory(url), _SampledAnswerPolicy(local), concurrency=2))
    assert len(records) == 2 and {r.outcome for r in records} == {Outcome.SUCCESS}
    for r in records:
        [turn] = r.turns
        assert (turn.token_ids, turn.logprobs, turn.finish_reason, turn.weight_version) == (
            [5, 6], [-0.5, -0.25], "stop", "v9")
        assert "agent_s" in turn.timings and "env_s" in turn.timings  # the server's timing, kept
        assert r.versions.weight_versions == ["v9"]
