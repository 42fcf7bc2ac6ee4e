"""MCP over JSON-RPC 2.0: the env's tools, listed and callable, at ``POST /mcp`` and over ``/ws``.

Two kinds of client speak it:

- OpenEnv's ``MCPToolClient`` (production mode) creates a session with the extension method
  ``openenv/session/create``, attaches its WebSocket with ``?session_id=``, and calls
  ``tools/list`` / ``tools/call`` with ``params.session_id``; it closes with
  ``openenv/session/close``.
- A plain MCP client (streamable HTTP, JSON responses) sends ``initialize``: that creates a
  session, starts an episode, returns the task as the server's ``instructions`` and the session
  id in the ``Mcp-Session-Id`` header; ``envhub/reset`` starts another episode.

A tool call is one env step with a structured tool call, so it counts against the episode's
budgets exactly like a tool call the model wrote as text; the episode's reward and outcome come
back in ``structuredContent``. Per the MCP spec an unknown tool is a JSON-RPC error (-32602),
while arguments that do not fit the tool's schema are a tool result with ``isError`` -- the env
tells the agent what was wrong, as it would for a text action. JSON-RPC errors travel in HTTP 200
responses (``openenv validate`` requires exactly that for ``POST /mcp {}``); only a ``POST /mcp``
without a body, which the OpenAPI document requires, is an HTTP 400 (with a JSON-RPC parse error).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import envhub
from envhub.server.ops import Ops, ProtocolError
from envhub.server.sessions import CapacityError, Session, SessionManager
from envhub.types import Action, Observation, ToolCall, ToolSpec

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
SERVER_ERROR = -32000

PROTOCOL_VERSIONS = ("2025-06-18", "2025-03-26", "2024-11-05")


@dataclass
class RpcOutcome:
    """A JSON-RPC response (None for a notification) and the session an ``initialize`` made."""

    response: dict[str, Any] | None
    new_session: str | None = None


def error(code: int, message: str, request_id: Any = None, data: Any = None) -> dict[str, Any]:
    err: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        err["data"] = data
    return {"jsonrpc": "2.0", "id": request_id, "error": err}


def _ok(result: Any, request_id: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "result": result}


def check_request(obj: Any) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """(request, None) for a well-formed JSON-RPC 2.0 request, else (None, error response)."""
    if not isinstance(obj, dict):
        return None, error(INVALID_REQUEST, "a JSON-RPC request is a JSON object (batches are not supported)")
    request_id = obj.get("id")
    if not isinstance(request_id, str | int | type(None)) or isinstance(request_id, bool):
        return None, error(INVALID_REQUEST, "id must be a string, an integer or null")
    if obj.get("jsonrpc") != "2.0":
        return None, error(INVALID_REQUEST, 'jsonrpc must be "2.0"', request_id)
    if not isinstance(obj.get("method"), str):
        return None, error(INVALID_REQUEST, "method must be a string", request_id)
    if "params" in obj and not isinstance(obj["params"], dict):
        return None, error(INVALID_PARAMS, "params must be an object", request_id)
    unknown = set(obj) - {"jsonrpc", "method", "params", "id"}
    if unknown:
        return None, error(INVALID_REQUEST, f"unexpected members: {sorted(unknown)}", request_id)
    return obj, None


class McpHandler:
    def __init__(self, manager: SessionManager, ops: Ops, tools: list[ToolSpec], env_id: str) -> None:
        self.manager = manager
        self.ops = ops
        self.tools = {t.name: t for t in tools}
        self.env_id = env_id

    def tool_list(self) -> list[dict[str, Any]]:
        return [{"name": t.name, "description": t.description, "inputSchema": t.parameters}
                for t in self.tools.values()]

    async def handle(self, request: dict[str, Any], session: Session | None) -> RpcOutcome:
        """One checked request (see :func:`check_request`); ``session`` is the caller's, if any."""
        method: str = request["method"]
        params: dict[str, Any] = request.get("params") or {}
        request_id = request.get("id")
        notification = "id" not in request
        try:
            if session is None and isinstance(params.get("session_id"), str):
                session = self.manager.get(params["session_id"])
                if session is None:
                    raise _RpcError(INVALID_PARAMS, "unknown or expired session_id")
            outcome = await self._dispatch(method, params, session, request_id)
        except _RpcError as exc:
            outcome = RpcOutcome(error(exc.code, exc.message, request_id, exc.data))
        except ProtocolError as exc:
            code = INVALID_PARAMS if exc.status in (404, 422) else SERVER_ERROR
            outcome = RpcOutcome(error(code, exc.message, request_id, {"code": exc.code}))
        if notification:
            outcome.response = None
        return outcome

    async def _dispatch(self, method: str, params: dict[str, Any], session: Session | None,
                        request_id: Any) -> RpcOutcome:
        if method.startswith("notifications/"):
            return RpcOutcome(None)
        if method == "ping":
            return RpcOutcome(_ok({}, request_id))
        if method == "tools/list":
            return RpcOutcome(_ok({"tools": self.tool_list()}, request_id))
        if method == "tools/call":
            return RpcOutcome(_ok(await self._call_tool(params, session), request_id))
        if method == "initialize":
            return await self._initialize(params, session, request_id)
        if method == "envhub/reset":
            if session is None:
                raise _RpcError(INVALID_PARAMS, "envhub/reset needs a session")
            obs = await self.ops.reset(session, {k: v for k, v in params.items() if k != "session_id"})
            return RpcOutcome(_ok({"instructions": _instructions(obs), "info": obs.info}, request_id))
        if method == "openenv/session/create":
            if session is not None:
                return RpcOutcome(_ok({"session_id": session.id}, request_id))
            created = await self._create("mcp")
            return RpcOutcome(_ok({"session_id": created.id}, request_id))
        if method == "openenv/session/close":
            target = params.get("session_id")
            if not isinstance(target, str) or not target:
                raise _RpcError(INVALID_PARAMS, "params.session_id is required")
            if not await self.manager.close(target, "closed"):
                raise _RpcError(INVALID_PARAMS, "unknown or expired session_id")
            return RpcOutcome(_ok({"session_id": target, "closed": True}, request_id))
        raise _RpcError(METHOD_NOT_FOUND, f"method not found: {method}")

    async def _create(self, route: str) -> Session:
        try:
            return await self.manager.create(route)
        except CapacityError as exc:
            raise _RpcError(SERVER_ERROR, str(exc), {
                "code": "CAPACITY_REACHED", "active_sessions": exc.active, "max_sessions": exc.maximum,
                "retry_after_s": exc.retry_after_s}) from None

    async def _initialize(self, params: dict[str, Any], session: Session | None, request_id: Any) -> RpcOutcome:
        wanted = params.get("protocolVersion")
        version = wanted if wanted in PROTOCOL_VERSIONS else PROTOCOL_VERSIONS[0]
        created = None
        if session is None:
            session = created = await self._create("mcp")
        obs = await self.ops.reset(session, {})
        result = {
            "protocolVersion": version,
            "capabilities": {"tools": {"listChanged": False}},
            "serverInfo": {"name": self.env_id, "version": envhub.__version__},
            "instructions": _instructions(obs),
        }
        return RpcOutcome(_ok(result, request_id), created.id if created else None)

    async def _call_tool(self, params: dict[str, Any], session: Session | None) -> dict[str, Any]:
        name = params.get("name")
        arguments = params.get("arguments", {})
        if not isinstance(name, str) or not name:
            raise _RpcError(INVALID_PARAMS, "params.name (the tool) is required")
        if name not in self.tools:
            raise _RpcError(INVALID_PARAMS, f"unknown tool: {name!r}; tools: {', '.join(self.tools)}")
        if not isinstance(arguments, dict):
            raise _RpcError(INVALID_PARAMS, "params.arguments must be an object")
        if session is None:
            raise _RpcError(INVALID_PARAMS, "tools/call needs a session: send the Mcp-Session-Id or "
                            "X-Envhub-Session header, or params.session_id (from initialize or "
                            "openenv/session/create)")
        action = Action(tool_calls=[ToolCall(name=name, arguments=arguments)])
        obs = await self.ops.step_action(session, action)
        return tool_result(obs)


