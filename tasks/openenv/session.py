"""One stateful ``/ws`` session on a running OpenEnv server, with failures sorted by whose they are.

The protocol is OpenEnv 0.10's (``openenv.core.env_client.EnvClient`` and the server's ``/ws``
endpoint): the client sends ``{"type": "reset"|"step"|"state"|"close", "data": ...}`` and reads one
reply per request, ``{"type": "observation"|"state", "data": ...}`` or ``{"type": "error",
"data": {"message", "code"}}``. A step's ``data`` is the action; OpenEnv's MCP actions are
``{"type": "list_tools"}`` and ``{"type": "call_tool", "tool_name", "arguments"}``. The reply's
``data`` is the step envelope ``{"observation": {...}, "reward": r, "done": d, "metadata": ...}``.

Contract of :meth:`OpenEnvSession.request`: it returns the reply's ``data`` or raises

- :class:`ActionRejected` -- the server refused the *action* (``VALIDATION_ERROR`` on a step): the
  agent's fault, the session goes on;
- :class:`ServerFault` (an :class:`~envhub.errors.InfraError`) -- anything else: the connection was
  lost or refused, the reply timed out or was no JSON object, or the server reported an error of
  its own (``EXECUTION_ERROR``, ``CAPACITY_REACHED``, ...). The socket is dropped with the
  session it held (an OpenEnv session lives only as long as its socket), so the next
  :meth:`request` opens a new session.
"""

from __future__ import annotations

import contextlib
import json
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from envhub.errors import InfraError

try:
    import httpx
except ImportError as exc:  # pragma: no cover - httpx and websockets come with the serve extra
    raise ImportError("the openenv bridge needs httpx and websockets: pip install 'envhub[serve]'") from exc

#: Error codes of a step's reply that mean "this action does not fit the action schema".
#: error frames in reply to the agent's step that are the agent's: a rejected action, and the env's
#: step failing on it -- nothing tells that failure from one the action provoked on purpose, so it
#: can never become an infrastructure outcome the loss leaves out
AGENT_ERROR_CODES = frozenset({"VALIDATION_ERROR", "EXECUTION_ERROR", "MESSAGE_TOO_LARGE"})
#: WebSocket close code of a message over the receiver's size limit (RFC 6455)
_MESSAGE_TOO_BIG = 1009


class ServerFault(InfraError):
    """The server or the connection to it failed (never the agent's doing); ``code`` says how."""

    def __init__(self, message: str, code: str = "UNREACHABLE") -> None:
        super().__init__(f"{message} ({code})")
        self.code = code


class ActionEndedSession(Exception):
    """The session ended in reply to the agent's step while the server itself stayed up: the socket
    closed (a message over its size limit, right after refusing the agent's previous action, or with
    ``/health`` still answering), or the step's reply never came (``timed_out``) with ``/health``
    answering. The agent's doing -- its action may have provoked it -- and the episode cannot go on
    (an OpenEnv session dies with its socket). Only a server that is down is infra."""

    def __init__(self, message: str, *, timed_out: bool = False) -> None:
        super().__init__(message)
        self.timed_out = timed_out


class ActionRejected(Exception):
    """The server refused an action as invalid; ``message`` is its explanation, for the agent."""

    def __init__(self, message: str, code: str) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


def split_url(url: str) -> tuple[str, str]:
    """``(http base URL, ws URL of /ws)`` of a server URL (``http(s)://`` or ``ws(s)://``).

    Raises:
        ValueError: ``url`` is not a server URL.
    """
    parts = urlsplit(url.rstrip("/"))
    if parts.scheme not in ("http", "https", "ws", "wss") or not parts.netloc:
        raise ValueError(f"not a server URL: {url!r} (expected http://host:port)")
    http_scheme = {"ws": "http", "wss": "https"}.get(parts.scheme, parts.scheme)
    base = urlunsplit((http_scheme, parts.netloc, parts.path, "", ""))
    ws = urlunsplit(("wss" if http_scheme == "https" else "ws", parts.netloc, parts.path + "/ws", "", ""))
    return base, ws


