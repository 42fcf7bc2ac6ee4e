"""Burst benchmark: many sessions open at once and each makes its first tool call.

A trainer that starts a batch of episodes opens all its sessions together, and each episode's
first ``python`` call needs a sandbox. This measures that first step -- a real tool call that
runs in the sandbox -- for ``burst`` WebSocket sessions opened at once against a freshly started
server hosting ``envhub/Computation-v0``, three ways:

- ``cold``: the server's defaults (``envhub serve ENV``): the env's pool fills on demand, so the
  burst's first steps start their sandboxes;
- ``prewarm``: ``envhub serve ENV --prewarm N``: the server starts N sandboxes before it answers
  ``/health``, and the burst comes as soon as it does;
- ``warmed`` (the baseline): a pool warmed in advance for the burst by the client itself -- one
  burst run to completion and closed, its sandboxes back in a pool of N -- before the measured one.

Each round starts fresh servers and the sides alternate, so background load on a shared machine
hits all alike; the figures are the p50 and p90 of the first step's round trip over every session
of every round, with the spread of the per-round p90s.

``python -m envhub.server.bench.burst docker bwrap`` runs it; ``run_burst(out=print)`` returns the figures.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

ENV_ID = "envhub/Computation-v0"
STEP_TEXT = '<tool_call>{"name": "python", "arguments": {"code": "print(6 * 7)"}}</tool_call>'
#: How long one burst may take before the bench gives up (a hang guard, not a target).
BURST_TIMEOUT_S = 600.0


@dataclass
class Burst:
    """One burst: per session, seconds from the burst's start to each event."""

    first_step_s: list[float] = field(default_factory=list)
    open_to_result_s: list[float] = field(default_factory=list)
    seconds: float = 0.0


def _serve(backend: str, pool: int, prewarm: int, port: int) -> None:
    """Subprocess entry: serve the Computation env on 127.0.0.1:port, ``pool`` -1: the env's default."""
    import uvicorn

    from envhub.server.app import create_app
    from envhub.server.cli import uvicorn_options
    from envhub.server.hub import ServerConfig

    env_kwargs: dict[str, Any] = {"sandbox": backend}
    if pool >= 0:
        env_kwargs["sandbox_pool"] = pool
    app = create_app(ENV_ID, ServerConfig(max_sessions=256, session_ttl_s=60, env_kwargs=env_kwargs, prewarm=prewarm))
    uvicorn.run(app, **uvicorn_options(host="127.0.0.1", port=port, ping_interval=60.0,
                                       max_message_bytes=1 << 20, log_level="warning"))


@contextlib.contextmanager
def _server(backend: str, pool: int = -1, prewarm: int = 0) -> Iterator[int]:
    import socket

    import httpx

    from envhub.sandboxes.spawner import stop

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "envhub.server.bench.burst", "--serve", backend, str(pool),
                             str(prewarm), str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120 + BURST_TIMEOUT_S
        while True:
            if proc.poll() is not None:
                err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
                raise RuntimeError(f"the {backend} server exited:\n{err[-3000:]}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise RuntimeError(f"the {backend} server did not start")
            time.sleep(0.1)
        yield port
    finally:
        stop(proc, 30)
        if proc.stderr is not None:
            proc.stderr.close()


async def _burst(port: int, sessions: int) -> Burst:
    """``sessions`` WebSockets opened at once; each resets, then steps once with a python call."""
    from envhub.server.bench.loadgen import open_ws

    payload = json.dumps({"type": "step", "data": {"text": STEP_TEXT}}).encode()
    result = Burst()
    clock = time.perf_counter
    t0 = clock()

    async def one() -> Any:
        ws = await open_ws("127.0.0.1", port)
        reply = await ws.ask({"type": "reset", "data": {}})
        if reply.get("type") != "observation":
            raise RuntimeError(f"reset failed: {reply}")
        t_step = clock()
        step = json.loads(await ws.roundtrip(payload))
        done = clock()
        messages = step.get("data", {}).get("observation", {}).get("messages") or [{}]
        if step.get("type") != "observation" or "42" not in str(messages[0].get("content")):
            raise RuntimeError(f"the first tool call did not run in the sandbox: {step}")
        result.first_step_s.append(done - t_step)
        result.open_to_result_s.append(done - t0)
        return ws

    sockets = await asyncio.wait_for(asyncio.gather(*(one() for _ in range(sessions))), BURST_TIMEOUT_S)
    result.seconds = clock() - t0
    for ws in sockets:
        ws.close()
    return result


def _pool_idle(port: int) -> int:
    """Idle sandboxes in the server's pools, from its ``/metrics``."""
    import httpx

    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
    return sum(int(float(line.rsplit(" ", 1)[1])) for line in text.splitlines()
               if line.startswith("envhub_sandbox_pool_idle{"))


def _warm(runner: asyncio.Runner, port: int, sessions: int) -> None:
    """Warm the server's pool for ``sessions``: one burst to completion, closed, its sandboxes back."""
    runner.run(_burst(port, sessions))
    deadline = time.monotonic() + BURST_TIMEOUT_S
    while _pool_idle(port) < sessions:
        if time.monotonic() > deadline:
            raise RuntimeError(f"the pool did not warm to {sessions} sandboxes")
        time.sleep(0.2)


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q / 100 * len(ordered)))]


