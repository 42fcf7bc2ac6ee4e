"""The env base class for multi-turn, tool-using text environments.

A task family subclasses :class:`Env` and supplies four things: where tasks come from
(``load_tasks``), the tools (methods marked with :func:`envhub.tools.tool`), the verifier
(``make_verifier``) and a scripted gold solution (``gold_actions``). Everything an episode needs
beyond that -- parsing the model's text, validating arguments, budgets, outcomes, timings -- lives
here once, so no family re-implements it. The episode's state is :class:`~envhub.episode.Episode`;
the tasks' source is :class:`~envhub.task_source.TaskSource`.

``step`` never raises for anything the model wrote. It raises only for caller errors (stepping a
finished episode), and turns infrastructure faults into the ``env_error`` outcome.
"""

from __future__ import annotations

import contextlib
import random
import time
import traceback
from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING, Any, ClassVar

from envhub.budget import Budget, check_budget
from envhub.episode import Episode, SuiteCase, Verifier
from envhub.errors import EpisodeFinishedError, InfraError, ToolError
from envhub.parsing import PARSERS, TOOL_CALL_EXAMPLE, ToolCallParser, action_calls, read_action
from envhub.rebuild import RebuiltOnCopy
from envhub.task_source import SPLITS, TaskSource, shared_source
from envhub.tools import ToolArgumentError, ToolDef, collect_tools
from envhub.types import Action, Message, Outcome, Task, ToolCall, Turn, Verdict

if TYPE_CHECKING:
    from envhub.sandboxes.base import Limits, Sandbox, SandboxSpec
    from envhub.types import Observation, Sample, ToolSpec


