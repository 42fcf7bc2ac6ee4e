"""The env base class for multi-turn, tool-using text environments.

A task family subclasses :class:`Env` and supplies four things: where tasks come from
(``load_tasks``), the tools (methods marked with :func:`envhub.tools.tool`), the verifier
(``make_verifier``) and a scripted gold solution (``gold_actions``). Everything an episode needs
beyond that -- parsing the model's text, validating arguments, budgets, outcomes, timings -- lives
here once, so no family re-implements it.

``step`` never raises for anything the model wrote. It raises only for caller errors (stepping a
finished episode), and turns infrastructure faults into the ``env_error`` outcome.
"""

from __future__ import annotations

import contextlib
import os
import random
import threading
import time
import traceback
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from envhub.budget import Budget, check_budget
from envhub.errors import EpisodeFinishedError, InfraError, ToolError
from envhub.parsing import PARSERS, TOOL_CALL_EXAMPLE, ToolCallParser, coerce_action, sanitize_calls
from envhub.rebuild import RebuiltOnCopy
from envhub.sandboxes.door import SandboxDoor
from envhub.tools import ToolArgumentError, ToolDef, collect_tools
from envhub.types import (
    Action,
    EpisodeMetrics,
    Message,
    Observation,
    Outcome,
    Sample,
    Task,
    ToolCall,
    ToolSpec,
    Turn,
    Verdict,
)

if TYPE_CHECKING:
    from envhub.sandboxes.base import Limits, Sandbox, SandboxSpec
    from envhub.verifiers.suite import SuiteCase

SPLITS = ("train", "validation", "test")
_TASK_CACHE: dict[tuple[type, Hashable], TaskSource] = {}
_TASK_CACHE_LOCK = threading.Lock()


def _renew_after_fork() -> None:
    """A forked child (AsyncVectorEnv) would never see a lock another thread held at the fork released."""
    global _TASK_CACHE_LOCK
    _TASK_CACHE_LOCK = threading.Lock()


os.register_at_fork(after_in_child=_renew_after_fork)


class TaskSource(Protocol):
    """Where a family's tasks come from. Ids are stable; splits never share a task."""

    name: str
    version: str

    def task_ids(self, split: str) -> Sequence[str]: ...

    def get(self, task_id: str) -> Task: ...


class Verifier(Protocol):
    def verify(self, task: Task, submission: dict[str, Any], episode: Episode) -> Verdict: ...


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


