"""Load: 128 concurrent sessions on a real server process, every episode completes; 32 clients
die abruptly in the middle of their episodes -- half with a TCP reset, half silently (half-open
connections that only the server's pings can find) -- and their slots come back, expired by the TTL.

The server runs as ``python -m envhub.server`` on 127.0.0.1 with a short TTL and ping interval;
the clients are the lean asyncio client. All waits are bounded polls of the server's session count.
"""

from __future__ import annotations

import asyncio
import time
from urllib.parse import urlsplit

import httpx
import pytest

pytest.importorskip("fastapi")

import envhub
from envhub.server.bench.loadgen import LeanWebSocket, open_ws
from envhub.server.testing import serve_in_subprocess

ENV_ID = "envhub/Computation-v0"
SESSIONS = 128
KILLED = 32
TTL = 2.0
PING = 1.0


async def _start(host: str, port: int, task_id: str) -> LeanWebSocket:
    """Open a session, reset, and take one invalid action (a format error the env answers)."""
    ws = await open_ws(host, port)
    obs = await ws.ask({"type": "reset", "data": {"task_id": task_id}})
    assert obs["type"] == "observation" and not obs["data"]["done"], obs
    obs = await ws.ask({"type": "step", "data": {"text": "let me think"}})
    assert obs["type"] == "observation" and not obs["data"]["done"], obs
    return ws


async def _finish(ws: LeanWebSocket, answer_text: str) -> str:
    obs = await ws.ask({"type": "step", "data": {"text": answer_text}})
    assert obs["data"]["done"], obs
    return str(obs["data"]["observation"]["outcome"])


async def _episode(host: str, port: int, task_id: str, answer_text: str) -> tuple[LeanWebSocket, str]:
    ws = await _start(host, port, task_id)
    return ws, await _finish(ws, answer_text)


async def _active(http: httpx.AsyncClient) -> int:
    return int((await http.get("/envhub/info")).json()["active_sessions"])


async def _wait_active(http: httpx.AsyncClient, want: int, timeout_s: float) -> int:
    deadline = time.monotonic() + timeout_s
    while True:
        active = await _active(http)
        if active == want or time.monotonic() > deadline:
            return active
        await asyncio.sleep(0.1)


async def _scenario(url: str, plans: list[tuple[str, str]]) -> None:
    host, port = urlsplit(url).hostname or "127.0.0.1", urlsplit(url).port or 0
    async with httpx.AsyncClient(base_url=url, timeout=30) as http:
        sockets = await asyncio.gather(*[_start(host, port, t) for t, _ in plans[:SESSIONS]])
        assert await _active(http) == SESSIONS
        extra = await open_ws(host, port)  # full: an explicit refusal, not a hang
        refusal = await extra.recv()
        assert b"CAPACITY_REACHED" in refusal

        doomed, living = sockets[:KILLED], sockets[KILLED:]
        for i, ws in enumerate(doomed):  # mid-episode
            ws.kill() if i % 2 else ws.freeze()
        outcomes = await asyncio.gather(*[_finish(ws, a) for ws, (_, a) in zip(living, plans[KILLED:SESSIONS],
                                                                                strict=True)])
        assert outcomes == ["success"] * (SESSIONS - KILLED)
        # the dead keep their sessions for a resume at first ...
        assert await _active(http) == SESSIONS
        # ... and give the slots back once the drop is known (a reset at once, a silent peer after
        # one unanswered ping) and the TTL has run out, at the reaper's next look (the metrics below
        # say each was closed as idle_expired); a hang guard at ten times that worst case
        worst = TTL + 2 * PING + TTL / 4 + 2.0
        assert await _wait_active(http, SESSIONS - KILLED, 10 * worst) == SESSIONS - KILLED

        again = await asyncio.gather(*[_episode(host, port, t, a) for t, a in plans[SESSIONS:]])
        assert [outcome for _, outcome in again] == ["success"] * KILLED
        for ws in living + [ws for ws, _ in again]:
            ws.close()
        for ws in doomed:
            ws.kill()
        assert await _wait_active(http, 0, 30) == 0
        metrics = (await http.get("/metrics")).text
        assert f'envhub_episodes_total{{env="{ENV_ID}",outcome="success"}} {SESSIONS}' in metrics
        assert f'envhub_sessions_closed_total{{env="{ENV_ID}",outcome="idle_expired"}} {KILLED}' in metrics


@pytest.mark.slow
def test_128_sessions_complete_and_killed_slots_come_back():
    local = envhub.make(ENV_ID)
    ids = list(local.tasks.task_ids("train"))[: SESSIONS + KILLED]
    plans = [(t, local.gold_actions(local.tasks.get(t))[-1].text) for t in ids]
    args = [ENV_ID, "--max-sessions", str(SESSIONS), "--session-ttl", str(TTL), "--ping-interval", str(PING)]
    with serve_in_subprocess(args) as (url, _proc):
        asyncio.run(asyncio.wait_for(_scenario(url, plans), timeout=240))
