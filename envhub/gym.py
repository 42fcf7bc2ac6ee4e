"""The Gymnasium face of an envhub env: text in, text out.

Observations and actions are strings in a :class:`PrintableText` space. The structured
observation (messages, tool specs, verdict) rides along in ``info["observation"]`` as plain
JSON-ready data, so vector envs can pickle it.

Vector envs: ``SyncVectorEnv`` works as is. ``AsyncVectorEnv`` needs ``shared_memory=False``:
Gymnasium 1.x cannot place ``Text`` spaces in shared memory and returns garbage strings
otherwise.
"""

from __future__ import annotations

import string
from typing import Any

import gymnasium
import numpy as np
from gymnasium import spaces

from envhub.env import Env
from envhub.types import Action

MAX_TEXT = 1 << 20
CHARSET = string.printable.replace("\x0b", "").replace("\x0c", "")


class PrintableText(spaces.Text):
    """A Text space that contains any printable Unicode text, newlines and tabs included.

    Gymnasium's ``Text`` checks each character against a finite charset. Model output and tool
    results are arbitrary Unicode, so membership accepts any printable character while sampling
    draws from printable ASCII (which keeps random actions readable).
    """

    def __init__(self, max_length: int = MAX_TEXT, *, seed: int | np.random.Generator | None = None):
        super().__init__(max_length=max_length, min_length=0, charset=CHARSET, seed=seed)

    def contains(self, x: Any) -> bool:
        return (
            isinstance(x, str)
            and len(x) <= self.max_length
            and all(c.isprintable() or c in "\n\r\t" for c in x)
        )

    def sample(self, mask: Any = None, probability: Any = None) -> str:
        if mask is None and probability is None:
            length = int(self.np_random.integers(0, min(256, self.max_length) + 1))
            chars = self.np_random.choice(list(CHARSET), size=length)
            return "".join(chars)
        return super().sample(mask=mask, probability=probability)

    def __repr__(self) -> str:
        return f"PrintableText({self.max_length})"


class GymEnv(gymnasium.Env[str, str]):
    """Wraps an envhub :class:`Env` as a ``gymnasium.Env``.

    ``terminated`` means the verifier decided (success or failure); ``truncated`` means a budget
    or the context cut the episode short -- the distinction a value function needs.
    """

    metadata = {"render_modes": ["ansi"]}

    def __init__(self, env: Env, render_mode: str | None = None):
        self.env = env
        self.render_mode = render_mode
        self.observation_space = PrintableText()
        self.action_space = PrintableText(max_length=env.budget.max_action_chars)
        self._last_text = ""

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict]:
        super().reset(seed=seed)
        options = dict(options or {})
        task_id = options.pop("task_id", None)
        if seed is None and task_id is None:
            seed = int(self.np_random.integers(0, 2**31 - 1))
        obs = self.env.reset(seed=seed, task_id=task_id, options=options)
        return self._out(obs)[0], self._info(obs)

    def step(self, action: str | Action) -> tuple[str, float, bool, bool, dict]:
        obs = self.env.step(action)
        text, info = self._out(obs)
        terminated = obs.done and not obs.truncated
        return text, float(obs.reward), terminated, obs.truncated, info

    def render(self) -> str | None:
        return self._last_text if self.render_mode == "ansi" else None

    def close(self) -> None:
        self.env.close()

    def _out(self, obs: Any) -> tuple[str, dict]:
        text = obs.text()
        if len(text) > MAX_TEXT:
            text = text[:MAX_TEXT]
        self._last_text = "".join(c if c.isprintable() or c in "\n\r\t" else "\ufffd" for c in text)
        return self._last_text, self._info(obs)

    @staticmethod
    def _info(obs: Any) -> dict:
        return {"observation": obs.model_dump(mode="json"), **obs.info}


def make_gym_env(env_id: str, render_mode: str | None = None, **kwargs: Any) -> GymEnv:
    """Gymnasium entry point for every envhub env (see ``registry._register_with_gymnasium``)."""
    from envhub.registry import make

    return GymEnv(make(env_id, **kwargs), render_mode=render_mode)
