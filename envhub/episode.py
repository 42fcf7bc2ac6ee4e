"""An episode: its state (:class:`Episode`), what grades it (:class:`Verifier`), the contract of an
env that runs one (:class:`EpisodeEnv`), and a scripted one for the verifier suite (:class:`SuiteCase`)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

from envhub.budget import Budget
from envhub.types import (
    Action,
    EpisodeMetrics,
    Message,
    Observation,
    Outcome,
    Sample,
    Task,
    ToolSpec,
    Turn,
    Verdict,
)

if TYPE_CHECKING:
    from envhub.env import Env
    from envhub.sandboxes.base import Sandbox
    from envhub.task_source import TaskIndex


@dataclass
class Episode:
    """The mutable state of one running episode."""

    task: Task
    tools: list[ToolSpec]
    #: the limits this episode runs under: ``Env.episode_budget(task)`` at ``reset``
    budget: Budget = field(default_factory=Budget)
    messages: list[Message] = field(default_factory=list)
    turns: list[Turn] = field(default_factory=list)
    tool_calls: int = 0
    format_errors: int = 0
    started: float = field(default_factory=time.monotonic)
    done: bool = False
    verdict: Verdict | None = None
    submission: dict[str, Any] | None = None
    sandbox: Sandbox | None = None
    #: ``image_id`` of the sandbox the agent's tools ran in (kept after the sandbox is released)
    sandbox_image: str | None = None
    metrics: EpisodeMetrics = field(default_factory=EpisodeMetrics)
    scratch: dict[str, Any] = field(default_factory=dict)

    @property
    def outcome(self) -> Outcome | None:
        return self.verdict.outcome if self.verdict else None

    def end(self, verdict: Verdict) -> None:
        """Mark the episode done with ``verdict``; its counts and wall time go into its metrics."""
        self.verdict = verdict
        self.done = True
        self.metrics.tool_calls = self.tool_calls
        self.metrics.format_errors = self.format_errors
        self.metrics.wall_seconds = time.monotonic() - self.started

    def count_invalid(self, turn: Turn, reason: str) -> int:
        """Count an invalid action (or tool call) of ``turn``; returns the retries left, negative
        when there are none."""
        self.format_errors += 1
        turn.parse_error = reason
        return self.budget.max_format_errors - self.format_errors

    def over_budget(self) -> str | None:
        """Why the episode's time or turns are used up, or None while they are not."""
        budget = self.budget
        if time.monotonic() - self.started > budget.max_agent_seconds:
            return f"agent time budget ({budget.max_agent_seconds}s) used up"
        if len(self.turns) >= budget.max_turns:
            return f"turn budget ({budget.max_turns}) used up"
        return None

    def clip(self, text: str) -> str:
        """``text`` cut to the budget's ``max_observation_chars``, saying how much was cut."""
        limit = self.budget.max_observation_chars
        if len(text) <= limit:
            return text
        return text[:limit] + f"\n[... {len(text) - limit} more characters cut ...]"

    def opening(self) -> Observation:
        """What ``reset`` returns: the opening messages and the tools (done already if setup failed)."""
        task = self.task
        return Observation(messages=list(self.messages), tools=self.tools, done=self.done,
                           outcome=self.outcome, verdict=self.verdict,
                           info={"task_id": task.task_id, "split": task.split, "difficulty": task.difficulty})

    def observation(self, new: list[Message]) -> Observation:
        """What ``step`` returns: the ``new`` messages, and the verdict once there is one."""
        verdict = self.verdict
        return Observation(
            messages=new,
            done=self.done,
            truncated=bool(verdict and verdict.outcome.is_truncation),
            reward=verdict.reward if verdict else 0.0,
            outcome=verdict.outcome if verdict else None,
            verdict=verdict,
            info={"task_id": self.task.task_id, "turn": len(self.turns)},
        )


class Verifier(Protocol):
    """Grades the submissions of an env's episodes (``Env.make_verifier``, ``Env.verifier_for``)."""

    def verify(self, task: Task, submission: dict[str, Any], episode: Episode) -> Verdict:
        """Grade one submission.

        Args:
            task: the episode's task, hidden fields included.
            submission: the call of the terminal tool, ``{"tool": name, **arguments}``.
            episode: the episode that submitted, as it is at submit (its sandbox, turns, scratch).

        Returns:
            The verdict: the reward and the one outcome, with the layers that decided them.

        Raises:
            InfraError: grading could not run (say a sandbox would not start); the episode ends as
                ``env_error``. Any other exception is the verifier's own fault: ``verifier_error``.
        """
        ...


@runtime_checkable
class EpisodeEnv(Protocol):
    """What an episode uses of an env: :func:`envhub.rollout.episodes.run_episode`, the policies it
    starts, the env workers (:mod:`envhub.rollout.collect`) and the Gymnasium face
    (:mod:`envhub.gym`) need no more. A local :class:`~envhub.env.Env` satisfies it, and so does a
    served one (``envhub.connect(url)``); see ``Env`` for what each member means."""

    @property
    def env_id(self) -> str: ...

    @property
    def version(self) -> str: ...

    @property
    def split(self) -> str: ...

    @property
    def tasks(self) -> TaskIndex: ...

    @property
    def terminal_tool(self) -> str: ...

    @property
    def episode(self) -> Episode | None: ...

    def reset(self, *, seed: int | None = None, task_id: str | None = None,
              options: dict[str, Any] | None = None) -> Observation: ...

    def step(self, action: str | Action | dict[str, Any], *, sample: Sample | None = None) -> Observation: ...

    def abort(self, outcome: Outcome, detail: str) -> Observation: ...

    def record_observation_ids(self, ids: list[int]) -> None: ...

    def gold_actions(self, task: Task) -> list[Action]: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class SuiteCase:
    """One scripted submission strategy of a verifier suite (``Env.adversarial_cases``,
    :mod:`envhub.verifiers.suite`). ``actions`` builds the turns for a task."""

    name: str
    expect: Literal["pass", "fail"]
    actions: Callable[[Env, Task], list[Action]]
    description: str = ""


__all__ = ["Episode", "EpisodeEnv", "SuiteCase", "Verifier"]
