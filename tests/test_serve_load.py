"""Load: 128 concurrent sessions on a real server process, every episode completes; 32 clients
then die abruptly and their slots come back within the TTL.

The server runs as ``python -m envhub.server`` on 127.0.0.1 with a short TTL; the clients are
the lean asyncio client. All waits are bounded polls of the server's session count.
"""

from __future__ import annotations

import asyncio
import time
from urllib.parse import urlsplit

import httpx
import pytest

pytest.importorskip("fastapi")

import envhub
from envhub.server.loadgen import LeanWebSocket, open_ws
from envhub.server.testing import serve_in_subprocess

ENV_ID = "envhub/Computation-v0"
SESSIONS = 128
KILLED = 32
TTL = 2.0


async def _episode(ws: LeanWebSocket, task_id: str, answer_text: str) -> str:
    """reset, one invalid action (a format error the env answers), then the gold answer."""
    obs = await ws.ask({"type": "reset", "data": {"task_id": task_id}})
    assert obs["type"] == "observation" and not obs["data"]["done"], obs
    obs = await ws.ask({"type": "step", "data": {"text": "let me think"}})
    assert obs["type"] == "observation" and not obs["data"]["done"], obs
    obs = await ws.ask({"type": "step", "data": {"text": answer_text}})
    assert obs["data"]["done"], obs
    return str(obs["data"]["observation"]["outcome"])


async def _session(host: str, port: int, task_id: str, answer_text: str) -> tuple[LeanWebSocket, str]:
    ws = await open_ws(host, port)
    return ws, await _episode(ws, task_id, answer_text)


async def _wait_active(http: httpx.AsyncClient, want: int, timeout_s: float) -> int:
    deadline = time.monotonic() + timeout_s
    while True:
        active = (await http.get("/envhub/info")).json()["active_sessions"]
        if active == want or time.monotonic() > deadline:
            return int(active)
        await asyncio.sleep(0.1)


async def _scenario(url: str, plans: list[tuple[str, str]]) -> None:
    host, port = urlsplit(url).hostname or "127.0.0.1", urlsplit(url).port or 0
    async with httpx.AsyncClient(base_url=url, timeout=30) as http:
        results = await asyncio.gather(*[_session(host, port, t, a) for t, a in plans[:SESSIONS]])
        sockets = [ws for ws, _ in results]
        assert [outcome for _, outcome in results] == ["success"] * SESSIONS
        assert await _wait_active(http, SESSIONS, 5) == SESSIONS

        extra = await open_ws(host, port)  # full: an explicit refusal, not a hang
        refusal = await extra.recv()
        assert b"CAPACITY_REACHED" in refusal

        for ws in sockets[:KILLED]:
            ws.kill()
        # killed sockets keep their sessions for a resume, then give the slots back within the TTL
        assert await _wait_active(http, SESSIONS - KILLED, TTL + 30) == SESSIONS - KILLED

        again = await asyncio.gather(*[_session(host, port, t, a) for t, a in plans[SESSIONS:]])
        assert [outcome for _, outcome in again] == ["success"] * KILLED
        for ws in sockets[KILLED:] + [ws for ws, _ in again]:
            ws.close()
        assert await _wait_active(http, 0, 30) == 0
        metrics = (await http.get("/metrics")).text
        assert f'envhub_episodes_total{{env="{ENV_ID}",outcome="success"}} {SESSIONS + KILLED}' in metrics
        assert f'envhub_sessions_closed_total{{env="{ENV_ID}",outcome="idle_expired"}} {KILLED}' in metrics


@pytest.mark.slow
def test_128_sessions_complete_and_killed_slots_come_back():
    local = envhub.make(ENV_ID)
    ids = list(local.tasks.task_ids("train"))[: SESSIONS + KILLED]
    plans = [(t, local.gold_actions(local.tasks.get(t))[-1].text) for t in ids]
    args = [ENV_ID, "--max-sessions", str(SESSIONS), "--session-ttl", str(TTL), "--ping-interval", "10"]
    with serve_in_subprocess(args) as (url, _proc):
        asyncio.run(asyncio.wait_for(_scenario(url, plans), timeout=240))
