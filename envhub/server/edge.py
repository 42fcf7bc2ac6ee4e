"""The ASGI edge: bearer-token auth, request size limits and per-route HTTP metrics.

It runs before routing, as plain ASGI, because that is the only place that sees every request
-- including unknown paths and WebSocket handshakes -- and because it must refuse a 2 GB body
before anything buffers it. ``/health`` stays open so container health checks (Docker's,
OpenEnv's ``LocalDockerProvider``) work without the token; it reveals nothing but "healthy".
"""

from __future__ import annotations

import hmac
import json
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from envhub.server.metrics import Metrics, status_class

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

OPEN_PATHS = frozenset({"/health"})
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})

#: Exact paths and path prefixes to their ``route`` metric label.
_ROUTES = {
    "/reset": "reset", "/step": "step", "/state": "state", "/health": "health", "/metadata": "metadata",
    "/schema": "schema", "/metrics": "metrics", "/mcp": "mcp", "/ws": "ws", "/docs": "docs",
    "/redoc": "docs", "/openapi.json": "openapi", "/envhub/info": "info", "/envhub/tasks": "tasks",
    "/envhub/sessions": "sessions", "/envhub/abort": "abort", "/envhub/gold": "gold",
}


def route_of(path: str) -> str:
    route = _ROUTES.get(path)
    if route is None and path.startswith("/envhub/sessions/"):
        route = "sessions"
    return route or "other"


class Edge:
    def __init__(self, app: ASGIApp, *, token: str | None, max_body_bytes: int, metrics: Metrics) -> None:
        self.app = app
        self.token = token.encode() if token else None
        self.max_body = max_body_bytes
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        if self.token is not None and scope["path"] not in OPEN_PATHS and not self._authorized(scope):
            if kind == "websocket":
                self.metrics.request("ws", "4xx")
                await send({"type": "websocket.close", "code": 1008, "reason": "unauthorized"})
            else:
                await self._reply(send, scope, 401, "UNAUTHORIZED",
                                  "missing or wrong bearer token (send Authorization: Bearer <token>)",
                                  [(b"www-authenticate", b'Bearer realm="envhub"')])
            return
        if kind == "websocket":
            await self.app(scope, receive, send)  # message sizes are the server's ws_max_size
            return
        t0 = time.perf_counter()
        status = 500
        if scope["method"] in _BODY_METHODS:
            body = await self._read_body(scope, receive)
            if body is None:
                await self._reply(send, scope, 413, "PAYLOAD_TOO_LARGE",
                                  f"request body over the {self.max_body}-byte limit")
                return
            receive = _replay(body, receive)

        async def send_with_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_with_status)
        finally:
            self.metrics.request(route_of(scope["path"]), status_class(status), time.perf_counter() - t0)

    def _authorized(self, scope: Scope) -> bool:
        assert self.token is not None
        for name, value in scope["headers"]:
            if name == b"authorization":
                scheme, _, credential = value.partition(b" ")
                return scheme.lower() == b"bearer" and hmac.compare_digest(credential.strip(), self.token)
        return False

    async def _read_body(self, scope: Scope, receive: Receive) -> bytes | None:
        """The whole body, or None as soon as it is known to exceed the limit."""
        for name, value in scope["headers"]:
            if name == b"content-length":
                try:
                    if int(value) > self.max_body:
                        return None
                except ValueError:
                    return None
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                break
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body:
                return None
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        return b"".join(chunks)

    async def _reply(self, send: Send, scope: Scope, status: int, code: str, message: str,
                     headers: list[tuple[bytes, bytes]] | None = None) -> None:
        payload = json.dumps({"code": code, "message": message}).encode()
        await send({"type": "http.response.start", "status": status, "headers": [
            (b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode()),
            *(headers or []),
        ]})
        await send({"type": "http.response.body", "body": payload})
        self.metrics.request(route_of(scope["path"]), status_class(status))


def _replay(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()  # after the body: wait for the disconnect, as the server would

    return replay
