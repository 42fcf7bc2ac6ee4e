"""The FastAPI application: OpenEnv's routes, envhub's session extensions, MCP and metrics.

Routes and their contracts:

- OpenEnv's: ``POST /reset``, ``POST /step``, ``GET /state``, ``GET /health``, ``GET /metadata``,
  ``GET /schema``, ``WS /ws``, ``POST /mcp`` -- same paths, bodies and envelopes as
  ``openenv.core.env_server.http_server``, so OpenEnv's clients and ``openenv validate`` work.
- OpenEnv's HTTP routes are stateless (each request gets a fresh env), and stay so. Sending the
  ``X-Envhub-Session`` header makes them stateful instead: ``POST /envhub/sessions`` (or
  ``X-Envhub-Session: new`` on ``/reset``) creates a session, the header then routes ``/reset``,
  ``/step``, ``/state`` to its env, and ``DELETE /envhub/sessions/{id}`` ends it. A stateless
  ``/step`` has no episode to step and answers 409 saying so.
- ``GET /envhub/info``, ``GET /envhub/tasks``, ``POST /envhub/abort``, ``GET /envhub/gold``: what a
  remote client (:mod:`envhub.server.client`) needs to stand in for a local env.
- ``GET /metrics``: Prometheus text.

Every client error is a 4xx with ``{"code", "message"}``: malformed JSON 400, unknown fields and
wrong types 422 (naming the field), unknown session 404, stateless step 409, body too large 413,
capacity 503 with ``Retry-After``. A 5xx means a bug in envhub or in the env.
"""

from __future__ import annotations

import gc
import logging
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Annotated, Any, Literal

from fastapi import Body, FastAPI, Header, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

import envhub
from envhub.env import Env
from envhub.server import jsontext
from envhub.server.edge import Edge
from envhub.server.hub import Hub, ServerConfig, registry_factory
from envhub.server.jsontext import AsciiJSONResponse
from envhub.server.mcp import PARSE_ERROR, check_request, error
from envhub.server.ops import ProtocolError
from envhub.server.sessions import CapacityError, Session
from envhub.server.wire import (
    SESSION_HEADER,
    AbortRequest,
    EpisodeState,
    ErrorBody,
    GoldActions,
    HealthResponse,
    MetadataResponse,
    ResetRequest,
    SchemaResponse,
    ServerInfo,
    SessionCreated,
    StepReply,
    StepRequest,
    StepResult,
    TaskList,
    WireAction,
    step_result_json,
)
from envhub.server.ws import ws_endpoint
from envhub.types import Observation

log = logging.getLogger(__name__)

#: The OpenEnv HTTP API generation these routes implement (``openenv validate`` reads it).
API_VERSION = "1.0.0"
JSON = "application/json"

SessionHeader = Annotated[str | None, Header(
    alias=SESSION_HEADER, max_length=256,
    description="an envhub session id (stateful mode); `new` on /reset creates one",
)]


def _errors(*codes: int) -> dict[int | str, dict[str, Any]]:
    return {code: {"model": ErrorBody} for code in codes}


def create_app(env: str | Callable[[], Env], config: ServerConfig | None = None) -> FastAPI:
    """An ASGI app serving ``env`` (a registered env id, or a factory returning a new env)."""
    config = config or ServerConfig()
    factory = registry_factory(env, split=config.split, env_kwargs=config.env_kwargs) if isinstance(env, str) \
        else env
    description = ""
    if isinstance(env, str):
        from envhub.registry import get_spec

        description = get_spec(env).description
    hub = Hub(factory, config, description=description)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        await hub.manager.start()
        await hub.manager.call(hub.warm, inline=False)
        await hub.manager.call(hub.prewarm, inline=False)
        # Everything loaded so far (libraries, schemas, the task set) lives as long as the server:
        # keep it out of the cyclic GC's full collections, which would otherwise rescan it all,
        # on the event loop, every few thousand steps.
        gc.freeze()
        try:
            yield
        finally:
            await hub.manager.stop()

    app = FastAPI(
        title=f"envhub: {hub.env_id}",
        version=API_VERSION,
        description=f"OpenEnv-compatible server for `{hub.env_id}` (envhub {envhub.__version__}). "
                    "See docs/serving.md.",
        lifespan=lifespan,
        default_response_class=AsciiJSONResponse,
    )
    app.state.hub = hub
    _install_error_handlers(app)
    _openenv_routes(app, hub)
    _envhub_routes(app, hub)
    app.add_api_websocket_route("/ws", ws_endpoint)
    app.add_middleware(Edge, token=config.token, max_body_bytes=config.max_body_bytes, metrics=hub.metrics)
    app.openapi = lambda: _openapi_document(app)  # type: ignore[method-assign]
    return app


