"""The WebSocket session lifecycle: attach, resume, supersede, close, idle TTL, half-open sockets.

A real uvicorn server on 127.0.0.1 (background thread) with a short TTL; clients are the
``websockets`` sync client, or a raw socket where a test needs a peer that misbehaves.
Waits are bounded polls on the server's own session count, never timing assertions.
"""

from __future__ import annotations

import base64
import json
import os
import socket
import time
from collections.abc import Callable, Iterator
from urllib.parse import urlsplit

import httpx
import pytest

pytest.importorskip("fastapi")
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from envhub.server import ServerConfig, create_app
from envhub.server.testing import serve_in_thread
from envhub.server.wire import SESSION_HEADER

ENV_ID = "envhub/Computation-v0"
TASK = "comp-bigint-L1-0"
TTL = 1.0


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    app = create_app(ENV_ID, ServerConfig(max_sessions=16, session_ttl_s=TTL))
    with serve_in_thread(app) as base:
        yield base


def ws_url(url: str) -> str:
    return url.replace("http://", "ws://") + "/ws"


def open_ws(url: str, session: str | None = None) -> ClientConnection:
    headers = {SESSION_HEADER: session} if session else {}
    return connect(ws_url(url), additional_headers=headers, compression=None, open_timeout=10).__enter__()


def ask(ws: ClientConnection, message: dict) -> dict:
    ws.send(json.dumps(message))
    return json.loads(ws.recv(timeout=30))


def active(url: str) -> int:
    return int(httpx.get(url + "/envhub/info").json()["active_sessions"])


