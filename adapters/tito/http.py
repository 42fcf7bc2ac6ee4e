"""TITO's HTTP half: the FastAPI app over a :class:`~envhub.adapters.tito.server.TitoServer`."""

from __future__ import annotations

from typing import Any

from envhub.adapters.tito.messages import TitoError
from envhub.adapters.tito.server import TitoServer
from envhub.chat_wire import stream_events

try:  # the serve extra; FastAPI resolves the handlers' annotations from this module's globals
    from fastapi import Body, Request
except ImportError:  # pragma: no cover - the session logic works without it
    Body = Request = None  # type: ignore[assignment,misc]


def create_app(server: TitoServer) -> Any:
    """The FastAPI app over a :class:`TitoServer`. Handlers are sync: FastAPI runs them in its
    thread pool, so requests of different sessions reach the (batching) engine concurrently."""
    from fastapi import FastAPI
    from fastapi.responses import JSONResponse

    app = FastAPI(title="envhub TITO session server")
    app.state.tito = server

    @app.exception_handler(TitoError)
    def _tito_error(request: Request, exc: TitoError) -> JSONResponse:
        return JSONResponse(status_code=exc.status, content=exc.body())

    @app.get("/health")
    def health() -> dict[str, Any]:
        return {"status": "ok", "model": server.model_name}

    @app.get("/info")
    def info() -> dict[str, Any]:
        return server.info()

    @app.get("/v1/models")
    def models() -> dict[str, Any]:
        return {"object": "list", "data": [{"id": server.model_name, "object": "model", "owned_by": "envhub"}]}

    @app.post("/sessions")
    def create_session(request: Request, body: dict[str, Any] | None = Body(default=None)) -> dict[str, Any]:
        body = body or {}
        session = server.create_session(body.get("session_id"), body.get("metadata"))
        return {"id": session.id, "base_url": f"{str(request.base_url).rstrip('/')}/sessions/{session.id}"}

    @app.get("/sessions/{session_id}")
    def get_session(session_id: str) -> dict[str, Any]:
        return server.get(session_id).summary() | {"server": server.info()}

    @app.get("/sessions/{session_id}/trajectory")
    def get_trajectory(session_id: str) -> dict[str, Any]:
        session = server.get(session_id)
        with session.lock:
            return session.trajectory()

    @app.delete("/sessions/{session_id}")
    def delete_session(session_id: str) -> dict[str, Any]:
        server.delete(session_id)
        return {"id": session_id, "deleted": True}

    @app.post("/sessions/{session_id}/v1/chat/completions")
    def session_chat(session_id: str, body: dict[str, Any] = Body(...)) -> Any:
        return _respond(server.chat(session_id, body), body)

    @app.post("/v1/chat/completions")
    def chat(body: dict[str, Any] = Body(...)) -> Any:
        return _respond(server.chat_sessionless(body), body)

    return app


def _respond(result: dict[str, Any], body: dict[str, Any]) -> Any:
    """JSON, or, when the client asked to stream, the same completion as server-sent events
    (one content chunk; generation is not incremental here)."""
    if not body.get("stream"):
        return result
    from fastapi.responses import StreamingResponse

    events = stream_events(result)
    return StreamingResponse(iter(events), media_type="text/event-stream")