class Env(RebuiltOnCopy):
    """Base class of every envhub environment (copies: :mod:`envhub.rebuild`).

    The episode API (:class:`~envhub.episode.EpisodeEnv`): :meth:`reset`, :meth:`step`, :meth:`abort`,
    :meth:`record_observation_ids`, :meth:`close`, :attr:`episode`, :attr:`tasks`,
    :attr:`terminal_tool`, :meth:`gold_actions`, ``env_id``, ``version``, ``split``. Also public:
    :attr:`budget`, :attr:`parser`, :attr:`sandboxes`, :attr:`verifier`, :attr:`tool_specs`,
    :meth:`initial_observation`, :meth:`play`, :meth:`use_tasks`, :meth:`sandbox`, :meth:`grading_sandbox`.

    A family overrides :meth:`load_tasks`, :meth:`make_verifier` (or :meth:`verifier_for`) and
    :meth:`gold_actions`; optionally :meth:`task_cache_key`, :meth:`system_prompt`,
    :meth:`setup_episode`, :meth:`episode_budget`, :meth:`adversarial_cases`,
    :meth:`submission_actions` and the class attributes below. Its tools are methods marked ``@tool``,
    the one that submits ``@tool(terminal=True)``.
    """

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
        from envhub.sandboxes.door import SandboxDoor  # import envhub loads no sandbox module

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

    def verifier_for(self, episode: Episode) -> Verifier:
        """The verifier of ``episode``'s submission, asked for at submit: the env's :attr:`verifier`,
        unless a family makes one per episode from what the episode holds then (its raising counts
        as ``verify``'s)."""
        return self.verifier

    def judge_pins(self) -> dict[str, dict[str, Any]]:
        """The pins of the LLM judges this env's verifier consults (check name -> pin as a dict;
        :class:`envhub.judges.JudgePin`), {} for an env without one. Runs record them
        and refuse to resume under others. Loads the judges (their weights are in the pin)."""
        try:
            verifier = self.verifier
        except NotImplementedError:  # a family that makes a verifier per episode has no judge here
            return {}
        return {check.name: check.pin().to_dict() for check, _weight in getattr(verifier, "quality", ())
                if callable(getattr(check, "pin", None))}

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
        """The env's task source, loaded on first use (shared per ``task_cache_key``)."""
        if self._tasks is None:
            key = self.task_cache_key()
            load = self.load_tasks
            self._tasks = load() if key is None else shared_source((type(self), key), load)
        return self._tasks

    def use_tasks(self, source: TaskSource) -> None:
        """Use an already-loaded task source, e.g. one that a server shares across its sessions."""
        self._tasks = source

    @property
    def verifier(self) -> Verifier:
        """The env's verifier, made by :meth:`make_verifier` on first use."""
        if self._verifier is None:
            self._verifier = self.make_verifier()
        return self._verifier

    @property
    def tool_specs(self) -> list[ToolSpec]:
        return [t.spec for t in self._tools.values()]

    def reset(
        self, *, seed: int | None = None, task_id: str | None = None, options: dict[str, Any] | None = None
    ) -> Observation:
        """Start an episode (the last one's sandbox is released first).

        Args:
            seed: seeds the pick of a task of the split when no ``task_id`` is given.
            task_id: the task to run (or ``options["task_id"]``).
            options: Gymnasium's reset options; only ``task_id`` is read.

        Returns:
            The system and task prompts, with the tools; already done (``env_error``) when the
            episode's setup failed.

        Raises:
            ValueError: no task is named and the split has none.
            KeyError: the task source has no such task.
        """
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
        self._initial = episode.opening()
        return self._initial

    def step(self, action: str | Action | dict[str, Any], *, sample: Sample | None = None) -> Observation:
        """Apply one policy turn: run its tool calls, grade a submission.

        Args:
            action: the policy's text, an :class:`~envhub.types.Action` or an Action's dict.
            sample: how a model produced ``action`` (token ids, logprobs, ...), recorded on the
                turn as it is; nothing the env decides depends on it.

        Returns:
            Only the new messages (tool results or errors), and the verdict once the episode ends.
            An invalid action is a format error, a fault of ours the ``env_error`` outcome.

        Raises:
            EpisodeFinishedError: no episode is running.
            TypeError: ``action`` is none of the three (ValueError: a dict that is no Action).
        """
        episode = self.episode
        if episode is None or episode.done:
            raise EpisodeFinishedError("no episode is running: call reset() first")
        action, call_error = read_action(action)
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
            new = self._apply(episode, turn, action, call_error)
        except InfraError as exc:
            self._finish(Outcome.ENV_ERROR, f"{exc}")
        except Exception as exc:
            self._finish(Outcome.ENV_ERROR, f"{exc!r}\n{traceback.format_exc()}")
        if not episode.done and (used_up := episode.over_budget()):
            self._finish(Outcome.BUDGET_EXHAUSTED, used_up)
        turn.observation = new
        episode.messages.extend(new)
        turn.timings["env_s"] = time.monotonic() - t0
        return episode.observation(new)

    def abort(self, outcome: Outcome, detail: str) -> Observation:
        """End the running episode from outside (engine failure, context overflow, ...).

        Args:
            outcome: its outcome (reward 0).
            detail: why: the verdict's ``detail``.

        Returns:
            The final observation, with no messages; an episode already ended keeps its verdict.

        Raises:
            EpisodeFinishedError: no episode was started (or the env was closed since).
        """
        if self.episode is not None and not self.episode.done:
            self._finish(outcome, detail)
        return self._require_episode().observation([])

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

    def _apply(self, episode: Episode, turn: Turn, action: Action, error: str | None) -> list[Message]:
        """Run the tool calls of ``action``; ``error`` says why its structured calls cannot run."""
        budget = episode.budget
        calls, error = ([], error) if error else action_calls(action, self.parser, budget.max_action_chars)
        if error:
            reply = self._invalid(episode, turn, error)
            return [reply] if reply is not None else []
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
            return self._invalid(episode, turn, f"unknown tool `{call.name}`; available: {known}", call)
        try:
            args = tdef.validate(call.arguments)
        except ToolArgumentError as exc:
            return self._invalid(episode, turn, str(exc), call)
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
        return Message(role="tool", name=call.name, tool_call_id=call.id, content=episode.clip(result))

    def _grade(self, episode: Episode) -> None:
        t0 = time.monotonic()
        try:
            verdict = self.verifier_for(episode).verify(episode.task, episode.submission or {}, episode)
        except InfraError as exc:
            verdict = Verdict(reward=0.0, outcome=Outcome.ENV_ERROR, detail=str(exc))
        except Exception as exc:
            detail = f"{exc!r}\n{traceback.format_exc()}"
            verdict = Verdict(reward=0.0, outcome=Outcome.VERIFIER_ERROR, detail=detail)
        episode.metrics.verifier_seconds += time.monotonic() - t0
        self._finish(verdict.outcome, verdict.detail, verdict)

    def _invalid(self, episode: Episode, turn: Turn, reason: str, call: ToolCall | None = None
                 ) -> Message | None:
        """Count an invalid action -- or, with ``call``, an invalid tool call of it -- and answer it
        (as the user, or as that call's tool result); past the retries, end the episode instead."""
        left = episode.count_invalid(turn, reason)
        if left < 0:
            what = "actions" if call is None else "tool calls"
            self._finish(Outcome.FORMAT_ERROR, f"too many invalid {what}; last: {reason}")
            return None
        if call is None:
            return Message(role="user", content=f"Format error: {reason}. ({left} retries left)")
        return Message(role="tool", name=call.name, tool_call_id=call.id,
                       content=f"Error: {reason}. ({left} retries left)")

    def _finish(self, outcome: Outcome, detail: str, verdict: Verdict | None = None) -> None:
        episode = self._require_episode()
        episode.end(verdict or Verdict(reward=0.0, outcome=outcome, detail=detail))
        self.sandboxes.release(episode, wait=False)
