"""The server's state in one object: config, the template env, sessions, operations, metrics.

One *template* env is built at start-up. It answers everything that needs no episode (tool
specs, task lists, metadata) and lends its loaded task source to every session's env: loading a
task set can take most of a second (the computation family generates thousands of problems), and
a task source is read-only with stable ids, so sharing it makes a new session cost microseconds.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from envhub.env import Env
from envhub.server.mcp import McpHandler, call_tool_envelope, list_tools_envelope, tool_not_found_envelope
from envhub.server.metrics import Metrics
from envhub.server.ops import Ops, ProtocolError
from envhub.server.sessions import Executor, Session, SessionConfig, SessionManager
from envhub.server.wire import SESSION_HEADER, CallToolWire, ListToolsWire, WireAction, step_result_json
from envhub.types import Action, ToolCall

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ServerConfig:
    """How a server behaves. The CLI (``envhub serve``) maps its flags onto this."""

    max_sessions: int = 64
    session_ttl_s: float = 300.0
    #: An attached WebSocket that sends nothing this long is closed; None = never.
    attached_idle_s: float | None = 3600.0
    #: Bearer token every request but ``/health`` must carry; None = no auth (loopback only).
    token: str | None = None
    #: Serve the reference solution of the running task (``gold``): for scripted evaluation only.
    expose_gold: bool = False
    executor: Executor = "auto"
    max_body_bytes: int = 1 << 20
    max_message_bytes: int = 1 << 20
    split: str = "train"
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    #: Agent sandboxes started before the server serves, and kept idle between episodes from then
    #: on: a burst of this many sessions finds a warm sandbox for each first tool call.
    prewarm: int = 0

    def sessions(self) -> SessionConfig:
        return SessionConfig(max_sessions=self.max_sessions, ttl_s=self.session_ttl_s,
                             attached_idle_s=self.attached_idle_s, executor=self.executor)


class IsolationUnavailable(RuntimeError):
    """The env runs agent code and nothing here can isolate it: the server does not start."""


class Hub:
    def __init__(self, factory: Callable[[], Env], config: ServerConfig, *, description: str = "") -> None:
        self.config = config
        template = factory()
        problem = template.sandboxes.isolation_problem()
        if problem is not None:
            template.close()
            raise IsolationUnavailable(f"{template.env_id} is not served here: {problem}")
        self.template = template
        self.env_id = template.env_id or type(template).__name__
        self.description = description or (type(template).__doc__ or self.env_id).strip().splitlines()[0]
        self.metrics = Metrics(self.env_id)
        tasks = None

        def session_factory() -> Env:
            nonlocal tasks
            env = factory()
            if tasks is None:
                tasks = template.tasks
            env.use_tasks(tasks)
            return env

        self.manager = SessionManager(session_factory, config.sessions(), self.metrics,
                                      inline_safe=type(template).sandbox_spec is None)
        self.ops = Ops(self.manager, expose_gold=config.expose_gold)
        self.tools = template.tool_specs
        self.mcp = McpHandler(self.manager, self.ops, self.tools, self.env_id)
        self._tools_reply = json.dumps(list_tools_envelope(self.tools))
        self.manager.metrics.set_sessions(0, 0, config.max_sessions)

    async def step_reply(self, session: Session | None, action: WireAction | CallToolWire | ListToolsWire) -> str:
        """The JSON step envelope for any action ``/step`` and ``/ws`` accept (see ``StepAction``).

        OpenEnv's ``list_tools`` needs no session; every other action steps the session's episode
        (``session`` None is stateless HTTP: 409). A ``call_tool`` of a tool the env does not have
        is answered with OpenEnv's ``tool_not_found`` error and takes no step, as ``tools/call``
        refuses it.
        """
        if isinstance(action, ListToolsWire):
            return self._tools_reply
        if session is None:
            raise ProtocolError(
                "EPISODE_NOT_RUNNING",
                "stateless /step has no episode to step (each stateless request gets a fresh env): "
                f"create a session (POST /envhub/sessions, or {SESSION_HEADER}: new on /reset) and "
                f"send its id in the {SESSION_HEADER} header, or use the /ws WebSocket", 409)
        if isinstance(action, CallToolWire):
            if action.tool_name not in self.mcp.tools:
                episode = session.env.episode
                return json.dumps(tool_not_found_envelope(action.tool_name, list(self.mcp.tools),
                                                          bool(episode and episode.done)))
            call = ToolCall(name=action.tool_name, arguments=action.arguments)
            obs = await self.ops.step_action(session, Action(tool_calls=[call]))
            return json.dumps(call_tool_envelope(action.tool_name, obs))
        return step_result_json(await self.ops.step_action(session, action.to_action()))

    @property
    def terminal_tool(self) -> str | None:
        try:
            return self.template.terminal_tool
        except StopIteration:
            return None

    def warm(self) -> None:
        """Load the task set once, before the first client waits for it."""
        try:
            self.template.tasks.task_ids(self.template.split)
        except Exception:  # a broken task source shows up on the first reset, with its message
            log.warning("loading the task set failed", exc_info=True)

    def prewarm(self) -> None:
        """Start ``config.prewarm`` agent sandboxes (see :class:`ServerConfig`), before the first client."""
        if self.config.prewarm <= 0:
            return
        t0 = time.monotonic()
        try:
            started = self.template.sandboxes.prewarm(self.config.prewarm)
        except Exception:  # sessions then start their sandboxes on demand, as without prewarm
            log.warning("prewarming the sandbox pool failed", exc_info=True)
            return
        if started:
            log.info("started %d sandboxes ahead of the first sessions in %.1fs", started, time.monotonic() - t0)

    def task_set_version(self) -> str:
        try:
            return str(self.template.tasks.version)
        except Exception:
            return ""


def registry_factory(env_id: str, *, split: str = "train", env_kwargs: dict[str, Any] | None = None
                     ) -> Callable[[], Env]:
    """A factory for a registered env (raises the registry's error for an unknown id now)."""
    from envhub.registry import get_spec, make

    get_spec(env_id)
    kwargs = dict(env_kwargs or {})

    def factory() -> Env:
        return make(env_id, split=split, **kwargs)

    return factory
