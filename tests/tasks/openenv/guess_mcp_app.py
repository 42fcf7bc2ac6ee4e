"""A small MCP environment written with OpenEnv's own ``MCPEnvironment`` and ``create_app``, for
the bridge's tests: guess a number in 1..20 chosen by the reset seed.

Tools: ``hint()`` says nothing useful (no reward), ``guess(n: int)`` ends the episode: reward 1.0
when ``n`` is the number, 0.0 otherwise; ``explode()`` raises (an MCP ``execution_error``). Served
by ``uvicorn guess_mcp_app:app`` from this folder.
"""

from __future__ import annotations

import random
from typing import Any

from fastmcp import FastMCP
from openenv.core.env_server.http_server import create_app
from openenv.core.env_server.mcp_environment import MCPEnvironment
from openenv.core.env_server.mcp_types import CallToolAction, CallToolObservation
from openenv.core.env_server.types import Action, Observation, State


def secret_of(seed: int | None) -> int:
    """The number an episode reset with ``seed`` hides."""
    return random.Random(seed).randint(1, 20)


class GuessEnvironment(MCPEnvironment):
    SUPPORTS_CONCURRENT_SESSIONS = True  # each session has its own instance

    def __init__(self) -> None:
        mcp = FastMCP("guess")
        self._secret = 0
        self._ended: float | None = None
        self._steps = 0

        @mcp.tool
        def hint() -> str:
            """Ask for a hint (there is none)."""
            return "the number is between 1 and 20"

        @mcp.tool
        def guess(n: int) -> str:
            """Guess the number; this ends the episode."""
            self._ended = 1.0 if n == self._secret else 0.0
            return "right" if self._ended else "wrong"

        @mcp.tool
        def explode() -> str:
            """Fails."""
            raise RuntimeError("boom")

        super().__init__(mcp)

    def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> Observation:
        self._secret, self._ended, self._steps = secret_of(seed), None, 0
        return Observation(done=False, reward=None, metadata={"prompt": "Guess my number (1..20)."})

    async def step_async(self, action: Action, timeout_s: float | None = None, **kwargs: Any) -> Observation:
        obs = await super().step_async(action, timeout_s=timeout_s, **kwargs)
        self._steps += 1
        if self._ended is not None:
            obs.done, obs.reward = True, self._ended
        return obs

    def _step_impl(self, action: Action, timeout_s: float | None = None, **kwargs: Any) -> Observation:
        return Observation(done=False, reward=None, metadata={"error": "use the tools"})

    @property
    def state(self) -> State:
        return State(episode_id=None, step_count=self._steps)


app = create_app(GuessEnvironment, CallToolAction, CallToolObservation, env_name="guess", max_concurrent_envs=4)
