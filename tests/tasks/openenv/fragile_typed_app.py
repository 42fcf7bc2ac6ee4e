"""A typed-action environment written with OpenEnv's own ``Environment`` and ``create_app``, whose
``step`` raises on one action: count characters of a message; the message ``crash`` makes the
env's own code raise, ``hang`` makes it never return, ``done`` ends the episode with reward 1.0. Served by
``uvicorn fragile_typed_app:app`` from this folder."""

from __future__ import annotations

import time
from typing import Any
from uuid import uuid4

from openenv.core.env_server.http_server import create_app
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import Action, Observation, State
from pydantic import Field


class CountAction(Action):
    message: str = Field(..., description="a message to count")


class CountObservation(Observation):
    length: int = Field(default=0, description="characters in the message")


class FragileEnvironment(Environment):
    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        self._state = State(episode_id=str(uuid4()), step_count=0)

    def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> CountObservation:
        self._state = State(episode_id=episode_id or str(uuid4()), step_count=0)
        return CountObservation(length=0, done=False, reward=0.0, metadata={"prompt": "Count characters."})

    def step(self, action: CountAction) -> CountObservation:  # type: ignore[override]
        self._state.step_count += 1
        if action.message == "crash":
            raise RuntimeError("the env's step failed on this action")
        if action.message == "hang":  # the env's step never returns on this action
            time.sleep(3600)
        done = action.message == "done"
        return CountObservation(length=len(action.message), done=done, reward=1.0 if done else 0.0)

    @property
    def state(self) -> State:
        return self._state


app = create_app(FragileEnvironment, CountAction, CountObservation, env_name="fragile", max_concurrent_envs=4)
