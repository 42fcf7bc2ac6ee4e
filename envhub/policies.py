"""Policies: what acts in an episode. Scripted ones here; model engines plug in the same way.

A :class:`Policy` is shared by a whole run and is thread-safe; ``start`` gives an :class:`Agent`
for one episode, which holds that episode's state (for a model: the token record). The rollout
runner only ever talks to these two protocols.
"""

from __future__ import annotations

import random
import string
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import Any, Protocol

from envhub.episode import EpisodeEnv
from envhub.parsing import format_tool_call
from envhub.types import Observation, Sample, TokenView, ToolSpec


@dataclass
class PolicyOutput:
    """One turn of a policy, as :meth:`Agent.act` returns it.

    ``text`` is the action handed to ``Env.step``. ``sample`` is how it was produced (a model's
    exact token ids and logprobs, finish reason, weight version; no tokens for scripted policies)
    and rides with the text into ``Env.step``; the episode sets its ``agent_seconds``, which it
    measures. ``observation_ids`` are the token ids the agent appended for the ``observation`` it
    was given -- the env's reply to the previous turn, so they become that turn's
    ``Turn.observation_ids``: empty on the first turn (the prompt is no reply) and for policies
    without tokens.
    """

    text: str
    sample: Sample = field(default_factory=Sample)
    observation_ids: list[int] = field(default_factory=list)


class Agent(Protocol):
    """One episode of a :class:`Policy`, holding that episode's state (for a model: the token
    record). The episode calls ``act`` until the env is done, then ``token_view`` once."""

    def act(self, observation: Observation) -> PolicyOutput:
        """Produce the next turn, given the env's newest observation (its new messages only).

        A policy with tokens tokenizes the env's reply here, when it produces the next turn, and
        hands those ids over in the output (``PolicyOutput.observation_ids``); the episode records
        them on the turn that reply answered before stepping the new one. If ``act`` raises, no
        ids were handed over and its record ends with the last sampled turn."""
        ...

    def token_view(self) -> TokenView | None:
        """The masked token record of the episode so far (None for policies without tokens)."""
        ...


class Policy(Protocol):
    name: str

    def start(self, env: EpisodeEnv, observation: Observation, *, seed: int) -> Agent: ...

    def describe(self) -> dict[str, Any]:
        """Versions and sampling parameters for the trajectory record."""
        ...


class _ScriptedAgent:
    """Says ``turns`` in order, then ``closing()`` (an empty submission) on every later turn."""

    def __init__(self, turns: list[str], closing: Callable[[], str]):
        self._turns = list(turns)
        self._closing = closing

    def act(self, observation: Observation) -> PolicyOutput:
        text = self._turns.pop(0) if self._turns else self._closing()
        return PolicyOutput(text=text, sample=Sample(finish_reason="scripted"))

    def token_view(self) -> TokenView | None:
        return None


class ScriptedPolicy:
    """Says the same turns in every episode (then an empty answer): for tests and for replaying a
    fixed action sequence against an env."""

    def __init__(self, turns: list[str], name: str = "script") -> None:
        self.turns = list(turns)
        self.name = name

    def start(self, env: EpisodeEnv, observation: Observation, *, seed: int) -> Agent:
        return _ScriptedAgent(self.turns, lambda: _empty_submission(env, observation))

    def describe(self) -> dict[str, Any]:
        return {"model": f"scripted:{self.name}", "sampling_params": {}}


class GoldPolicy:
    """Replays the family's reference solution: the upper bound every verifier must accept."""

    name = "gold"

    def start(self, env: EpisodeEnv, observation: Observation, *, seed: int) -> Agent:
        assert env.episode is not None
        gold = [a.text for a in env.gold_actions(env.episode.task)]
        return _ScriptedAgent(gold, lambda: _empty_submission(env, observation))

    def describe(self) -> dict[str, Any]:
        return {"model": "scripted:gold", "sampling_params": {}}


class NoopPolicy:
    """Submits nothing useful right away: the floor every verifier must reject."""

    name = "noop"

    def start(self, env: EpisodeEnv, observation: Observation, *, seed: int) -> Agent:
        submit = _empty_submission(env, observation)
        return _ScriptedAgent([submit], lambda: submit)

    def describe(self) -> dict[str, Any]:
        return {"model": "scripted:noop", "sampling_params": {}}


class RandomPolicy:
    """Random tool calls with random (often invalid) arguments and random garbage text.

    It exercises every error path of an env -- unknown tools, wrong types, malformed JSON -- and
    must never produce an infrastructure failure.
    """

    name = "random"

    def start(self, env: EpisodeEnv, observation: Observation, *, seed: int) -> Agent:
        return _RandomAgent(observation.tools, random.Random(seed))

    def describe(self) -> dict[str, Any]:
        return {"model": "scripted:random", "sampling_params": {}}