def _result_parts(obs: Observation) -> tuple[str, dict[str, Any], bool]:
    """(text, structured content, is_error) of one env step's tool result."""
    text = "\n".join(m.content for m in obs.messages)
    if obs.done:
        text = (text + "\n" if text else "") + f"[episode finished: outcome={obs.outcome} reward={obs.reward}]"
    is_error = any(m.content.startswith(("Error:", "Format error:")) for m in obs.messages)
    structured = {"done": obs.done, "reward": _finite(obs.reward), "truncated": obs.truncated,
                  "outcome": obs.outcome.value if obs.outcome else None, "info": obs.info}
    return text, structured, is_error


def tool_result(obs: Observation) -> dict[str, Any]:
    """An MCP ``CallToolResult`` for one env step (``data`` is what OpenEnv's client returns)."""
    text, structured, is_error = _result_parts(obs)
    return {"content": [{"type": "text", "text": text}], "structuredContent": structured,
            "isError": is_error, "data": text}


# ---- OpenEnv's MCP actions on /step and /ws --------------------------------------------------
# OpenEnv's MCPEnvironment answers ListToolsAction / CallToolAction with a ListToolsObservation /
# CallToolObservation in the usual step envelope; its MCPToolClient tells them apart by the
# observation's keys (``tools``, ``tool_name``), so a call's observation never carries ``tools``.


