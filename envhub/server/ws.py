"""The ``/ws`` endpoint: OpenEnv's WebSocket protocol, one session per connection.

Client messages are ``{"type": "reset"|"step"|"state"|"close", "data": ...}``; replies are
``{"type": "observation"|"state"|"error", "data": ...}``, as OpenEnv's ``EnvClient`` expects.
The server never speaks first: an OpenEnv client pairs each reply with its request, so an
unsolicited greeting would shift every reply by one. The session id therefore travels in the
handshake response header ``X-Envhub-Session``, invisible to clients that do not look.

envhub extensions, ignored by OpenEnv clients:

- reattach: connect with ``X-Envhub-Session: <id>`` (or OpenEnv's ``?session_id=<id>``) to take
  over a session -- after a network drop, within the TTL. A newer connection supersedes an
  older one (closed with code 4001), since the server may not yet know the old one is dead.
- ``request_id`` at the top level of a message: a retry carrying the id of the last request is
  answered from a cache instead of being executed twice (a step is not idempotent).
- message types ``abort`` (end the episode with an infra outcome), ``gold`` (reference actions,
  when the server exposes them) and ``mcp`` (a JSON-RPC request on this session, as OpenEnv has).

How a connection ends decides the session's fate: a ``close`` message or a normal close frame
(1000/1001) ends the session; anything else (a dropped or half-open connection, detected by the
server's pings) only detaches it, and its TTL starts.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from typing import Any

from fastapi import WebSocket

from envhub.server import jsontext
from envhub.server.hub import Hub
from envhub.server.mcp import check_request
from envhub.server.ops import ProtocolError
from envhub.server.sessions import CapacityError, Session
from envhub.server.wire import SESSION_HEADER, SESSION_QUERY, step_result_json

log = logging.getLogger(__name__)

_HEADER = SESSION_HEADER.lower()
_NORMAL_CLOSE = (1000, 1001)
_MESSAGE_KEYS = frozenset({"type", "data", "request_id"})
_KNOWN = frozenset({"reset", "step", "state", "close", "abort", "gold", "mcp"})
SUPERSEDED = 4001


def _error(code: str, message: str, **extra: Any) -> str:
    return json.dumps({"type": "error", "data": {"message": message, "code": code, **extra}})


async def ws_endpoint(websocket: WebSocket) -> None:
    hub: Hub = websocket.app.state.hub
    manager = hub.manager
    requested = websocket.headers.get(_HEADER) or websocket.query_params.get(SESSION_QUERY)
    session: Session | None = None
    refusal: tuple[str, int] | None = None
    if requested:
        session = manager.get(requested)
        if session is None:
            refusal = (_error("SESSION_NOT_FOUND", "unknown or expired session id; start a new session "
                              "(sessions are reclaimed after their idle TTL)"), 1008)
    else:
        try:
            session = await manager.create("ws")
        except CapacityError as exc:
            refusal = (_error("CAPACITY_REACHED", str(exc), active_sessions=exc.active,
                              max_sessions=exc.maximum, retry_after_s=exc.retry_after_s), 1013)
    if session is None:
        assert refusal is not None
        hub.metrics.request("ws", "capacity" if refusal[1] == 1013 else "4xx")
        await websocket.accept()
        await websocket.send_text(refusal[0])
        await websocket.close(refusal[1])
        return

    previous = manager.attach(session, websocket)
    ended = False
    try:
        await websocket.accept(headers=[(_HEADER.encode(), session.id.encode())])
        if previous is not None:
            await _close_quietly(previous, SUPERSEDED, "superseded by a newer connection")
        ended = await _serve(hub, websocket, session)
    finally:
        if session.attachment is websocket:
            if ended:
                await manager.close(session.id, "closed")
            else:
                manager.detach(session, websocket)


async def _serve(hub: Hub, websocket: WebSocket, session: Session) -> bool:
    """The message loop; True when the client ended the session, False when it went away."""
    receive = websocket.receive
    send = websocket.send
    limit = hub.config.max_message_bytes
    metrics = hub.metrics
    touch = hub.manager.touch
    while True:
        message = await receive()
        if message["type"] == "websocket.disconnect":
            return message.get("code", 1000) in _NORMAL_CLOSE
        touch(session)  # any message is a sign of life (the attached idle timeout)
        if session.closed or session.attachment is not websocket:
            await _close_quietly(websocket, 1008 if session.closed else SUPERSEDED, "session ended")
            return False
        text = message.get("text")
        if text is None:
            raw = message.get("bytes") or b""
            text = raw.decode("utf-8", errors="replace")
        t0 = time.perf_counter()
        reply: str | None
        if len(text) > limit:
            reply, route, ok, done = _error("MESSAGE_TOO_LARGE", f"message over {limit} bytes"), "other", False, False
        else:
            reply, route, ok, done = await _handle(hub, session, text)
        if reply is not None:
            try:
                await send({"type": "websocket.send", "text": reply})
            except Exception:  # the peer is gone (or this connection was superseded mid-step)
                metrics.request(route, "error", time.perf_counter() - t0)
                return False
        metrics.request(route, "ok" if ok else "error", time.perf_counter() - t0)
        if done:
            await _close_quietly(websocket, 1000, "closed")
            return True


async def _handle(hub: Hub, session: Session, text: str) -> tuple[str | None, str, bool, bool]:
    """One client message -> (reply, route label, ok, session ended)."""
    try:
        msg = jsontext.parse(text)
    except ValueError as exc:
        return _error("INVALID_JSON", f"Invalid JSON: {exc}"), "other", False, False
    if not isinstance(msg, dict):
        return _error("VALIDATION_ERROR", "a message is a JSON object with a type"), "other", False, False
    kind = msg.get("type")
    route = f"ws_{kind}" if isinstance(kind, str) else "other"
    if not _MESSAGE_KEYS.issuperset(msg):
        extra = sorted(str(k) for k in set(msg) - _MESSAGE_KEYS)
        return _error("VALIDATION_ERROR", f"unknown message fields: {extra}"), route, False, False
    request_id = msg.get("request_id")
    if request_id is not None and (not isinstance(request_id, str) or len(request_id) > 255):
        return _error("VALIDATION_ERROR", "request_id must be a string of at most 255 characters"), route, False, False
    if request_id is not None:
        if request_id == session.inflight_id and session.inflight_done is not None:
            await session.inflight_done.wait()  # the original is still running (its socket died)
        if request_id == session.last_request_id and session.last_reply is not None:
            return session.last_reply, route, True, False  # a retry after a reconnect: do not step twice
        session.inflight_id, session.inflight_done = request_id, asyncio.Event()
    try:
        reply, ok, done = await _dispatch(hub, session, msg, kind)
    finally:
        if request_id is not None and session.inflight_id == request_id:
            assert session.inflight_done is not None
            session.inflight_done.set()
            session.inflight_id = session.inflight_done = None
    if ok and request_id is not None:
        session.last_request_id, session.last_reply = request_id, reply
    return reply, route if kind in _KNOWN else "other", ok, done


async def _dispatch(hub: Hub, session: Session, msg: dict[str, Any], kind: Any) -> tuple[str | None, bool, bool]:
    """Execute one checked message -> (reply, ok, session ended)."""
    ops = hub.ops
    data = msg.get("data")
    try:
        if kind == "step":
            if "data" not in msg:
                raise ProtocolError("VALIDATION_ERROR", "a step message needs data (the action)", 422)
            reply = '{"type":"observation","data":' + await hub.step_reply(session, ops.parse_action(data)) + "}"
        elif kind == "reset":
            reply = '{"type":"observation","data":' + step_result_json(await ops.reset(session, data)) + "}"
        elif kind == "state":
            reply = '{"type":"state","data":' + (await ops.state(session)).model_dump_json() + "}"
        elif kind == "close":
            return None, True, True
        elif kind == "abort":
            reply = '{"type":"observation","data":' + step_result_json(await ops.abort(session, data)) + "}"
        elif kind == "gold":
            actions = await ops.gold(session)
            reply = json.dumps({"type": "gold", "data": {"actions": [a.model_dump(mode="json") for a in actions]}})
        elif kind == "mcp":
            reply = await _mcp(hub, session, data)
        else:
            return _error("UNKNOWN_TYPE", f"Unknown message type: {kind}"), False, False
    except ProtocolError as exc:
        extra = {"errors": exc.errors} if exc.errors is not None else {}
        return _error(exc.code, exc.message, **extra), False, False
    except Exception as exc:  # a bug on our side: say so, keep the connection
        log.exception("error handling a %s message", kind)
        return _error("EXECUTION_ERROR", f"{type(exc).__name__}: {exc}"), False, False
    return reply, True, False


async def _mcp(hub: Hub, session: Session, data: Any) -> str:
    request, bad = check_request(data)
    if request is None:
        return json.dumps({"type": "mcp", "data": bad})
    outcome = await hub.mcp.handle(request, session)
    return json.dumps({"type": "mcp", "data": outcome.response or {}})


async def _close_quietly(websocket: Any, code: int, reason: str) -> None:
    with contextlib.suppress(Exception):  # already closed by the peer or the server
        await websocket.close(code=code, reason=reason)