def wait_until(predicate: Callable[[], bool], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def drop(ws: ClientConnection) -> None:
    """Kill the connection without a closing handshake, as a network failure would."""
    ws.socket.shutdown(socket.SHUT_RDWR)
    ws.socket.close()


def test_handshake_names_the_session(url: str):
    with open_ws(url) as ws:
        sid = ws.response.headers[SESSION_HEADER]
        assert len(sid) >= 43
        reply = ask(ws, {"type": "reset", "data": {"task_id": TASK}})
        assert reply["type"] == "observation" and not reply["data"]["done"]


def test_resume_after_a_dropped_connection(url: str):
    ws = open_ws(url)
    sid = ws.response.headers[SESSION_HEADER]
    ask(ws, {"type": "reset", "data": {"task_id": TASK}})
    ask(ws, {"type": "step", "data": {"text": "no tool call"}})
    drop(ws)
    with open_ws(url, sid) as again:
        assert again.response.headers[SESSION_HEADER] == sid
        state = ask(again, {"type": "state"})["data"]
        assert state["step_count"] == 1 and state["task"]["task_id"] == TASK
        again.send(json.dumps({"type": "close"}))
    assert wait_until(lambda: active(url) == 0, 10)


def test_a_retried_request_is_not_applied_twice(url: str):
    with open_ws(url) as ws:
        ask(ws, {"type": "reset", "data": {"task_id": TASK}})
        step = {"type": "step", "data": {"text": "no tool call"}, "request_id": "r-1"}
        first = ask(ws, step)
        second = ask(ws, step)
        assert first == second
        assert ask(ws, {"type": "state"})["data"]["step_count"] == 1


def test_a_newer_connection_supersedes_an_older_one(url: str):
    old = open_ws(url)
    sid = old.response.headers[SESSION_HEADER]
    ask(old, {"type": "reset", "data": {"task_id": TASK}})
    with open_ws(url, sid) as new:
        with pytest.raises(ConnectionClosed) as info:
            old.recv(timeout=10)
        assert info.value.rcvd is not None and info.value.rcvd.code == 4001
        assert ask(new, {"type": "state"})["data"]["task"]["task_id"] == TASK
        new.send(json.dumps({"type": "close"}))


def test_close_message_and_normal_close_end_the_session(url: str):
    ws = open_ws(url)
    sid = ws.response.headers[SESSION_HEADER]
    ws.send(json.dumps({"type": "close"}))
    with pytest.raises(ConnectionClosed):
        ws.recv(timeout=10)
    with open_ws(url, sid) as again:
        assert json.loads(again.recv(timeout=10))["data"]["code"] == "SESSION_NOT_FOUND"
    ws = open_ws(url)
    sid = ws.response.headers[SESSION_HEADER]
    ws.close(code=1000)
    assert wait_until(lambda: active(url) == 0, 10)
    with open_ws(url, sid) as again:
        assert json.loads(again.recv(timeout=10))["data"]["code"] == "SESSION_NOT_FOUND"


def test_dropped_session_is_reclaimed_after_the_ttl(url: str):
    ws = open_ws(url)
    sid = ws.response.headers[SESSION_HEADER]
    ask(ws, {"type": "reset", "data": {"task_id": TASK}})
    drop(ws)
    assert active(url) >= 1  # kept for a resume...
    assert wait_until(lambda: active(url) == 0, TTL + 10)  # ...until the TTL passes
    with open_ws(url, sid) as again:
        assert json.loads(again.recv(timeout=10))["data"]["code"] == "SESSION_NOT_FOUND"
    assert 'outcome="idle_expired"' in httpx.get(url + "/metrics").text


@pytest.mark.parametrize(("message", "code"), [
    ("{nope", "INVALID_JSON"),
    ("[1, 2]", "VALIDATION_ERROR"),
    ('{"type": "teleport"}', "UNKNOWN_TYPE"),
    ('{"type": "step"}', "VALIDATION_ERROR"),
    ('{"type": "step", "data": {"text": 3}}', "VALIDATION_ERROR"),
    ('{"type": "step", "data": {"text": "x"}, "extra": 1}', "VALIDATION_ERROR"),
    ('{"type": "reset", "data": {"seed": -1}}', "VALIDATION_ERROR"),
    ('{"type": "reset", "data": {"task_id": "bogus"}}', "UNKNOWN_TASK"),
    ('{"type": "step", "data": {"text": "x"}}', "EPISODE_NOT_RUNNING"),
    ('{"type": "gold"}', "FORBIDDEN"),
    ('{"type": "step", "data": ' + "[" * 990 + "]" * 990 + "}", "INVALID_JSON"),  # deeper than parsing allows
    ('{"type": "step", "data": {"text": "\\ud800"}}', "INVALID_JSON"),  # a lone surrogate: no reply could carry it
])
def test_bad_messages_get_error_replies_and_the_connection_lives(url: str, message: str, code: str):
    with open_ws(url) as ws:
        ws.send(message)
        reply = json.loads(ws.recv(timeout=10))
        assert reply["type"] == "error" and reply["data"]["code"] == code, reply
        assert ask(ws, {"type": "reset", "data": {"task_id": TASK}})["type"] == "observation"
        ws.send(json.dumps({"type": "close"}))


def test_mcp_over_the_websocket(url: str):
    with open_ws(url) as ws:
        ask(ws, {"type": "reset", "data": {"task_id": TASK}})
        reply = ask(ws, {"type": "mcp", "data": {"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                                                 "params": {"name": "answer", "arguments": {"answer": "1"}}}})
        assert reply["type"] == "mcp" and reply["data"]["id"] == 7
        assert reply["data"]["result"]["structuredContent"]["outcome"] == "wrong_answer"
        ws.send(json.dumps({"type": "close"}))


def _raw_handshake(url: str) -> tuple[socket.socket, str]:
    """A WebSocket opened by hand that will never read again: a half-open peer."""
    host, port = urlsplit(url).hostname, urlsplit(url).port
    sock = socket.create_connection((host, port), timeout=10)
    key = base64.b64encode(os.urandom(16)).decode()
    sock.sendall((f"GET /ws HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                  f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n").encode())
    head = b""
    while b"\r\n\r\n" not in head:
        head += sock.recv(4096)
    assert b" 101 " in head.split(b"\r\n")[0]
    sid = next(line.split(b":", 1)[1].strip() for line in head.split(b"\r\n")
               if line.lower().startswith(SESSION_HEADER.lower().encode()))
    return sock, sid.decode()


@pytest.mark.slow
def test_half_open_connections_are_found_by_ping_and_reclaimed():
    app = create_app(ENV_ID, ServerConfig(max_sessions=4, session_ttl_s=TTL))
    with serve_in_thread(app, ping_interval=1.0) as url:
        peers = [_raw_handshake(url) for _ in range(4)]
        assert active(url) == 4
        with open_ws(url) as refused:  # full, and nobody said goodbye
            assert json.loads(refused.recv(timeout=10))["data"]["code"] == "CAPACITY_REACHED"
        # the peers never answer a ping: the server closes them, then the TTL frees their slots
        assert wait_until(lambda: active(url) == 0, 2 * 1.0 + TTL + 15)
        with open_ws(url) as ws:
            assert ask(ws, {"type": "reset", "data": {"task_id": TASK}})["type"] == "observation"
        for sock, _ in peers:
            sock.close()


@pytest.mark.slow
def test_a_connected_but_silent_client_is_closed_after_the_attached_idle_timeout():
    """A hung client whose library still answers pings would hold its slot forever; a bounded
    attached idle timeout closes it (4002) while a client that keeps talking stays."""
    from websockets.exceptions import ConnectionClosed

    from envhub.server.sessions import HUNG_CLOSE

    app = create_app(ENV_ID, ServerConfig(max_sessions=4, session_ttl_s=TTL, attached_idle_s=1.5))
    with serve_in_thread(app, ping_interval=0.5) as url:
        silent, talker = open_ws(url), open_ws(url)
        for ws in (silent, talker):
            assert ask(ws, {"type": "reset", "data": {"task_id": TASK}})["type"] == "observation"
        start = time.monotonic()
        while time.monotonic() - start < 3.5:  # the talker asks for its state twice a second
            assert ask(talker, {"type": "state"})["type"] == "state"
            time.sleep(0.5)
        with pytest.raises(ConnectionClosed) as closed:
            silent.recv(timeout=5)
        assert closed.value.rcvd is not None and closed.value.rcvd.code == HUNG_CLOSE
        assert active(url) == 1
        assert ask(talker, {"type": "state"})["type"] == "state"
        talker.close()
        assert 'outcome="attached_idle"} 1' in httpx.get(url + "/metrics").text