def list_tools_envelope(tools: list[ToolSpec]) -> dict[str, Any]:
    """The step envelope of a ``ListToolsObservation``."""
    listed = [{"name": t.name, "description": t.description, "input_schema": t.parameters} for t in tools]
    return {"observation": {"metadata": {}, "tools": listed}, "reward": None, "done": False}


def call_tool_envelope(tool_name: str, obs: Observation) -> dict[str, Any]:
    """The step envelope of a ``CallToolObservation`` for one env step: ``result`` is the tool result
    in the shape of FastMCP's ``CallToolResult`` (``data`` is the text OpenEnv's client returns);
    arguments that do not fit the tool are a result with ``is_error``, as in ``tools/call``. The
    episode's messages, outcome and verdict ride along for clients that read them."""
    text, structured, is_error = _result_parts(obs)
    body = {
        "metadata": obs.info, "tool_name": tool_name,
        "result": {"content": [{"type": "text", "text": text}], "structured_content": structured,
                   "meta": None, "data": text, "is_error": is_error},
        "error": None,
        **obs.model_dump(mode="json", include={"messages", "truncated", "outcome", "verdict"}),
    }
    out = {"observation": body, "reward": _finite(obs.reward), "done": obs.done}
    if obs.info:  # as OpenEnv's serialize_observation: its client reads a null metadata as an error
        out["metadata"] = obs.info
    return out


def tool_not_found_envelope(tool_name: str, tools: list[str], done: bool) -> dict[str, Any]:
    """OpenEnv's answer to a call of a tool the env does not have: an error, and no step taken."""
    error = {"error_type": "tool_not_found",
             "message": f"unknown tool: {tool_name!r}; tools: {', '.join(tools)}"}
    return {"observation": {"metadata": {}, "tool_name": tool_name, "result": None, "error": error},
            "reward": None, "done": done}


def _finite(x: float) -> float | None:
    """JSON has no NaN or infinity: a verifier bug must not break the framing."""
    return x if math.isfinite(x) else None


def _instructions(obs: Observation) -> str:
    return "\n\n".join(m.content for m in obs.messages if m.role in ("system", "user"))


class _RpcError(Exception):
    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data