#: Where a JSON schema bounds a number. FastAPI's OpenAPI models hold these as floats, so 2**63 - 1
#: (the largest seed) came out as 2**63, a seed the server refuses.
_BOUNDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")


def _openapi_document(app: FastAPI) -> dict[str, Any]:
    """FastAPI's document, with the integer bounds of the request models as pydantic enforces them."""
    if app.openapi_schema is None:
        doc = FastAPI.openapi(app)
        schemas = doc.get("components", {}).get("schemas", {})
        for model in (ResetRequest,):
            if model.__name__ in schemas:
                _exact_bounds(schemas[model.__name__], model.model_json_schema())
    return app.openapi_schema or {}


def _exact_bounds(generated: Any, exact: Any) -> None:
    """Copy the integer bounds of ``exact`` into ``generated``, the same schema, in place."""
    if isinstance(generated, dict) and isinstance(exact, dict):
        for key, value in generated.items():
            bound = exact.get(key)
            if key in _BOUNDS and isinstance(bound, int) and not isinstance(bound, bool):
                generated[key] = bound
            else:
                _exact_bounds(value, bound)
    elif isinstance(generated, list) and isinstance(exact, list) and len(generated) == len(exact):
        for one, other in zip(generated, exact, strict=True):
            _exact_bounds(one, other)


# ---- errors ----------------------------------------------------------------------------------


def _install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ProtocolError)
    async def protocol_error(_: Request, exc: ProtocolError) -> JSONResponse:
        return JSONResponse(exc.body(), status_code=exc.status)

    @app.exception_handler(CapacityError)
    async def capacity_error(_: Request, exc: CapacityError) -> JSONResponse:
        return JSONResponse(
            {"code": "CAPACITY_REACHED", "message": str(exc)}, status_code=503,
            headers={"Retry-After": str(max(1, round(exc.retry_after_s)))},
        )

    @app.exception_handler(RequestValidationError)
    async def validation_error(_: Request, exc: RequestValidationError) -> JSONResponse:
        errors = [{"loc": list(e.get("loc", ())), "msg": str(e.get("msg", "")), "type": str(e.get("type", ""))}
                  for e in exc.errors()]
        if any(e["type"] == "json_invalid" for e in errors):
            return JSONResponse({"code": "INVALID_JSON", "message": "the body is not valid JSON",
                                 "errors": errors}, status_code=400)
        detail = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in errors)
        return JSONResponse({"code": "VALIDATION_ERROR", "message": f"invalid request: {detail}",
                             "errors": errors}, status_code=422)

    @app.exception_handler(RecursionError)
    async def too_deep(_: Request, exc: RecursionError) -> JSONResponse:  # a body nested past the stack
        return AsciiJSONResponse({"code": "INVALID_JSON", "message": "the body is nested too deeply"},
                                 status_code=400)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        # FastAPI raises 400 only when it cannot parse a body (e.g. nested past the stack)
        code = {400: "INVALID_JSON", 404: "NOT_FOUND", 405: "METHOD_NOT_ALLOWED"}.get(exc.status_code, "HTTP_ERROR")
        return JSONResponse({"code": code, "message": str(exc.detail)}, status_code=exc.status_code,
                            headers=getattr(exc, "headers", None))


def _session(hub: Hub, session_id: str) -> Session:
    session = hub.manager.get(session_id)
    if session is None:
        raise ProtocolError("SESSION_NOT_FOUND", "unknown or expired session id (sessions are reclaimed "
                            f"after {hub.config.session_ttl_s:g}s idle)", 404)
    return session