class Env(RebuiltOnCopy):
    """Base class of every envhub environment. See the module docstring (copies: :mod:`envhub.rebuild`)."""

    env_id: ClassVar[str] = ""
    family: ClassVar[str] = ""
    version: ClassVar[str] = "0"
    default_budget: ClassVar[Budget] = Budget()
    #: What the family's tools need from a sandbox; None when no tool runs code.
    sandbox_spec: ClassVar[SandboxSpec | None] = None
    #: Modules a grading sandbox's executor imports ahead of time (for ``exec_python`` children).
    grading_preload: ClassVar[tuple[str, ...]] = ()
    #: Limits of a grading sandbox, when they differ from ``sandbox_spec``'s (e.g. a larger output cap).
    grading_limits: ClassVar[Limits | None] = None
    #: Agent code must not see task data, hidden tests or server memory: ``process`` only when named,
    #: never as the fallback. An env whose sandboxes run only trusted code says so here: ``False``.
    needs_isolation: ClassVar[bool] = True

    def __init__(
        self,
        *,
        split: str = "train",
        budget: Budget | dict[str, Any] | None = None,
        parser: str | ToolCallParser = "default",
        sandbox: str = "auto",
        sandbox_pool: int = 8,
    ) -> None:
        if split not in SPLITS:
            raise ValueError(f"unknown split {split!r}; choose one of {', '.join(SPLITS)}")
        self.split = split
        #: the limits asked for (``budget``, else ``default_budget``); an episode runs under
        #: ``episode.budget``, which ``episode_budget`` derives from this
        self.budget: Budget = check_budget(budget, self.default_budget)
        if isinstance(parser, str) and parser not in PARSERS:
            raise ValueError(f"unknown tool-call parser {parser!r}; choose one of {', '.join(PARSERS)}")
        self.parser: ToolCallParser = PARSERS[parser]() if isinstance(parser, str) else parser
        #: where this env's sandboxes come from: ``sandbox`` names the backend, ``sandbox_pool`` the
        #: warm sandboxes kept per process and role (0: a cold sandbox per episode and per grading)
        self.sandboxes = SandboxDoor(self, backend=sandbox, pool=sandbox_pool)
        self._tools: dict[str, ToolDef] = collect_tools(type(self))
        self._tasks: TaskSource | None = None
        self._verifier: Verifier | None = None
        self._rng = random.Random()
        self.episode: Episode | None = None
        self._initial: Observation | None = None

    # ---- hooks for task families -------------------------------------------------------------

    def load_tasks(self) -> TaskSource:
        raise NotImplementedError

    def task_cache_key(self) -> Hashable | None:
        """Identity of this env's task source, if it may be shared by every env of the process.

        Loading a task set can take a while (generating or reading thousands of tasks); envs made
        for worker threads or server sessions share one source when this returns a key. ``None``
        (the default) loads a source per env.
        """
        return None

    def make_verifier(self) -> Verifier:
        raise NotImplementedError

    def system_prompt(self, task: Task) -> str:
        return (
            "You are an agent that solves tasks by calling tools. Call a tool by writing "
            f"{TOOL_CALL_EXAMPLE}. "
            "When you are done, call the tool that submits your result."
        )

    def gold_actions(self, task: Task) -> list[Action]:
        """The scripted reference solution, as the actions a perfect agent would take."""
        raise NotImplementedError

    def setup_episode(self, episode: Episode) -> None:
        """Prepare per-episode resources (files in the sandbox, ...). Runs at reset."""

    def episode_budget(self, task: Task) -> Budget:
        """The limits an episode of ``task`` runs under (kept on ``episode.budget``): ``self.budget``,
        unless a family sizes its budgets per task (without mutating ``self.budget``)."""
        return self.budget

    def adversarial_cases(self) -> list[SuiteCase]:
        """The family's own verifier-suite cases (see ``envhub verify``): reward hacks its verifier
        must reject, and other spellings of the gold it must accept. The suite runs them after the
        universal gold and noop cases (``envhub.verifiers.suite.suite_cases(env)``)."""
        return []

    def submission_actions(self, task: Task, submission: Any) -> list[Action]:
        """Turn a submission made elsewhere (``envhub verify --submissions``) into actions."""
        if not isinstance(submission, str):
            raise ValueError(f"a {self.family} submission is an answer string")
        return [Action(tool_calls=[ToolCall(name=self.terminal_tool, arguments={"answer": submission})])]

    # ---- public API --------------------------------------------------------------------------

    @property
    def terminal_tool(self) -> str:
        """The name of the tool that ends the episode and goes to the verifier (``answer``, ``submit``)."""
        for t in self._tools.values():
            if t.terminal:
                return t.name
        raise ValueError(f"{self.env_id or type(self).__name__} has no terminal tool (@tool(terminal=True))")

    @property
    def sandbox_backend(self) -> str:
        """The sandbox backend asked for: auto | docker | bwrap | landlock | process."""
        return self.sandboxes.backend

    @property
    def sandbox_pool(self) -> int:
        """Warm sandboxes kept per process and role (0: a cold one per episode and per grading)."""
        return self.sandboxes.pool

    def initial_observation(self) -> Observation:
        """The observation ``reset`` returned for the running episode."""
        if self._initial is None:
            raise EpisodeFinishedError("no episode has been started: call reset() first")
        return self._initial

    def play(self, task_id: str, script: Callable[[Task], list[Action]]) -> Verdict:
        """Run one episode of ``task_id`` with scripted actions; returns its verdict."""
        obs = self.reset(task_id=task_id)
        episode = self._require_episode()
        for action in script(episode.task):
            if obs.done:
                break
            obs = self.step(action)
        if not episode.done:
            self.abort(Outcome.FORMAT_ERROR, "the script ended without submitting")
        assert episode.verdict is not None
        return episode.verdict

    @property
    def tasks(self) -> TaskSource:
        if self._tasks is None:
            key = self.task_cache_key()
            if key is None:
                self._tasks = self.load_tasks()
            else:
                with _TASK_CACHE_LOCK:
                    cache_key = (type(self), key)
                    if cache_key not in _TASK_CACHE:
                        _TASK_CACHE[cache_key] = self.load_tasks()
                    self._tasks = _TASK_CACHE[cache_key]
        return self._tasks

    def use_tasks(self, source: TaskSource) -> None:
        """Use an already-loaded task source, e.g. one that a server shares across its sessions."""
        self._tasks = source

    @property
    def verifier(self) -> Verifier:
        if self._verifier is None:
            self._verifier = self.make_verifier()
        return self._verifier

    @property
    def tool_specs(self) -> list[ToolSpec]:
        return [t.spec for t in self._tools.values()]

    def reset(
        self, *, seed: int | None = None, task_id: str | None = None, options: dict[str, Any] | None = None
    ) -> Observation:
        """Start an episode. ``task_id`` picks a task; otherwise ``seed`` picks one of the split."""
        self._release_resources()
        options = dict(options or {})
        task_id = task_id or options.pop("task_id", None)
        if seed is not None:
            self._rng.seed(seed)
        if task_id is None:
            ids = self.tasks.task_ids(self.split)
            if not ids:
                raise ValueError(f"{self.env_id} has no tasks in split {self.split!r}")
            task_id = ids[self._rng.randrange(len(ids))]
        task = self.tasks.get(task_id)
        episode = Episode(task=task, tools=self.tool_specs, budget=self.episode_budget(task))
        episode.messages = [
            Message(role="system", content=self.system_prompt(task)),
            Message(role="user", content=task.prompt),
        ]
        self.episode = episode
        try:
            self.setup_episode(episode)
        except Exception as exc:  # the sandbox would not come up: not the agent's doing
            self._finish(Outcome.ENV_ERROR, f"episode setup failed: {exc!r}\n{traceback.format_exc()}")
        self._initial = Observation(
            messages=list(episode.messages),
            tools=episode.tools,
            done=episode.done,
            outcome=episode.outcome,
            verdict=episode.verdict,
            info={"task_id": task.task_id, "split": task.split, "difficulty": task.difficulty},
        )
        return self._initial

    def step(self, action: str | Action | dict[str, Any], *, sample: Sample | None = None) -> Observation:
        """Apply one policy turn; returns only the new messages (tool results or errors).

        ``sample`` (how a model produced ``action``: its token ids, logprobs, ...) is recorded on
        the turn as it is; nothing the env decides depends on it."""
        episode = self.episode
        if episode is None or episode.done:
            raise EpisodeFinishedError("no episode is running: call reset() first")
        action = coerce_action(action)
        call_error = None
        if action.tool_calls:
            calls, call_error = sanitize_calls(action.tool_calls)
            action = action.model_copy(update={"tool_calls": calls})
        t0 = time.monotonic()
        turn = Turn(index=len(episode.turns), action_text=action.text)
        if sample is not None:
            sample.record_on(turn)
        episode.turns.append(turn)
        episode.messages.append(
            Message(role="assistant", content=action.text, tool_calls=action.tool_calls or None)
        )
        new: list[Message] = []
        try:
            new = self._format_error(episode, turn, call_error) if call_error else self._apply(episode, turn, action)
        except InfraError as exc:
            self._finish(Outcome.ENV_ERROR, f"{exc}")
        except Exception as exc:
            self._finish(Outcome.ENV_ERROR, f"{exc!r}\n{traceback.format_exc()}")
        if not episode.done:
            self._check_budgets(episode)
        turn.observation = new
        episode.messages.extend(new)
        turn.timings["env_s"] = time.monotonic() - t0
        return self._observation(new)

    def abort(self, outcome: Outcome, detail: str) -> Observation:
        """End the running episode from outside (engine failure, context overflow, ...)."""
        if self.episode is not None and not self.episode.done:
            self._finish(outcome, detail)
        return self._observation([])

    def record_observation_ids(self, ids: list[int]) -> None:
        """Record on the latest turn the tokens a policy appended for the env's reply to it (known
        when it produces the next turn): ``Turn.observation_ids``. Like ``step``'s ``sample``,
        nothing the env decides depends on them."""
        self._require_episode().turns[-1].observation_ids = list(ids)

    def close(self) -> None:
        self._release_resources()
        self.episode = None

    def __enter__(self) -> Env:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- sandbox -----------------------------------------------------------------------------

    def sandbox(self) -> Sandbox:
        """The episode's sandbox, started on first use and released when the episode ends."""
        return self.sandboxes.for_episode(self._require_episode())

    def grading_sandbox(self) -> contextlib.AbstractContextManager[Sandbox]:
        """A pristine sandbox for the verifier, from the grading pool: never one an agent worked in."""
        return self.sandboxes.grading()

    # ---- internals ---------------------------------------------------------------------------

    def _release_resources(self) -> None:
        """Release the last episode's sandbox and wait until every release has finished."""
        if self.episode is not None:
            self.sandboxes.release(self.episode)

    def _require_episode(self) -> Episode:
        if self.episode is None:
            raise EpisodeFinishedError("no episode is running: call reset() first")
        return self.episode

    def _apply(self, episode: Episode, turn: Turn, action: Action) -> list[Message]:
        budget = episode.budget
        if len(action.text) > budget.max_action_chars:
            return self._format_error(
                episode,
                turn,
                f"your message is {len(action.text)} characters long; the limit is "
                f"{budget.max_action_chars}",
            )
        if action.tool_calls is not None:
            calls = action.tool_calls
        else:
            parsed = self.parser.parse(action.text)
            if parsed.error:
                return self._format_error(episode, turn, parsed.error)
            calls = parsed.calls
        if not calls:
            return self._format_error(episode, turn, "no tool call found")
        turn.tool_calls = calls
        replies: list[Message] = []
        for call in calls:
            if episode.tool_calls >= budget.max_tool_calls:
                self._finish(Outcome.BUDGET_EXHAUSTED, f"tool call budget ({budget.max_tool_calls}) used up")
                break
            episode.tool_calls += 1
            reply = self._call_tool(episode, turn, call)
            if reply is not None:
                replies.append(reply)
            if episode.done:
                break
        return replies

    def _call_tool(self, episode: Episode, turn: Turn, call: ToolCall) -> Message | None:
        tdef = self._tools.get(call.name)
        if tdef is None:
            known = ", ".join(self._tools)
            return self._tool_error(episode, turn, call, f"unknown tool `{call.name}`; available: {known}")
        try:
            args = tdef.validate(call.arguments)
        except ToolArgumentError as exc:
            return self._tool_error(episode, turn, call, str(exc))
        if tdef.terminal:
            episode.submission = {"tool": call.name, **args}
            self._grade(episode)
            return None
        t0, before = time.monotonic(), episode.metrics.sandbox_seconds
        try:
            result = str(tdef.fn(self, **args))
        except ToolError as exc:
            result = f"Error: {exc}"
        finally:  # the call's wall time already holds a sandbox start inside it: count that once
            episode.metrics.sandbox_seconds = before + time.monotonic() - t0
        return Message(role="tool", name=call.name, tool_call_id=call.id, content=self._clip(episode, result))

    def _grade(self, episode: Episode) -> None:
        t0 = time.monotonic()
        try:
            verdict = self.verifier.verify(episode.task, episode.submission or {}, episode)
        except InfraError as exc:
            verdict = Verdict(reward=0.0, outcome=Outcome.ENV_ERROR, detail=str(exc))
        except Exception as exc:
            verdict = Verdict(
                reward=0.0, outcome=Outcome.VERIFIER_ERROR, detail=f"{exc!r}\n{traceback.format_exc()}"
            )
        episode.metrics.verifier_seconds += time.monotonic() - t0
        self._finish(verdict.outcome, verdict.detail, verdict)

    def _format_error(self, episode: Episode, turn: Turn, reason: str) -> list[Message]:
        episode.format_errors += 1
        turn.parse_error = reason
        left = episode.budget.max_format_errors - episode.format_errors
        if left < 0:
            self._finish(Outcome.FORMAT_ERROR, f"too many invalid actions; last: {reason}")
            return []
        return [Message(role="user", content=f"Format error: {reason}. ({left} retries left)")]

    def _tool_error(self, episode: Episode, turn: Turn, call: ToolCall, reason: str) -> Message | None:
        episode.format_errors += 1
        turn.parse_error = reason
        left = episode.budget.max_format_errors - episode.format_errors
        if left < 0:
            self._finish(Outcome.FORMAT_ERROR, f"too many invalid tool calls; last: {reason}")
            return None
        return Message(
            role="tool", name=call.name, tool_call_id=call.id, content=f"Error: {reason}. ({left} retries left)"
        )

    def _check_budgets(self, episode: Episode) -> None:
        budget, elapsed = episode.budget, time.monotonic() - episode.started
        if elapsed > budget.max_agent_seconds:
            self._finish(Outcome.BUDGET_EXHAUSTED, f"agent time budget ({budget.max_agent_seconds}s) used up")
        elif len(episode.turns) >= budget.max_turns:
            self._finish(Outcome.BUDGET_EXHAUSTED, f"turn budget ({budget.max_turns}) used up")

    def _finish(self, outcome: Outcome, detail: str, verdict: Verdict | None = None) -> None:
        episode = self._require_episode()
        episode.verdict = verdict or Verdict(reward=0.0, outcome=outcome, detail=detail)
        episode.done = True
        episode.metrics.tool_calls = episode.tool_calls
        episode.metrics.format_errors = episode.format_errors
        episode.metrics.wall_seconds = time.monotonic() - episode.started
        self.sandboxes.release(episode, wait=False)

    def _observation(self, new: list[Message]) -> Observation:
        episode = self._require_episode()
        verdict = episode.verdict
        return Observation(
            messages=new,
            done=episode.done,
            truncated=bool(verdict and verdict.outcome.is_truncation),
            reward=verdict.reward if verdict else 0.0,
            outcome=verdict.outcome if verdict else None,
            verdict=verdict,
            info={"task_id": episode.task.task_id, "turn": len(episode.turns)},
        )

    def _clip(self, episode: Episode, text: str) -> str:
        limit = episode.budget.max_observation_chars
        if len(text) <= limit:
            return text
        return text[:limit] + f"\n[... {len(text) - limit} more characters cut ...]"