class _RandomAgent(_ScriptedAgent):
    def __init__(self, tools: list[ToolSpec], rng: random.Random):
        super().__init__([], str)
        self.tools, self.rng = tools, rng

    def act(self, observation: Observation) -> PolicyOutput:
        rng = self.rng
        roll = rng.random()
        if roll < 0.15:
            text = "".join(rng.choice(string.printable) for _ in range(rng.randint(0, 80)))
        elif roll < 0.25:
            text = "<tool_call>{" + "".join(rng.choice('"{}:, ab1') for _ in range(rng.randint(1, 30)))
        else:
            spec = rng.choice(self.tools)
            if rng.random() < 0.1:
                spec = spec.model_copy(update={"name": spec.name + "_x"})
            args = {k: _random_value(rng, v) for k, v in spec.parameters.get("properties", {}).items()}
            text = format_tool_call(spec.name, args)
        return PolicyOutput(text=text, sample=Sample(finish_reason="scripted"))


def _random_value(rng: random.Random, schema: dict[str, Any]) -> Any:
    kind = schema.get("type") if rng.random() < 0.8 else rng.choice(["string", "integer", "array", "null"])
    if kind == "string":
        return "".join(rng.choice(string.ascii_letters + string.digits + " ./") for _ in range(rng.randint(0, 20)))
    if kind == "integer":
        return rng.randint(-5, 50)
    if kind == "number":
        return rng.uniform(-10, 10)
    if kind == "boolean":
        return rng.random() < 0.5
    if kind == "array":
        return [rng.randint(0, 9) for _ in range(rng.randint(0, 3))]
    return None


def _empty_submission(env: EpisodeEnv, observation: Observation) -> str:
    """A call of the env's terminal tool with empty values for its required arguments (an empty
    answer where the env has none)."""
    name = env.terminal_tool
    if not name:  # an env with no terminal tool (a chat ends on an answer without tool calls)
        return ""
    spec = next((t for t in observation.tools if t.name == name), None)
    if spec is None:
        raise ValueError(f"the env's terminal tool `{name}` is not among the tools it offers")
    props = spec.parameters.get("properties", {})
    required = spec.parameters.get("required", [])
    return format_tool_call(name, {k: "" if props[k].get("type") == "string" else None for k in required})


_SCRIPTED: dict[str, Callable[[], Policy]] = {"gold": GoldPolicy, "noop": NoopPolicy, "random": RandomPolicy}

#: Entry point group of policy kinds ``KIND:TARGET``: ``KIND = "module:factory"``, where
#: ``factory(target, **options) -> Policy``. envhub's adapters declare ``hf`` and ``sglang`` here
#: (pyproject.toml); core never imports them by name.
POLICY_ENTRY_POINT_GROUP = "envhub.policies"
_KINDS: dict[str, Callable[..., Policy]] = {}
_kinds_lock = threading.Lock()


def register_policy_kind(kind: str, factory: Callable[..., Policy]) -> None:
    """Make ``make_policy("KIND:TARGET", **options)`` call ``factory(TARGET, **options)``; for
    kinds not declared as an entry point (a kind registered here wins over an entry point)."""
    if not kind or ":" in kind or kind in _SCRIPTED:
        raise ValueError(f"invalid policy kind {kind!r}")
    with _kinds_lock:
        _KINDS[kind] = factory


def _kind_factory(kind: str) -> Callable[..., Policy] | None:
    """The factory of ``kind``: registered, else its entry point (loaded once; an ImportError,
    e.g. a missing optional extra, reaches the caller)."""
    with _kinds_lock:
        factory = _KINDS.get(kind)
    if factory is not None:
        return factory
    found = entry_points(group=POLICY_ENTRY_POINT_GROUP, name=kind)
    if not found:
        return None
    factory = next(iter(found)).load()
    with _kinds_lock:
        return _KINDS.setdefault(kind, factory)


def _kind_names() -> list[str]:
    with _kinds_lock:
        registered = set(_KINDS)
    return sorted(registered | {ep.name for ep in entry_points(group=POLICY_ENTRY_POINT_GROUP)})


def make_policy(spec: str, **options: Any) -> Policy:
    """``gold`` | ``noop`` | ``random`` | ``KIND:TARGET`` for a registered kind: ``hf:PATH`` and
    ``sglang:URL`` with envhub's adapters (see :data:`POLICY_ENTRY_POINT_GROUP`)."""
    if spec in _SCRIPTED:
        return _SCRIPTED[spec]()
    kind, _, target = spec.partition(":")
    factory = _kind_factory(kind) if kind and target else None
    if factory is not None:
        return factory(target, **options)
    kinds = ", ".join(f"{k}:..." for k in _kind_names())
    hint = f" or {kinds}" if kinds else (
        f" (no policy kinds such as hf:PATH are registered: the installed metadata lacks the "
        f"{POLICY_ENTRY_POINT_GROUP!r} entry points; reinstall envhub, e.g. `pip install -e .`)")
    raise ValueError(f"unknown policy {spec!r}; use gold, noop, random{hint}")