def _summary(bursts: list[Burst]) -> dict[str, float]:
    steps = [x for b in bursts for x in b.first_step_s]
    opened = [x for b in bursts for x in b.open_to_result_s]
    p90s = [_percentile(b.first_step_s, 90) for b in bursts]
    return {
        "first_step_p50_s": _percentile(steps, 50), "first_step_p90_s": _percentile(steps, 90),
        "open_to_result_p90_s": _percentile(opened, 90),
        "p90_min_s": min(p90s), "p90_max_s": max(p90s), "rounds": float(len(bursts)),
    }


SIDES = ("cold", "prewarm", "warmed")


def _round(runner: asyncio.Runner, backend: str, side: str, sessions: int) -> Burst:
    if side == "cold":
        with _server(backend) as port:
            return runner.run(_burst(port, sessions))
    if side == "prewarm":
        with _server(backend, prewarm=sessions) as port:
            return runner.run(_burst(port, sessions))
    with _server(backend, pool=sessions) as port:
        _warm(runner, port, sessions)
        return runner.run(_burst(port, sessions))


def run_burst(out: Callable[[Any], None] = print, *, backends: tuple[str, ...] = ("docker", "bwrap"),
              sessions: int = 64, rounds: int = 3) -> dict[str, Any]:
    """First-step p50/p90 of ``sessions`` sessions opened at once: cold, prewarmed, and (the
    baseline) against a pool warmed in advance."""
    load_before = os.getloadavg()
    report: dict[str, Any] = {"sessions": sessions, "load_before": load_before}
    with asyncio.Runner() as runner:
        for backend in backends:
            bursts: dict[str, list[Burst]] = {side: [] for side in SIDES}
            for _ in range(rounds):
                for side in SIDES:
                    bursts[side].append(_round(runner, backend, side, sessions))
            report[backend] = {side: _summary(b) for side, b in bursts.items()}
    report["load_after"] = os.getloadavg()
    out(f"serve burst: {sessions} sessions opened at once, first step = one python call in the sandbox, "
        f"{ENV_ID}, {rounds} alternating rounds of fresh servers")
    out(f"  {'backend':<8} {'pool':<8} {'p50 s':>7} {'p90 s':>7} {'p90 spread s':>13} {'open->result p90 s':>19} "
        f"{'p90 / warmed':>13}")
    for backend in backends:
        base = max(report[backend]["warmed"]["first_step_p90_s"], 1e-9)
        for side in SIDES:
            row = report[backend][side]
            row["ratio_p90"] = row["first_step_p90_s"] / base
            out(f"  {backend:<8} {side:<8} {row['first_step_p50_s']:>7.2f} {row['first_step_p90_s']:>7.2f} "
                f"{row['p90_min_s']:>6.2f}-{row['p90_max_s']:<6.2f} {row['open_to_result_p90_s']:>19.2f} "
                f"{row['ratio_p90']:>12.1f}x")
    out("  target: p90 < 3 s; cold = `envhub serve ENV`, prewarm = `--prewarm N` (burst as soon as /health answers), "
        "warmed = baseline")
    out(f"  load average (1, 5, 15 min): before {_load(load_before)}, after {_load(report['load_after'])}")
    return report


def _load(load: tuple[float, float, float]) -> str:
    return ", ".join(f"{x:.2f}" for x in load)


def main() -> None:
    if len(sys.argv) == 6 and sys.argv[1] == "--serve":
        _serve(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))
        return
    report = run_burst(backends=tuple(sys.argv[1:]) or ("docker", "bwrap"))
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()


__all__ = ["run_burst"]
