"""The Gymnasium face of an envhub env: text in, text out.

Observations and actions are strings in a :class:`PrintableText` space. The structured
observation (messages, tool specs, verdict) rides along in ``info["observation"]`` as plain
JSON-ready data, so vector envs can pickle it.

Every ``info`` has the same keys with the same types, at reset and at every step, whatever the
episode's state -- Gymnasium's vector envs batch infos per key and break (or silently cast) when
one sub-env sends a dict where another sent ``None``, or an ``int`` where another sent a
``float``. The schema (:data:`INFO_SCHEMA`):

* ``task_id`` (str), ``split`` (str), ``difficulty`` (int), ``turn`` (int, 0 after reset),
  ``outcome`` (str, ``""`` while the episode runs);
* ``observation`` (dict): ``messages`` and ``tools`` (lists of dicts), ``done`` and ``truncated``
  (bool), ``reward`` (float), ``outcome`` (str, ``""`` while running) and ``verdict`` (dict with
  ``reward``, ``outcome``, ``layers``, ``detail``; ``outcome`` is ``""`` until there is one);
* any further key an env puts in its observation's ``info``: a str, or the value as a JSON string.

Vector envs: ``SyncVectorEnv`` works as is. ``AsyncVectorEnv`` needs ``shared_memory=False``:
Gymnasium's shared memory reads a ``Text`` observation once, at construction, so every step
would return the same empty strings; asking for it raises a ``ValueError`` that says so.
"""

from __future__ import annotations

import json
import string
from typing import Any

import gymnasium
import numpy as np
from gymnasium import spaces
from gymnasium.vector.utils import create_shared_memory

from envhub.env import Env
from envhub.episode import EpisodeEnv
from envhub.types import Action, Observation

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
    """Wraps an envhub env (an :class:`~envhub.episode.EpisodeEnv`: a local :class:`Env` or a served
    one) as a ``gymnasium.Env``. Actions may be as long as a local env's budget allows (a served
    env's budget is not known here: :data:`MAX_TEXT`).

    ``terminated`` means the verifier decided (success or failure); ``truncated`` means a budget
    or the context cut the episode short -- the distinction a value function needs.
    """

    metadata = {"render_modes": ["ansi"]}

    def __init__(self, env: EpisodeEnv, render_mode: str | None = None):
        self.env = env
        self.render_mode = render_mode
        self.observation_space = PrintableText()
        limit = env.budget.max_action_chars if isinstance(env, Env) else MAX_TEXT
        self.action_space = PrintableText(max_length=limit)
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
        return text, float(obs.reward), bool(terminated), bool(obs.truncated), info

    def render(self) -> str | None:
        return self._last_text if self.render_mode == "ansi" else None

    def close(self) -> None:
        self.env.close()

    def _out(self, obs: Observation) -> tuple[str, dict]:
        text = obs.text()
        if len(text) > MAX_TEXT:
            text = text[:MAX_TEXT]
        self._last_text = "".join(c if c.isprintable() or c in "\n\r\t" else "\ufffd" for c in text)
        return self._last_text, self._info(obs)

    def _info(self, obs: Observation) -> dict[str, Any]:
        """The info of ``obs`` in the fixed schema of the module docstring."""
        episode = self.env.episode
        task = episode.task if episode is not None else None
        extra = dict(obs.info)
        outcome = obs.outcome.value if obs.outcome is not None else ""
        observation = obs.model_dump(mode="json", exclude={"info"})
        observation["outcome"] = outcome
        observation["verdict"] = observation["verdict"] or {"reward": 0.0, "outcome": "", "layers": [],
                                                            "detail": ""}
        info: dict[str, Any] = {
            "task_id": str(extra.pop("task_id", task.task_id if task else "")),
            "split": str(extra.pop("split", task.split if task else "")),
            "difficulty": int(extra.pop("difficulty", task.difficulty if task else 0)),
            "turn": int(extra.pop("turn", len(episode.turns) if episode else 0)),
            "outcome": outcome,
            "observation": observation,
        }
        for key, value in extra.items():
            if key not in info:
                info[key] = value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
        return info


#: Key -> type of every ``info`` :class:`GymEnv` returns (see the module docstring).
INFO_SCHEMA: dict[str, Any] = {
    "task_id": str, "split": str, "difficulty": int, "turn": int, "outcome": str,
    "observation": {"messages": list, "tools": list, "done": bool, "truncated": bool, "reward": float,
                    "outcome": str, "verdict": {"reward": float, "outcome": str, "layers": list, "detail": str}},
}


@create_shared_memory.register(PrintableText)
def _refuse_shared_memory(space: PrintableText, n: int = 1, ctx: Any = None) -> Any:
    raise ValueError(
        "envhub's text observations cannot go through Gymnasium's shared memory: Gymnasium reads a "
        "Text buffer once, when the vector env is built, so every step would return the same empty "
        "strings. Use AsyncVectorEnv(..., shared_memory=False) (or gymnasium.make_vec(..., "
        "vectorization_mode='async', vector_kwargs={'shared_memory': False}))."
    )


def make_gym_env(env_id: str, render_mode: str | None = None, **kwargs: Any) -> GymEnv:
    """Gymnasium entry point for every envhub env (see ``registry._register_with_gymnasium``)."""
    from envhub.registry import make

    return GymEnv(make(env_id, **kwargs), render_mode=render_mode)
