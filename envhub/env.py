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
import dataclasses
import os
import random
import threading
import time
import traceback
from collections.abc import Callable, Hashable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from envhub.errors import EpisodeFinishedError, InfraError, ToolError
from envhub.parsing import PARSERS, ToolCallParser, clean_call, sanitize_text
from envhub.tools import ToolArgumentError, ToolDef, collect_tools
from envhub.types import (
    Action,
    EpisodeMetrics,
    Message,
    Observation,
    Outcome,
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
_RELEASER = ThreadPoolExecutor(max_workers=4, thread_name_prefix="envhub-sandbox-release")


def _renew_after_fork() -> None:
    """In a forked child (AsyncVectorEnv, multiprocessing): the parent's worker threads are gone,
    so its executor would queue releases that never run and ``close`` would wait on them forever;
    a lock another thread held at the fork would never be released."""
    global _RELEASER, _TASK_CACHE_LOCK
    _RELEASER = ThreadPoolExecutor(max_workers=4, thread_name_prefix="envhub-sandbox-release")
    _TASK_CACHE_LOCK = threading.Lock()


os.register_at_fork(after_in_child=_renew_after_fork)


@dataclass(frozen=True)
class Budget:
    """Limits per episode. Exceeding turns, tool calls or seconds ends it as ``budget_exhausted``;
    more than ``max_format_errors`` unparseable or invalid actions end it as ``format_error``.
    """

    max_turns: int = 8
    max_tool_calls: int = 16
    max_agent_seconds: float = 600.0
    max_format_errors: int = 2
    max_action_chars: int = 32_768
    max_observation_chars: int = 8_192

    def __post_init__(self) -> None:
        """A wrong type fails when the budget is made, not in every episode it would run."""
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            wants_int = isinstance(f.default, int)
            ok_types = (int,) if wants_int else (int, float)
            if isinstance(value, bool) or not isinstance(value, ok_types):
                kind = "an integer" if wants_int else "a number"
                raise TypeError(f"budget field {f.name} must be {kind}, got {value!r}")
            if value < 0 or value != value:  # negative, or NaN
                raise ValueError(f"budget field {f.name} must not be negative, got {value!r}")


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


class Env:
    """Base class of every envhub environment. See the module docstring."""

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
    #: The agent's tools run code next to what it must not see (hidden tests): the ``process``
    #: backend, which hides nothing, is used only when asked for by name, never as the fallback.
    needs_isolation: ClassVar[bool] = False

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
        self.budget: Budget = _check_budget(budget, self.default_budget)
        if isinstance(parser, str) and parser not in PARSERS:
            raise ValueError(f"unknown tool-call parser {parser!r}; choose one of {', '.join(PARSERS)}")
        self.parser: ToolCallParser = PARSERS[parser]() if isinstance(parser, str) else parser
        from envhub.sandboxes import requested_backend  # lazily: core imports no other part at load

        requested_backend(sandbox)  # an unknown name fails here, not in every episode
        if isinstance(sandbox_pool, bool) or not isinstance(sandbox_pool, int) or sandbox_pool < 0:
            raise TypeError(f"sandbox_pool must be a non-negative integer, got {sandbox_pool!r}")
        self.sandbox_backend = sandbox
        #: warm sandboxes kept per process (0: a cold sandbox per episode and per grading)
        self.sandbox_pool = sandbox_pool
        self._tools: dict[str, ToolDef] = collect_tools(type(self))
        self._tasks: TaskSource | None = None
        self._verifier: Verifier | None = None
        self._rng = random.Random()
        self.episode: Episode | None = None
        self._initial: Observation | None = None
        self._pending_release: list[Future[None]] = []

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
            '<tool_call>{"name": "<tool>", "arguments": {...}}</tool_call>. '
            "When you are done, call the tool that submits your result."
        )

    def gold_actions(self, task: Task) -> list[Action]:
        """The scripted reference solution, as the actions a perfect agent would take."""
        raise NotImplementedError

    def setup_episode(self, episode: Episode) -> None:
        """Prepare per-episode resources (files in the sandbox, ...). Runs at reset."""

    def adversarial_cases(self) -> list[SuiteCase]:
        """Reward hacks this family's verifier must reject (see ``envhub verify``)."""
        return []

    def submission_actions(self, task: Task, submission: Any) -> list[Action]:
        """Turn a submission made elsewhere (``envhub verify --submissions``) into actions."""
        if not isinstance(submission, str):
            raise ValueError(f"a {self.family} submission is an answer string")
        return [Action(tool_calls=[ToolCall(name=self.terminal_tool, arguments={"answer": submission})])]

    # ---- public API --------------------------------------------------------------------------

    @property
    def terminal_tool(self) -> str:
        """The name of the tool that ends the episode (``answer`` or ``submit``)."""
        return next(t.name for t in self._tools.values() if t.terminal)

    def suite_cases(self) -> list[SuiteCase]:
        from envhub.verifiers.suite import universal_cases

        return universal_cases() + self.adversarial_cases()

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
        self._finish_resources()
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
        episode = Episode(task=task, tools=self.tool_specs)
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

    def step(self, action: str | Action | dict[str, Any]) -> Observation:
        """Apply one policy turn; returns only the new messages (tool results or errors)."""
        episode = self.episode
        if episode is None or episode.done:
            raise EpisodeFinishedError("no episode is running: call reset() first")
        action = _coerce_action(action)
        call_error = None
        if action.tool_calls:
            calls, call_error = _sanitize_calls(action.tool_calls)
            action = action.model_copy(update={"tool_calls": calls})
        t0 = time.monotonic()
        turn = Turn(index=len(episode.turns), action_text=action.text)
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

    def close(self) -> None:
        self._finish_resources()
        self.episode = None

    def __enter__(self) -> Env:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- sandbox -----------------------------------------------------------------------------

    def sandbox(self) -> Sandbox:
        """The episode's sandbox, started on first use and closed when the episode ends."""
        episode = self._require_episode()
        if episode.sandbox is None:
            t0 = time.monotonic()
            episode.sandbox = self._new_sandbox()
            episode.sandbox_image = getattr(episode.sandbox, "image_id", None)
            episode.metrics.sandbox_seconds += time.monotonic() - t0
        return episode.sandbox

    def _new_sandbox(self, role: str = "agent") -> Sandbox:
        """A pristine sandbox: a reset one from the process-wide warm pool of its role, or a cold one."""
        from envhub.sandboxes import (  # lazily
            SandboxSpec,
            create_sandbox,
            requested_backend,
            select_backend,
            shared_pool,
        )

        agent_spec = self.sandbox_spec or SandboxSpec()
        spec = dataclasses.replace(agent_spec, role=role,
                                   preload=self.grading_preload if role == "grading" else agent_spec.preload)
        if role == "grading" and self.grading_limits is not None:
            spec = dataclasses.replace(spec, limits=self.grading_limits)
        try:
            backend = select_backend(self.sandbox_backend)
        except Exception as exc:
            raise InfraError(f"could not start a sandbox: {exc}") from exc
        if backend == "process" and self.needs_isolation and requested_backend(self.sandbox_backend) != "process":
            raise InfraError(f"{self.env_id or type(self).__name__} runs agent code next to its hidden tests and no "
                             "isolating sandbox (docker, bwrap) works here; `envhub sandbox doctor` says how to "
                             "fix that, or pass --sandbox process to run it without isolation anyway")
        try:
            if self.sandbox_pool > 0:
                return shared_pool(backend, spec, size=self.sandbox_pool).acquire()
            return create_sandbox(backend, spec, pooled=False)
        except Exception as exc:
            raise InfraError(f"could not start a sandbox: {exc}") from exc

    @contextlib.contextmanager
    def grading_sandbox(self) -> Iterator[Sandbox]:
        """A pristine sandbox for the verifier, from the grading pool: never one an agent worked in."""
        sandbox = self._new_sandbox(role="grading")
        try:
            yield sandbox
        finally:
            with contextlib.suppress(Exception):
                sandbox.close()

    # ---- internals ---------------------------------------------------------------------------

    def _require_episode(self) -> Episode:
        if self.episode is None:
            raise EpisodeFinishedError("no episode is running: call reset() first")
        return self.episode

    def _apply(self, episode: Episode, turn: Turn, action: Action) -> list[Message]:
        if len(action.text) > self.budget.max_action_chars:
            return self._format_error(
                episode,
                turn,
                f"your message is {len(action.text)} characters long; the limit is "
                f"{self.budget.max_action_chars}",
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
            if episode.tool_calls >= self.budget.max_tool_calls:
                self._finish(Outcome.BUDGET_EXHAUSTED, f"tool call budget ({self.budget.max_tool_calls}) used up")
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
        return Message(role="tool", name=call.name, tool_call_id=call.id, content=self._clip(result))

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
        left = self.budget.max_format_errors - episode.format_errors
        if left < 0:
            self._finish(Outcome.FORMAT_ERROR, f"too many invalid actions; last: {reason}")
            return []
        return [Message(role="user", content=f"Format error: {reason}. ({left} retries left)")]

    def _tool_error(self, episode: Episode, turn: Turn, call: ToolCall, reason: str) -> Message | None:
        episode.format_errors += 1
        turn.parse_error = reason
        left = self.budget.max_format_errors - episode.format_errors
        if left < 0:
            self._finish(Outcome.FORMAT_ERROR, f"too many invalid tool calls; last: {reason}")
            return None
        return Message(
            role="tool", name=call.name, tool_call_id=call.id, content=f"Error: {reason}. ({left} retries left)"
        )

    def _check_budgets(self, episode: Episode) -> None:
        elapsed = time.monotonic() - episode.started
        if elapsed > self.budget.max_agent_seconds:
            self._finish(Outcome.BUDGET_EXHAUSTED, f"agent time budget ({self.budget.max_agent_seconds}s) used up")
        elif len(episode.turns) >= self.budget.max_turns:
            self._finish(Outcome.BUDGET_EXHAUSTED, f"turn budget ({self.budget.max_turns}) used up")

    def _finish(self, outcome: Outcome, detail: str, verdict: Verdict | None = None) -> None:
        episode = self._require_episode()
        episode.verdict = verdict or Verdict(reward=0.0, outcome=outcome, detail=detail)
        episode.done = True
        episode.metrics.tool_calls = episode.tool_calls
        episode.metrics.format_errors = episode.format_errors
        episode.metrics.wall_seconds = time.monotonic() - episode.started
        self._release_sandbox(episode, wait=False)

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

    def _clip(self, text: str) -> str:
        limit = self.budget.max_observation_chars
        if len(text) <= limit:
            return text
        return text[:limit] + f"\n[... {len(text) - limit} more characters cut ...]"

    def _release_sandbox(self, episode: Episode, *, wait: bool = True) -> None:
        """Close (or give back to its pool) the episode's sandbox.

        When an episode ends, the reset or teardown runs on a background thread so the final step
        returns at once; ``close()`` and the next ``reset()`` wait for it.
        """
        if episode.sandbox is not None:
            sandbox, episode.sandbox = episode.sandbox, None
            future = _RELEASER.submit(_close_quietly, sandbox)
            self._pending_release.append(future)
        if wait:
            pending, self._pending_release = self._pending_release, []
            for future in pending:
                future.result()

    def _finish_resources(self) -> None:
        if self.episode is not None:
            self._release_sandbox(self.episode)


def _check_budget(budget: Any, default: Budget) -> Budget:
    """``budget``: a Budget, a dict of Budget fields, or None for ``default``."""
    if budget is None:
        return default
    if isinstance(budget, dict):
        known = {f.name: f for f in dataclasses.fields(Budget)}
        unknown = sorted(set(budget) - set(known))
        if unknown:
            raise TypeError(f"unknown budget fields {unknown}; known: {', '.join(known)}")
        budget = replace(default, **budget)
    elif not isinstance(budget, Budget):
        raise TypeError(
            f"budget must be a Budget or a dict of its fields (e.g. {{\"max_turns\": 4}}), "
            f"not {type(budget).__name__} {budget!r}"
        )
    return budget


def _close_quietly(sandbox: Sandbox) -> None:
    with contextlib.suppress(Exception):  # best effort; `envhub sandbox prune` removes leftovers
        sandbox.close()


def _coerce_action(action: str | Action | dict[str, Any]) -> Action:
    if isinstance(action, Action):
        text = action.text
    elif isinstance(action, str):
        text, action = action, Action(text=action)
    elif isinstance(action, dict):
        action = Action.model_validate(action)
        text = action.text
    else:
        raise TypeError(f"an action is text, an Action or a dict, not {type(action).__name__}")
    clean = sanitize_text(text)
    return action if clean == text else action.model_copy(update={"text": clean})


def _sanitize_calls(calls: list[ToolCall]) -> tuple[list[ToolCall], str | None]:
    """Structured calls cleaned as parsed ones are; a too deeply nested one drops them all, with why."""
    clean: list[ToolCall] = []
    for call in calls:
        try:
            clean.append(clean_call(call))
        except ValueError as exc:
            return [], f"malformed tool call `{sanitize_text(call.name)}`: {exc}"
    return clean, None
