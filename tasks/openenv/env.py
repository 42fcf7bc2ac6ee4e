"""``envhub.make("openenv:http://HOST:PORT")``: a running OpenEnv server as an envhub env (or
``openenv:DIR``: an OpenEnv package directory, whose server the env starts; see :mod:`.package`).

:class:`OpenEnvBridge` is an :class:`~envhub.env.Env` (so parsing, budgets, format errors, the
episode record and metrics are envhub's own) whose tools are the server's:

- an **MCP environment** (its ``/schema`` action is OpenEnv's ``CallToolAction``, or it answers a
  ``list_tools`` step with tools) offers its MCP tools, listed once at construction; each call of
  one is one ``call_tool`` step on the ``/ws`` session;
- a **typed-action environment** becomes one tool (``action_tool``, default ``act``) whose
  arguments are the action schema from ``/schema`` (less OpenEnv's ``metadata``); a call is one
  step with those arguments as the action.

``reset`` opens (or reuses) the stateful ``/ws`` session and sends ``reset`` with the task's data
(see :mod:`.hosted_tasks`); the server's reset observation is the opening prompt. Reward and done
come from the server: the episode ends on the first step the server says is done, with that
step's reward (each step's reward is kept in ``episode.scratch["rewards"]``). The outcome is the
server's own where it names an envhub outcome (an envhub server does), else ``success`` when the
reward reaches ``success_reward`` and ``wrong_answer`` below it. A reward that is no finite number,
or outside the declared range, is ``wrong_answer`` at the range's floor: it came in reply to the
agent's action, which may have provoked it, so it can never be an infra outcome the loss leaves out
(nor, clamped, a success); ``envhub verify``'s oracle row shows a grader that breaks its range.

Failures, by whose they are: a lost or refused connection, a timeout, a server error
or an MCP ``transport_error`` / ``timeout`` ends the episode as ``env_error``; except that a server
this env runs (a package directory) that goes down on a step is started afresh and the episode's
steps are replayed on it: down again, the actions bring it down and the episode is the agent's
``format_error`` (an agent must never be able to make its failure infra); an action the server rejects (``VALIDATION_ERROR``) or an MCP tool error
of the call itself (``invalid_args``, ``tool_not_found``, ``execution_error``) is the agent's tool
error, answered as the tool's result, and the episode goes on.

A hosted server has no reference solution: :meth:`OpenEnvBridge.gold_actions` raises.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict

from envhub.budget import Budget
from envhub.env import Env
from envhub.episode import Episode
from envhub.errors import ToolError
from envhub.parsing import ToolCallParser
from envhub.tools import ToolDef
from envhub.types import Action, Message, Outcome, Task, ToolSpec, Verdict

from .container import PackageContainer
from .hosted_tasks import HostedTasks
from .package import PackageServer, is_package, package_python
from .session import ActionEndedSession, ActionRejected, OpenEnvSession, ServerFault

PREFIX = "openenv:"
MODES = ("auto", "mcp", "typed")
#: MCP tool error types that are a failure of the way to the tool, not of the call: ``env_error``.
TRANSPORT_ERRORS = frozenset({"transport_error", "timeout"})
#: Tool names taken as the terminal tool (what a noop submission calls) when none is named.
TERMINAL_NAMES = ("answer", "submit", "submit_answer", "final_answer", "finish")
_PROMPT_FIELDS = ("prompt", "instructions", "question", "text", "message", "content")
#: string fields of an observation that are no text for the agent
_NOT_TEXT = frozenset({"done", "reward", "tools", "metadata", "outcome", "error", "episode_id", "type"})


class _AnyArguments(BaseModel):
    """Arguments pass through unchecked: the server, not the bridge, decides what is valid."""

    model_config = ConfigDict(extra="allow")


class OpenEnvBridge(Env):
    """One session on a running OpenEnv server, as an envhub env. See the module docstring.

    Args:
        url: the server (``http://host:port``; ``ws://`` works too), or an OpenEnv package directory
            (``openenv.yaml``), whose server the env starts and stops (:mod:`.package`); its
            ``validation.reward.range`` is honoured: a reward outside it is ``wrong_answer`` at its floor.
        mode: ``mcp``, ``typed``, or ``auto`` (decided from ``/schema`` and a ``list_tools`` probe).
        task_ids: the server's task ids, reset as ``{"task_id": id}`` (split by hash); default: the
            server's own listing where it has one, else ``num_tasks`` numbered seeds.
        num_tasks: how many numbered seeds (``seed-0`` ...) make the task list.
        terminal_tool: the tool a submission calls; default: one named like ``answer`` / ``submit``,
            or the typed-action tool.
        action_tool: the name of a typed-action environment's one tool.
        success_reward: the reward at or above which a done episode is a ``success``.
        headers: extra HTTP headers (say ``Authorization``) for every request.
        timeout_s: how long one reply may take before the episode ends as ``env_error``.
        reward_range: the server's rewards, ``(low, high)``: one outside is ``wrong_answer`` at ``low``, and
            ``envhub verify`` checks the floor and the top against it; default: the package's
            ``validation.reward.range``, else none.
        docker: run a package directory from its Dockerfile (:mod:`.container`) instead of in this
            interpreter.
        venv: run a package directory in an environment made for it: the package pip-installed with
            its dependencies (:func:`.package.package_python`).
        max_action_bytes: the largest step the bridge sends; a larger one is the agent's tool error
            (a server closes the session on a message over its limit).
        split, budget, parser: as :class:`~envhub.env.Env`'s; ``sandbox`` and ``sandbox_pool`` are
            taken (every env takes them) but unused: the server runs the tools.

    Raises:
        ValueError: a malformed URL or an unknown ``mode``.
        ServerFault: the server cannot be reached or does not speak OpenEnv's protocol.
    """

    family: ClassVar[str] = "openenv"
    version: ClassVar[str] = "0"
    default_budget: ClassVar[Budget] = Budget()
    needs_isolation: ClassVar[bool] = False

    def __init__(self, url: str, *, mode: str = "auto", task_ids: list[str] | None = None,
                 num_tasks: int = 1000, terminal_tool: str | None = None, action_tool: str = "act",
                 success_reward: float = 1.0, headers: dict[str, str] | None = None,
                 timeout_s: float = 300.0, max_action_bytes: int = 512 * 1024, docker: bool = False,
                 venv: bool = False,
                 reward_range: tuple[float, float] | list[float] | None = None,
                 split: str = "train",
                 budget: Budget | dict[str, Any] | None = None,
                 parser: str | ToolCallParser = "default", sandbox: str = "auto", sandbox_pool: int = 8) -> None:
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r}; choose one of {', '.join(MODES)}")
        super().__init__(split=split, budget=budget, parser=parser, sandbox=sandbox, sandbox_pool=sandbox_pool)
        #: the server this env started from a package directory (None for a URL)
        self.package: PackageServer | PackageContainer | None = None
        self._start_package: Callable[[], PackageServer | PackageContainer] | None = None
        if is_package(url):
            if docker and venv:
                raise ValueError("docker=True and venv=True: choose one way to run the package")
            python = package_python(url) if venv else None
            self._start_package = ((lambda: PackageContainer(url)) if docker
                                   else (lambda: PackageServer(url, python=python)))
            self.package = self._start_package()
        elif docker or venv:
            raise ValueError(f"docker=True and venv=True run an OpenEnv package directory; {url!r} is none")
        self.reward_range: tuple[float, float] | None = (
            (float(reward_range[0]), float(reward_range[1])) if reward_range is not None
            else self.package.reward_range if self.package is not None else None)
        try:
            self._session_args: dict[str, Any] = {"headers": headers, "timeout_s": timeout_s}
            self.session = OpenEnvSession(self.package.url if self.package is not None else url,
                                          **self._session_args)
        except BaseException:
            self._stop_package()
            raise
        where = str(self.package.directory) if self.package is not None else self.session.base_url
        self.env_id = PREFIX + where  # type: ignore[misc]
        self.success_reward = success_reward
        self.max_action_bytes = max_action_bytes
        self._terminal = terminal_tool
        self._given_ids = task_ids
        self._num_tasks = num_tasks
        try:
            self.session.get_json("/health")
            schema = self.session.try_get_json("/schema")
            self.action_schema: dict[str, Any] = dict((schema or {}).get("action") or {})
            tools = None if mode == "typed" else self._probe_mcp(forced=mode == "mcp")
            self.mode = "typed" if tools is None else "mcp"
            specs = tools if tools is not None else [self._action_spec(action_tool)]
        except BaseException:
            self.session.close()
            self._stop_package()
            raise
        self._tools = {spec.name: ToolDef(spec=spec, args_model=_AnyArguments, fn=_remote_tool(spec.name),
                                          terminal=False) for spec in specs}

    # ---- discovery ----------------------------------------------------------------------------

    def _probe_mcp(self, *, forced: bool) -> list[ToolSpec] | None:
        """The server's MCP tools, or None when it is a typed-action environment."""
        props = self.action_schema.get("properties") or {}
        mcp_schema = "tool_name" in props or self.action_schema.get("title") in ("CallToolAction",
                                                                                "ListToolsAction")
        try:
            reply = self.session.request("step", {"type": "list_tools"})
        except ActionRejected:
            reply = None
        except ServerFault as exc:
            if forced or mcp_schema or exc.code not in ("EXECUTION_ERROR", "UNKNOWN_TYPE"):
                raise
            reply = None
        listed = ((reply or {}).get("observation") or {}).get("tools")
        if not isinstance(listed, list):
            if forced or mcp_schema:
                raise ServerFault(f"{self.session.base_url} answered list_tools with no tools", "NOT_MCP")
            return None
        return [ToolSpec(name=str(t["name"]), description=str(t.get("description") or t["name"]),
                         parameters=dict(t.get("input_schema") or t.get("inputSchema")
                                         or {"type": "object", "properties": {}}))
                for t in listed if isinstance(t, dict) and t.get("name")]

    def _action_spec(self, name: str) -> ToolSpec:
        schema = json.loads(json.dumps(self.action_schema)) or {"type": "object", "properties": {}}
        schema.get("properties", {}).pop("metadata", None)
        if "required" in schema:
            schema["required"] = [r for r in schema["required"] if r != "metadata"]
        description = str(schema.pop("description", "") or f"Take one step of {self.session.base_url}")
        schema.pop("title", None)
        return ToolSpec(name=name, description=description, parameters=schema)

    # ---- Env hooks ----------------------------------------------------------------------------

    @property
    def terminal_tool(self) -> str:
        if self._terminal is not None:
            return self._terminal
        names = list(self._tools)
        for name in TERMINAL_NAMES:
            if name in names:
                return name
        if self.mode == "typed":
            return names[0]
        raise ValueError(f"{self.env_id} names no terminal tool among {', '.join(names)}; "
                         "pass terminal_tool=")

    def load_tasks(self) -> HostedTasks:
        if self._given_ids is not None:
            from .hosted_tasks import split_of

            listed: dict[str, list[str]] = {}
            for tid in self._given_ids:
                listed.setdefault(split_of(tid), []).append(tid)
            return HostedTasks(self.env_id, listed=listed)
        info = self.session.try_get_json("/envhub/info")
        if isinstance(info, dict) and "task_set" in info:  # the server documents its task ids
            listed = {}
            for split in ("train", "validation", "test"):
                body = self.session.try_get_json("/envhub/tasks", {"split": split})
                listed[split] = list((body or {}).get("task_ids") or [])
            return HostedTasks(self.env_id, listed=listed, version=str(info["task_set"]))
        return HostedTasks(self.env_id, num_tasks=self._num_tasks)

    def make_verifier(self) -> Any:
        raise NotImplementedError("a hosted OpenEnv server grades its own episodes; the bridge has no verifier")

    def gold_actions(self, task: Task) -> list[Action]:
        raise NotImplementedError(f"{self.env_id} is a hosted server: it has no reference solution")

    def fidelity_plan(self, episodes: int) -> tuple[Any, Any]:
        """The oracle and the agreement check (our bridge against OpenEnv's own client) that
        ``envhub verify`` adds to the generic fidelity checks: :func:`.fidelity.fidelity_plan`."""
        from .fidelity import fidelity_plan

        return fidelity_plan(self, episodes=episodes)

    def setup_episode(self, episode: Episode) -> None:
        """Reset the server's episode; its reset observation becomes the opening messages."""
        source = self.tasks
        data = source.reset_data(episode.task.task_id) if isinstance(source, HostedTasks) else {}
        reply = self.session.request("reset", data)
        obs = reply.get("observation") or {}
        opening = _opening_messages(obs)
        if opening is None:
            prompt = _render(obs)
            episode.messages[-1] = Message(role="user", content=prompt)
        else:
            episode.messages = opening
            prompt = "\n\n".join(m.content for m in opening if m.role == "user")
        episode.task = episode.task.model_copy(update={"prompt": prompt})
        episode.scratch["rewards"] = []

    def close(self) -> None:
        """End the session, and stop the server where this env started it (a package directory)."""
        super().close()
        self.session.close()
        self._stop_package()

    def _stop_package(self) -> None:
        if self.package is not None:
            self.package.stop()

    # ---- a tool call --------------------------------------------------------------------------

    def call_remote(self, name: str, arguments: dict[str, Any]) -> str:
        """One step on the server for one tool call; the text the agent sees. Ends the episode
        when the server says done (see the module docstring for how failures are sorted)."""
        episode = self._require_episode()
        payload = ({"type": "call_tool", "tool_name": name, "arguments": arguments} if self.mode == "mcp"
                   else dict(arguments))
        size = len(json.dumps(payload, default=str).encode())
        if size > self.max_action_bytes:  # the server would close the session on it
            raise ToolError(f"the action is {size} bytes; this environment takes at most {self.max_action_bytes}")
        steps = episode.scratch.setdefault("wire_steps", [])
        steps.append(payload)
        try:
            reply = self.session.request("step", payload)
        except ServerFault as exc:
            if self.package is None or self.session.healthy() or not self._replay_brings_it_down(episode):
                raise
            self._finish(Outcome.FORMAT_ERROR, f"the server went down on the agent's action ({exc}), and again when "
                         "envhub replayed the episode's actions on a fresh server: the actions bring it down")
            return f"Error: the environment's server went down on this action: {exc}"
        except ActionRejected as exc:
            raise ToolError(f"the environment rejected the action: {exc.message}") from None
        except ActionEndedSession as exc:  # the server is up: this step ended it (a hang is the agent's time)
            self._finish(Outcome.BUDGET_EXHAUSTED if exc.timed_out else Outcome.FORMAT_ERROR, str(exc))
            return f"Error: {exc}"
        obs = reply.get("observation") or {}
        error = obs.get("error") if self.mode == "mcp" else None
        if isinstance(error, dict):
            kind, text = str(error.get("error_type", "")), str(error.get("message", ""))
            if kind in TRANSPORT_ERRORS:
                raise ServerFault(f"tool `{name}`: {text}", kind.upper())
            if not reply.get("done"):
                raise ToolError(f"{text} ({kind})")
        text = _tool_text(obs) if self.mode == "mcp" else _render(obs)
        reward = reply.get("reward")
        episode.scratch.setdefault("rewards", []).append(reward)
        if reply.get("done"):
            self._finish(Outcome.SUCCESS, "", self._verdict(reward, obs))
        return text

    def _restart_package(self) -> None:
        """A fresh server of the package this env runs (the old one stopped) and a session on it."""
        assert self._start_package is not None and self.package is not None
        self.session.close()
        self.package.stop()
        self.package = self._start_package()
        self.session = OpenEnvSession(self.package.url, **self._session_args)

    def _replay_brings_it_down(self, episode: Episode) -> bool:
        """The server this env runs went down on a step after the agent acted: start a fresh one,
        reset it to the episode's task and send the agent's steps again (the recorded wire requests).
        True when the server goes down again -- the agent's actions bring it down, so the episode is
        the agent's, never infra -- else False (a crash the replay does not reproduce stays infra).
        Either way a fresh server is left running for the episodes that follow."""
        source = self.tasks
        data = source.reset_data(episode.task.task_id) if isinstance(source, HostedTasks) else {}
        self._restart_package()
        try:
            self.session.request("reset", data)
            for payload in episode.scratch.get("wire_steps", []):
                self.session.request("step", payload)
        except (ActionRejected, ActionEndedSession):  # the replay went another way: the server is up
            return False
        except ServerFault:
            if self.session.healthy():
                return False
            self._restart_package()
            return True
        finally:
            self.session.disconnect()
        return False

    def _finish(self, outcome: Outcome, detail: str, verdict: Verdict | None = None) -> None:
        """envhub's own verdicts (a format error, a spent budget) earn the floor of a declared reward
        range, not 0: on a server whose floor is below 0, 0 would pay an agent for saying nothing."""
        if verdict is None and self.reward_range is not None and not outcome.is_infra:
            verdict = Verdict(reward=self.reward_range[0], outcome=outcome, detail=detail)
        super()._finish(outcome, detail, verdict)

    def _verdict(self, reward: Any, obs: dict[str, Any]) -> Verdict:
        if reward is None:
            reward = 0.0
        floor = self.reward_range[0] if self.reward_range is not None else 0.0
        if not isinstance(reward, int | float) or not math.isfinite(reward):
            return Verdict(reward=floor, outcome=Outcome.WRONG_ANSWER,
                           detail=f"the server's reward {reward!r} is no finite number")
        low, high = self.reward_range or (-math.inf, math.inf)
        if not low <= reward <= high:  # the grader broke its declared range, maybe provoked by the action
            return Verdict(reward=floor, outcome=Outcome.WRONG_ANSWER,
                           detail=f"the server's reward {reward} is outside its declared range [{low}, {high}]")
        named = obs.get("outcome")
        if named in Outcome.__members__.values():
            return Verdict(reward=float(reward), outcome=Outcome(named), detail="the server's outcome")
        outcome = Outcome.SUCCESS if reward >= self.success_reward else Outcome.WRONG_ANSWER
        return Verdict(reward=float(reward), outcome=outcome, detail=f"the server's reward {reward}")


def _remote_tool(name: str) -> Any:
    def call(env: OpenEnvBridge, **arguments: Any) -> str:
        return env.call_remote(name, arguments)

    call.__name__ = name
    return call


def _opening_messages(obs: dict[str, Any]) -> list[Message] | None:
    """The reset observation's own system and user messages (an envhub server sends them), or None."""
    raw = obs.get("messages")
    if not isinstance(raw, list) or not raw:
        return None
    try:
        messages = [Message.model_validate(m) for m in raw]
    except ValueError:
        return None
    return messages if any(m.role == "user" for m in messages) else None


def _render(obs: dict[str, Any]) -> str:
    """An observation as text: its prompt-like field (then its other text fields, labelled), its
    messages, else its fields as JSON."""
    metadata = obs.get("metadata")
    for where in (obs, metadata if isinstance(metadata, dict) else {}):
        for key in _PROMPT_FIELDS:
            if isinstance(where.get(key), str) and where[key]:
                others = [f"{k}:\n{v}" for k, v in where.items()  # say, a question's context
                          if k != key and k not in _NOT_TEXT and isinstance(v, str) and v.strip()]
                return "\n\n".join([str(where[key]), *others])
    messages = obs.get("messages")
    if isinstance(messages, list) and messages:
        return "\n\n".join(str(m.get("content", "")) for m in messages if isinstance(m, dict))
    rest = {k: v for k, v in obs.items() if k not in ("done", "reward", "tools") and v not in (None, "", {}, [])}
    return json.dumps(rest, sort_keys=True, default=str)


def _tool_text(obs: dict[str, Any]) -> str:
    """An MCP ``CallToolObservation``'s result as text (FastMCP's ``data``, else its text content)."""
    result = obs.get("result")
    if isinstance(result, dict):
        if isinstance(result.get("data"), str):
            text = result["data"]
        else:
            parts = [c.get("text", "") for c in result.get("content") or [] if isinstance(c, dict)]
            text = "\n".join(p for p in parts if p) or json.dumps(result.get("structured_content"), default=str)
        if result.get("is_error") and not text.startswith("Error"):
            text = f"Error: {text}"
        return text
    return "" if result is None else str(result)


__all__ = ["MODES", "PREFIX", "OpenEnvBridge"]
