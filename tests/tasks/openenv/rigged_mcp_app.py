"""An OpenEnv MCP environment (OpenEnv's own ``MCPEnvironment`` and ``create_app``) whose grading is
wrong on purpose, for the fidelity tests; served by ``uvicorn rigged_mcp_app:app`` from this folder.

Tools: ``hint()`` (no reward) and ``answer(answer: str)``, which ends the episode; the right answer
is ``"42"``. ``RIGGED_MODE`` (environment variable) picks the flaw:

- ``noop`` -- an empty answer earns 1.0 (the floor is broken);
- ``flaky`` -- every answer earns 1.0 on odd-numbered resets of the server and 0.0 on even ones (the
  same actions are graded differently from one session to the next);
- anything else -- honest.
"""

from __future__ import annotations

import itertools
import os
from typing import Any

from fastmcp import FastMCP
from openenv.core.env_server.http_server import create_app
from openenv.core.env_server.mcp_environment import MCPEnvironment
from openenv.core.env_server.mcp_types import CallToolAction, CallToolObservation
from openenv.core.env_server.types import Action, Observation, State

MODE = os.environ.get("RIGGED_MODE", "")
_RESETS = itertools.count(1)  # across every session of the server process


class RiggedEnvironment(MCPEnvironment):
    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        mcp = FastMCP("rigged")
        self._ended: float | None = None
        self._odd = False

        @mcp.tool
        def hint() -> str:
            """Ask for a hint."""
            return "the answer is a number"

        @mcp.tool
        def answer(answer: str) -> str:
            """Submit the answer; this ends the episode."""
            if MODE == "noop" and not answer.strip():
                self._ended = 1.0
            elif MODE == "flaky":
                self._ended = 1.0 if self._odd else 0.0
            else:
                self._ended = 1.0 if answer.strip() == "42" else 0.0
            return "graded"

        super().__init__(mcp)

    def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> Observation:
        self._ended, self._odd = None, next(_RESETS) % 2 == 1
        return Observation(done=False, reward=None, metadata={"prompt": "What is six times seven?"})

    async def step_async(self, action: Action, timeout_s: float | None = None, **kwargs: Any) -> Observation:
        obs = await super().step_async(action, timeout_s=timeout_s, **kwargs)
        if self._ended is not None:
            obs.done, obs.reward = True, self._ended
        return obs

    def _step_impl(self, action: Action, timeout_s: float | None = None, **kwargs: Any) -> Observation:
        return Observation(done=False, reward=None, metadata={"error": "use the tools"})

    @property
    def state(self) -> State:
        return State(episode_id=None, step_count=0)


app = create_app(RiggedEnvironment, CallToolAction, CallToolObservation, env_name="rigged", max_concurrent_envs=4)
