"""A server the bridge runs (an OpenEnv package directory) that goes down on the agent's step: the
bridge starts a fresh one and replays the episode's steps on it. Down again -- the actions bring it
down -- the episode is the agent's ``format_error``; a crash the replay does not reproduce stays
``env_error``. Either way the next episode has a server (the mission: an agent must never be able
to turn its own failure into an infrastructure outcome the loss leaves out)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import envhub
from envhub.types import Action, Outcome

pytest.importorskip("openenv.core")

#: ``die`` kills the server's process (os._exit) whenever it is sent; ``once`` kills it only the
#: first time ever (a marker file beside the app), as an outside fault would; ``done`` ends with 1.0.
APP = '''
import os
from pathlib import Path
from typing import Any
from uuid import uuid4

from openenv.core.env_server.http_server import create_app
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import Action, Observation, State
from pydantic import Field

MARKER = Path(__file__).with_name("once-happened")


class Say(Action):
    message: str = Field(..., description="a message")


class Heard(Observation):
    length: int = 0


class DyingEnvironment(Environment):
    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        self._state = State(episode_id=str(uuid4()), step_count=0)

    def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> Heard:
        self._state = State(episode_id=episode_id or str(uuid4()), step_count=0)
        return Heard(length=0, done=False, reward=0.0, metadata={"prompt": "Say something."})

    def step(self, action: Say) -> Heard:  # type: ignore[override]
        self._state.step_count += 1
        if action.message == "die" or (action.message == "once" and not MARKER.exists()):
            MARKER.touch()
            os._exit(1)
        done = action.message == "done"
        return Heard(length=len(action.message), done=done, reward=1.0 if done else 0.0)

    @property
    def state(self) -> State:
        return self._state


app = create_app(DyingEnvironment, Say, Heard, env_name="dying", max_concurrent_envs=4)
'''


def say(message: str) -> Action:
    return Action(text=f"<tool_call>{json.dumps({'name': 'act', 'arguments': {'message': message}})}</tool_call>")


@pytest.fixture
def package(tmp_path: Path) -> Path:
    (tmp_path / "server").mkdir()
    (tmp_path / "server" / "__init__.py").write_text("")
    (tmp_path / "server" / "app.py").write_text(APP)
    (tmp_path / "openenv.yaml").write_text("spec_version: 1\nname: dying\napp: server.app:app\n")
    return tmp_path


@pytest.mark.slow
def test_a_step_that_brings_the_server_down_again_on_replay_is_the_agents(package: Path):
    with envhub.make(f"openenv:{package}", mode="typed") as env:
        task_id = env.tasks.task_ids("train")[0]
        env.reset(task_id=task_id)
        assert not env.step(say("hello")).done
        obs = env.step(say("die"))
        assert obs.done and obs.outcome is Outcome.FORMAT_ERROR, obs.verdict
        assert "again when envhub replayed" in obs.verdict.detail
        env.reset(task_id=task_id)  # a fresh server serves the next episode
        assert env.step(say("done")).outcome is Outcome.SUCCESS


@pytest.mark.slow
def test_a_crash_the_replay_does_not_reproduce_stays_infra(package: Path):
    with envhub.make(f"openenv:{package}", mode="typed") as env:
        task_id = env.tasks.task_ids("train")[0]
        env.reset(task_id=task_id)
        obs = env.step(say("once"))  # down the first time only: the replay's "once" passes
        assert obs.done and obs.outcome is Outcome.ENV_ERROR, obs.verdict
        env.reset(task_id=task_id)
        assert env.step(say("done")).outcome is Outcome.SUCCESS
