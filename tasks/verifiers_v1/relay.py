"""The model endpoint a Verifiers harness calls: an OpenAI-compatible ``/chat/completions`` on
127.0.0.1 whose answers come from the envhub policy playing the bridged env.

Each request the harness sends waits, as a :class:`ModelCall`, until the env answers it with the
policy's turn (:meth:`ModelCall.answer`) or fails it (:meth:`ModelCall.fail`, an HTTP error the
harness sees). Streaming requests are answered as server-sent events. Nothing here samples.
"""

from __future__ import annotations

import json
import queue
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from envhub.chat_wire import completion, stream_events
from envhub.types import ToolCall


@dataclass
class ModelCall:
    """One chat-completions request of the harness, waiting for its answer."""

    body: dict[str, Any]
    session: str | None
    _reply: queue.Queue[tuple[int, dict[str, Any]]] = field(default_factory=lambda: queue.Queue(maxsize=1))

    def answer(self, content: str, tool_calls: list[ToolCall], *, finish_reason: str | None = None) -> None:
        model = str(self.body.get("model") or "envhub-policy")
        self._reply.put((200, completion(content, tool_calls, model=model, finish_reason=finish_reason)))

    def fail(self, status: int, message: str) -> None:
        self._reply.put((status, {"error": {"message": message, "type": "server_error", "code": None}}))


class Relay:
    """The endpoint (``base_url`` ends in ``/v1``): each request is put on :attr:`calls` (a queue the
    caller may share with its other events) as a :class:`ModelCall`."""

    def __init__(self, *, calls: queue.Queue[Any] | None = None, answer_timeout_s: float = 3600.0) -> None:
        self.calls: queue.Queue[Any] = calls if calls is not None else queue.Queue()
        relay = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                if not self.path.rstrip("/").endswith("/chat/completions"):
                    return self._send(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})
                try:
                    body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)))
                    if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
                        raise ValueError("a request needs a list of messages")
                except ValueError as exc:
                    return self._send(400, {"error": {"message": str(exc), "type": "invalid_request_error"}})
                call = ModelCall(body=body, session=self.headers.get("X-Session-ID"))
                relay.calls.put(call)
                try:
                    status, payload = call._reply.get(timeout=answer_timeout_s)
                except queue.Empty:
                    status, payload = 504, {"error": {"message": "the policy did not answer", "type": "timeout"}}
                try:
                    if status == 200 and body.get("stream"):
                        return self._stream(payload)
                    self._send(status, payload)
                except (BrokenPipeError, ConnectionResetError):  # the harness hung up (its episode ended)
                    return

            def _send(self, status: int, payload: dict[str, Any]) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _stream(self, payload: dict[str, Any]) -> None:
                data = "".join(stream_events(payload)).encode()
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                return

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{self._server.server_address[1]}/v1"
        self._thread = threading.Thread(target=self._server.serve_forever, name="verifiers-relay", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Stop serving; requests still waiting are failed with 503."""
        self._server.shutdown()
        self._server.server_close()
        while True:
            try:
                item = self.calls.get_nowait()
            except queue.Empty:
                break
            if isinstance(item, ModelCall):
                item.fail(503, "the envhub env was closed")


__all__ = ["ModelCall", "Relay"]