class OpenEnvSession:
    """HTTP reads (``/health``, ``/schema``) and one ``/ws`` session, opened on first use."""

    def __init__(self, url: str, *, headers: dict[str, str] | None = None, timeout_s: float = 300.0,
                 connect_timeout_s: float = 10.0) -> None:
        self.base_url, self.ws_url = split_url(url)
        self.headers = dict(headers or {})
        self.timeout_s = timeout_s
        self.connect_timeout_s = connect_timeout_s
        self._http = httpx.Client(base_url=self.base_url, headers=self.headers,
                                  timeout=connect_timeout_s + 30.0)
        self._ws: Any = None
        self._after_agent_error = False  # the last reply refused the agent's action

    # ---- HTTP ---------------------------------------------------------------------------------

    def get_json(self, path: str, params: dict[str, Any] | None = None) -> Any:
        """``GET path`` as JSON. Raises :class:`ServerFault` (``HTTP_<status>``, ``UNREACHABLE``)."""
        try:
            response = self._http.get(path, params=params)
        except httpx.HTTPError as exc:
            raise ServerFault(f"cannot reach {self.base_url}{path}: {exc}") from None
        if response.status_code != 200:
            raise ServerFault(f"GET {path}: {response.text[:200]}", f"HTTP_{response.status_code}")
        try:
            return response.json()
        except ValueError:
            raise ServerFault(f"GET {path} answered no JSON", "PROTOCOL_ERROR") from None

    def healthy(self) -> bool:
        """Whether the server still answers ``/health`` (a failure of one step, not of the server)."""
        try:
            return self._http.get("/health", timeout=5.0).status_code == 200
        except httpx.HTTPError:
            return False

    def try_get_json(self, path: str, params: dict[str, Any] | None = None) -> Any | None:
        """``GET path`` as JSON, or None where the server has no such route or fails on it."""
        try:
            return self.get_json(path, params)
        except ServerFault:
            return None

    # ---- the /ws session ----------------------------------------------------------------------

    @property
    def connected(self) -> bool:
        return self._ws is not None

    def request(self, kind: str, data: Any = None) -> dict[str, Any]:
        """Send one ``{"type": kind, "data": data}`` message; its reply's ``data`` (see the module
        docstring for what it raises)."""
        from websockets.exceptions import ConnectionClosed

        message: dict[str, Any] = {"type": kind}
        if data is not None:
            message["data"] = data
        try:
            ws = self._ws if self._ws is not None else self._open()
            ws.send(json.dumps(message))
            raw = ws.recv(timeout=self.timeout_s)
        except TimeoutError:  # a late reply would pair with the next request: drop the socket
            self.disconnect()
            if kind == "step" and self.healthy():  # the server is up: it is this step that hangs
                raise ActionEndedSession(f"no reply to the agent's step within {self.timeout_s:g}s, the server "
                                         "answering /health all along", timed_out=True) from None
            raise ServerFault(f"no reply to {kind} within {self.timeout_s:g}s", "TIMEOUT") from None
        except (ConnectionClosed, OSError) as exc:
            self.disconnect()
            refused, self._after_agent_error = self._after_agent_error, False
            if kind == "step" and (refused or _close_code(exc) == _MESSAGE_TOO_BIG or self.healthy()):
                raise ActionEndedSession(f"the server closed the session after the agent's action: {exc}") from None
            raise ServerFault(f"lost the connection to {self.ws_url}: {exc}", "CONNECTION_LOST") from None
        self._after_agent_error = False
        try:
            reply = json.loads(raw)
        except ValueError:
            reply = None
        if not isinstance(reply, dict):
            self.disconnect()
            raise ServerFault("the server sent a message that is not a JSON object", "PROTOCOL_ERROR")
        body = reply.get("data")
        if reply.get("type") == "error":
            body = body if isinstance(body, dict) else {}
            code, text = str(body.get("code", "ERROR")), str(body.get("message", "server error"))
            if kind == "step" and code in AGENT_ERROR_CODES:
                self._after_agent_error = True
                raise ActionRejected(_explain(text, body.get("errors")), code)
            self.disconnect()  # the server may close the socket after it (capacity): start afresh
            raise ServerFault(f"the server failed on {kind}: {text}", code)
        return body if isinstance(body, dict) else {}

    def _open(self) -> Any:
        from websockets.exceptions import InvalidStatus
        from websockets.sync.client import connect

        try:
            # entered by hand: the connection outlives any one with-block
            self._ws = connect(self.ws_url, additional_headers=self.headers,
                               open_timeout=self.connect_timeout_s, max_size=None, compression=None,
                               ping_interval=20, ping_timeout=20, close_timeout=2).__enter__()
        except InvalidStatus as exc:
            raise ServerFault(f"{self.ws_url} refused the connection: HTTP {exc.response.status_code}",
                              f"HTTP_{exc.response.status_code}") from None
        return self._ws

    def disconnect(self) -> None:
        """End the ``/ws`` session (politely when the socket still works); idempotent."""
        ws, self._ws = self._ws, None
        if ws is not None:
            with contextlib.suppress(Exception):
                ws.send(json.dumps({"type": "close"}))
            with contextlib.suppress(Exception):
                ws.close()

    def close(self) -> None:
        self.disconnect()
        self._http.close()


def _close_code(exc: Exception) -> int | None:
    """The close code the peer sent (or ours, where it sent none), of a ConnectionClosed."""
    frame = getattr(exc, "rcvd", None) or getattr(exc, "sent", None)
    return getattr(frame, "code", None)


def _explain(message: str, errors: Any) -> str:
    """A server's validation error as one line for the agent: its message and where it failed."""
    if not isinstance(errors, list) or not errors:
        return message
    parts = []
    for err in errors[:5]:
        if isinstance(err, dict):
            loc = ".".join(str(p) for p in err.get("loc", ())) or "(action)"
            parts.append(f"{loc}: {err.get('msg', '')}")
    return f"{message}: {'; '.join(parts)}" if parts else message


__all__ = ["AGENT_ERROR_CODES", "ActionEndedSession", "ActionRejected", "OpenEnvSession", "ServerFault", "split_url"]