def _json(text: str, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(text, status_code=status, media_type=JSON, headers=headers)


# ---- OpenEnv's routes ------------------------------------------------------------------------


def _openenv_routes(app: FastAPI, hub: Hub) -> None:
    ops = hub.ops
    manager = hub.manager

    @app.post("/reset", response_model=StepResult, tags=["Environment Control"],
              responses=_errors(400, 401, 404, 413, 422, 503),
              summary="Start an episode (stateless, or in the X-Envhub-Session session)")
    async def reset(request: Annotated[ResetRequest | None, Body()] = None,
                    session_id: SessionHeader = None) -> Response:
        data = request.model_dump(exclude_none=True) if request is not None else {}
        if session_id == "new":
            session = await manager.create("reset")
            try:
                obs = await ops.reset(session, data)
            except BaseException:
                await manager.close(session.id, "closed")  # its id was never handed out
                raise
            return _json(step_result_json(obs), headers={SESSION_HEADER: session.id})
        if session_id:
            session = _session(hub, session_id)
        else:
            return _json(step_result_json(await _stateless_reset(hub, data)))
        return _json(step_result_json(await ops.reset(session, data)))

    @app.post("/step", response_model=StepReply, tags=["Environment Control"],
              responses=_errors(400, 401, 404, 409, 413, 422),
              summary="Apply one action (needs X-Envhub-Session: OpenEnv's stateless step has no episode)")
    async def step(request: StepRequest, session_id: SessionHeader = None) -> Response:
        if not session_id:
            return _json(await hub.step_reply(None, request.action))
        session = _session(hub, session_id)
        if request.request_id is not None and request.request_id == session.last_request_id \
                and session.last_reply is not None:
            return _json(session.last_reply)
        text = await hub.step_reply(session, request.action)
        if request.request_id is not None:
            session.last_request_id, session.last_reply = request.request_id, text
        return _json(text)

    @app.get("/state", response_model=EpisodeState, tags=["State Management"],
             responses=_errors(401, 404), summary="The episode's state (stateless: a fresh env's)")
    async def state(session_id: SessionHeader = None) -> Response:
        if not session_id:
            return _json(EpisodeState(env_id=hub.env_id, tools=hub.tools).model_dump_json())
        return _json((await ops.state(_session(hub, session_id))).model_dump_json())

    @app.get("/health", response_model=HealthResponse, tags=["Health"])
    async def health() -> HealthResponse:
        return HealthResponse()

    @app.get("/metadata", response_model=MetadataResponse, tags=["Environment Info"])
    async def metadata() -> MetadataResponse:
        return MetadataResponse(name=hub.env_id, description=hub.description,
                                version=str(hub.template.version), author="envhub",
                                documentation_url="docs/serving.md")

    schema = SchemaResponse(
        # envhub's own action, as OpenEnv lists its action_cls: the MCP actions (call_tool,
        # list_tools) are accepted besides it, as OpenEnv accepts them whatever action_cls is
        action=WireAction.model_json_schema(),
        observation=Observation.model_json_schema(),
        state=EpisodeState.model_json_schema(),
        reset_observation=Observation.model_json_schema(),
    )

    @app.get("/schema", response_model=SchemaResponse, tags=["Schema"],
             summary="JSON schemas of the action, the observation and the state")
    async def get_schema() -> SchemaResponse:
        return schema

    @app.get("/metrics", response_class=PlainTextResponse, tags=["Health"], summary="Prometheus metrics")
    async def metrics() -> PlainTextResponse:
        return PlainTextResponse(hub.metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")

    rpc_schema = {"type": "object", "required": ["jsonrpc", "method"], "properties": {
        "jsonrpc": {"const": "2.0"}, "method": {"type": "string"}, "params": {"type": "object"},
        "id": {"anyOf": [{"type": "string"}, {"type": "integer"}, {"type": "null"}]}}}
    rpc_error = {"type": "object", "required": ["jsonrpc", "id", "error"], "properties": {
        "jsonrpc": {"const": "2.0"}, "id": {"type": "null"}, "error": {
            "type": "object", "required": ["code", "message"],
            "properties": {"code": {"const": PARSE_ERROR}, "message": {"type": "string"}}}}}

    @app.post("/mcp", tags=["MCP"], summary="MCP JSON-RPC: tools/list, tools/call, initialize, sessions",
              openapi_extra={"requestBody": {"required": True, "content": {JSON: {"schema": rpc_schema}}}},
              responses={200: {"description": "a JSON-RPC response"},
                         202: {"description": "a notification was accepted"},
                         400: {"description": "no body: a JSON-RPC parse error",
                               "content": {JSON: {"schema": rpc_error}}},
                         **_errors(401, 404, 413)})
    async def mcp(request: Request) -> Response:
        return await _mcp_http(hub, request)

    @app.get("/mcp", tags=["MCP"], include_in_schema=False)
    async def mcp_stream() -> Response:
        return JSONResponse({"code": "METHOD_NOT_ALLOWED", "message": "this server sends no SSE stream; "
                             "POST JSON-RPC requests to /mcp"}, status_code=405, headers={"Allow": "POST, DELETE"})

    @app.delete("/mcp", tags=["MCP"], status_code=204, responses=_errors(401, 404, 422),
                summary="End the MCP session named by the Mcp-Session-Id header")
    async def mcp_delete(mcp_session_id: Annotated[str, Header(max_length=256)]) -> Response:
        if not await manager.close(mcp_session_id, "closed"):
            raise ProtocolError("SESSION_NOT_FOUND", "unknown or expired session id", 404)
        return Response(status_code=204)


async def _stateless_reset(hub: Hub, data: dict[str, Any]) -> Observation:
    """OpenEnv's stateless reset: a fresh env, reset, closed; it takes no session slot."""
    manager = hub.manager
    env = await manager.call(manager.factory, inline=False)
    now = time.monotonic()
    scratch = Session(id="", env=env, created=now, last_active=now)
    try:
        return await hub.ops.reset(scratch, data)
    finally:
        await manager.call(env.close, inline=False)


async def _mcp_http(hub: Hub, request: Request) -> Response:
    header_sid = request.headers.get("mcp-session-id") or request.headers.get(SESSION_HEADER)
    session = None
    if header_sid:
        session = hub.manager.get(header_sid)
        if session is None:  # MCP's rule: an unknown session id is a 404, and the client re-initializes
            raise ProtocolError("SESSION_NOT_FOUND", "unknown or expired session id", 404)
    body = await request.body()
    if not body:  # the request lacks what the document requires: an HTTP error, not a JSON-RPC answer
        return AsciiJSONResponse(error(PARSE_ERROR, "parse error: no body (POST one JSON-RPC request)"),
                                 status_code=400)
    try:
        payload = jsontext.parse(body)
    except ValueError as exc:
        return AsciiJSONResponse(error(PARSE_ERROR, f"parse error: {exc}"))
    rpc, bad = check_request(payload)
    if rpc is None:
        return JSONResponse(bad)
    outcome = await hub.mcp.handle(rpc, session)
    if outcome.response is None:
        return Response(status_code=202)
    headers = {"Mcp-Session-Id": outcome.new_session} if outcome.new_session else None
    return AsciiJSONResponse(outcome.response, headers=headers)


# ---- envhub's routes -------------------------------------------------------------------------


def _envhub_routes(app: FastAPI, hub: Hub) -> None:
    ops = hub.ops
    manager = hub.manager

    @app.get("/envhub/info", response_model=ServerInfo, tags=["envhub"], responses=_errors(401))
    async def info() -> ServerInfo:
        return ServerInfo(
            env_id=hub.env_id, env_version=str(hub.template.version), envhub_version=envhub.__version__,
            split=hub.template.split, task_set=hub.task_set_version(), tools=hub.tools,
            terminal_tool=hub.terminal_tool, max_sessions=hub.config.max_sessions,
            active_sessions=manager.active, session_ttl_s=hub.config.session_ttl_s,
            gold_exposed=hub.config.expose_gold, executor="inline" if manager.inline else "thread",
        )

    @app.get("/envhub/tasks", response_model=TaskList, tags=["envhub"], responses=_errors(401, 422))
    async def tasks(split: Literal["train", "validation", "test"] | None = None) -> TaskList:
        which = split or hub.template.split
        ids = await manager.call(hub.template.tasks.task_ids, which, inline=False)
        return TaskList(split=which, version=hub.task_set_version(), task_ids=list(ids))

    @app.post("/envhub/sessions", response_model=SessionCreated, status_code=201, tags=["envhub"],
              responses=_errors(401, 503), summary="Create a session for stateful HTTP (or MCP)")
    async def create_session() -> SessionCreated:
        session = await manager.create("sessions")
        return SessionCreated(session_id=session.id, ttl_s=hub.config.session_ttl_s)

    @app.delete("/envhub/sessions/{session_id}", status_code=204, tags=["envhub"], responses=_errors(401, 404))
    async def delete_session(session_id: str) -> Response:
        if not await manager.close(session_id, "closed"):
            raise ProtocolError("SESSION_NOT_FOUND", "unknown or expired session id", 404)
        return Response(status_code=204)

    @app.post("/envhub/abort", response_model=StepResult, tags=["envhub"],
              responses=_errors(400, 401, 404, 409, 413, 422),
              summary="End the session's episode from outside (engine error, context overflow, ...)")
    async def abort(request: AbortRequest,
                    session_id: Annotated[str, Header(alias=SESSION_HEADER, max_length=256)]) -> Response:
        obs = await ops.abort(_session(hub, session_id), request.model_dump(mode="json"))
        return _json(step_result_json(obs))

    @app.get("/envhub/gold", response_model=GoldActions, tags=["envhub"],
             responses=_errors(401, 403, 404, 409, 422, 501),
             summary="Reference actions for the running task (only with --expose-gold)")
    async def gold(session_id: Annotated[str, Header(alias=SESSION_HEADER, max_length=256)]) -> GoldActions:
        return GoldActions(actions=await ops.gold(_session(hub, session_id)))


__all__ = ["API_VERSION", "ServerConfig", "create_app"]
