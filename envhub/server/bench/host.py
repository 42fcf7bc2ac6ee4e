"""``envhub bench host``: a hosted OpenEnv env's step through our bridge next to ``openenv``'s own client.

One OpenEnv-protocol server (default: ``python -m envhub.server envhub/Computation-v0 --sandbox process``,
started here with an unlimited episode budget; or ``--url``) is played by two clients in this process, on
one ``/ws`` session each, with the same fixed sequence: ``reset`` of one task, then ``--steps`` steps of
one action (a reset again, untimed, after a step the server says is done):

* **envhub**: :class:`~envhub.tasks.openenv.env.OpenEnvBridge` (``envhub.make("openenv:URL")``), each
  step one ``env.step(Action(tool_calls=[...]))`` -- parsing, budget, episode record and observation
  included, as a rollout pays them;
* **openenv**: openenv's ``GenericEnvClient(base_url=URL).sync()`` (its documented sync API), each step
  one ``client.step(payload)`` with the payload the bridge sends (MCP: ``call_tool``; typed: the action).

Measured: the wall time of each step call (``time.perf_counter`` around it; resets are not timed). Rounds
alternate the order (envhub first in odd rounds), each after one warm-up pass per side. Per round, each
side's median step; the **overhead** is ours minus theirs (ms), the **ratio** ours / theirs; both are
reported as the median over rounds with their range. The target (issue #41): overhead at most 1 ms a step
at the median. The default action, ``python`` with empty code, is the cheapest step that reaches the
server's env: it answers a tool error (``the code is empty``) before any sandbox runs, so the figures are
the protocol and client costs, not the tool's.

Both sides must have seen the same replies: each side's step envelopes (observation, reward, done; the
bridge's recorded by wrapping its session's ``request``) are hashed per round, and the hashes compared.
No figure here is a test assertion.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from importlib.metadata import version
from pathlib import Path
from typing import Any

from openenv.core.generic_client import GenericEnvClient

import envhub
from envhub.errors import InfraError
from envhub.rollout.stats import spread
from envhub.types import Action, ToolCall

SIDES = ("envhub", "openenv")
LABELS = {"envhub": "envhub (OpenEnvBridge)", "openenv": "openenv (GenericEnvClient)"}
TARGET_MS = 1.0
DEFAULT_ENV = "envhub/Computation-v0"
#: no budget ends an episode: the server decides when it is done
UNLIMITED = {"max_turns": 10**9, "max_tool_calls": 10**9, "max_format_errors": 10**9,
             "max_agent_seconds": 1e12, "max_observation_chars": 10**9}


@dataclass
class HostBenchSettings:
    """What both sides share. ``url`` None starts ``envhub/Computation-v0`` here."""

    rounds: int = 5
    steps: int = 200
    warmup: int = 20
    url: str | None = None
    tool: str = "python"
    arguments: dict[str, Any] = field(default_factory=lambda: {"code": ""})

    def __post_init__(self) -> None:
        problems = [f"{name} must be >= {low}, got {getattr(self, name)}"
                    for name, low in (("rounds", 1), ("steps", 1), ("warmup", 0)) if getattr(self, name) < low]
        if problems:
            raise ValueError("envhub bench host: " + "; ".join(problems))


def server_command() -> list[str]:
    """The arguments of ``python -m envhub.server`` for the default server."""
    return [DEFAULT_ENV, "--sandbox", "process", "--env-arg", "budget=" + json.dumps(UNLIMITED)]


@contextmanager
def _server(url: str | None) -> Iterator[tuple[str, str]]:
    if url is not None:
        yield url.rstrip("/"), "given with --url"
        return
    from envhub.server.testing import serve_in_subprocess

    args = server_command()
    with serve_in_subprocess(args) as (base, _proc):  # the budget is in server_command(), left out here
        yield base, "python -m envhub.server " + " ".join(args[:3])


def _step_reply(reply: dict[str, Any]) -> dict[str, Any]:
    return {"observation": reply.get("observation"), "reward": reply.get("reward"), "done": bool(reply.get("done"))}


def _digest(replies: list[dict[str, Any]]) -> str:
    return hashlib.sha256(json.dumps(replies, sort_keys=True, default=str).encode()).hexdigest()[:16]


class BridgeSide:
    """Our side: the bridge, each step one ``env.step``."""

    def __init__(self, url: str, tool: str, arguments: dict[str, Any]) -> None:
        self.env: Any = envhub.make("openenv:" + url, budget=UNLIMITED)
        try:
            names = [t.name for t in self.env.tool_specs]
            if tool not in names:
                raise ValueError(f"{url} has no tool {tool!r}; its tools: {', '.join(names)} (pass --tool)")
            self.task_id = self.env.tasks.task_ids("train")[0]
        except BaseException:
            self.env.close()
            raise
        self.reset_data: dict[str, Any] = self.env.tasks.reset_data(self.task_id)
        self.payload = ({"type": "call_tool", "tool_name": tool, "arguments": arguments}
                        if self.env.mode == "mcp" else dict(arguments))
        self.action = Action(tool_calls=[ToolCall(name=tool, arguments=arguments)])
        self.replies: list[dict[str, Any]] = []
        request = self.env.session.request

        def recording(kind: str, data: Any = None) -> dict[str, Any]:
            reply: dict[str, Any] = request(kind, data)
            if kind == "step":
                self.replies.append(reply)
            return reply

        self.env.session.request = recording

    def play(self, steps: int) -> tuple[list[float], list[dict[str, Any]]]:
        env, action, clock = self.env, self.action, time.perf_counter
        env.reset(task_id=self.task_id)
        self.replies.clear()
        times = []
        for _ in range(steps):
            t0 = clock()
            obs = env.step(action)
            times.append(clock() - t0)
            if obs.done:
                if obs.outcome is not None and obs.outcome.is_infra:
                    raise RuntimeError(f"the bridge's step failed: {obs.outcome.value}: {obs.verdict}")
                env.reset(task_id=self.task_id)
        return times, [_step_reply(r) for r in self.replies]

    def close(self) -> None:
        self.env.close()


class ClientSide:
    """openenv's side: ``GenericEnvClient``'s sync API, each step one ``client.step``."""

    def __init__(self, url: str, payload: dict[str, Any], reset_data: dict[str, Any]) -> None:
        self.client: Any = GenericEnvClient(base_url=url).sync()
        self.client.connect()
        self.payload, self.reset_data = payload, reset_data

    def play(self, steps: int) -> tuple[list[float], list[dict[str, Any]]]:
        client, payload, clock = self.client, self.payload, time.perf_counter
        client.reset(**self.reset_data)
        times, replies = [], []
        for _ in range(steps):
            t0 = clock()
            result = client.step(payload)
            times.append(clock() - t0)
            replies.append({"observation": result.observation, "reward": result.reward, "done": bool(result.done)})
            if result.done:
                client.reset(**self.reset_data)
        return times, replies

    def close(self) -> None:
        self.client.close()  # ends its session and stops its event loop thread



def _p90(values: list[float]) -> float:
    return sorted(values)[min(len(values) - 1, int(0.9 * len(values)))]


def run_bench(settings: HostBenchSettings | None = None, *, out: Callable[[str], object] | None = print,
              out_file: Path | None = None) -> dict[str, Any]:
    """Both sides, ``rounds`` times, the order alternating; prints the table (unless ``out`` is None),
    writes the figures to ``out_file`` (atomically) and returns them."""
    s = settings or HostBenchSettings()
    with _server(s.url) as (url, origin):
        ours = BridgeSide(url, s.tool, s.arguments)
        try:
            sides: dict[str, Any] = {"envhub": ours, "openenv": ClientSide(url, ours.payload, ours.reset_data)}
            try:
                for side in sides.values():
                    if s.warmup:
                        side.play(s.warmup)
                rounds = []
                for number in range(1, s.rounds + 1):
                    order = SIDES if number % 2 else SIDES[::-1]
                    played = {name: sides[name].play(s.steps) for name in order}
                    row: dict[str, Any] = {"round": number, "order": list(order)}
                    for name, (times, replies) in played.items():
                        ms = [t * 1e3 for t in times]
                        row[name] = {"median_ms": statistics.median(ms), "p90_ms": _p90(ms), "digest": _digest(replies)}
                    row["overhead_ms"] = row["envhub"]["median_ms"] - row["openenv"]["median_ms"]
                    row["ratio"] = row["envhub"]["median_ms"] / row["openenv"]["median_ms"]
                    row["replies_match"] = played["envhub"][1] == played["openenv"][1]
                    rounds.append(row)
                sample = played["openenv"][1][0]
            finally:
                sides["openenv"].close()
        finally:
            ours.close()
    result = {"settings": asdict(s), "server": {"url": url, "origin": origin}, "mode": ours.env.mode,
              "task_id": ours.task_id, "payload": ours.payload,
              "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "openenv": version("openenv")},
              **{name: {"median_ms": spread([r[name]["median_ms"] for r in rounds]),
                        "p90_ms": spread([r[name]["p90_ms"] for r in rounds])} for name in SIDES},
              "overhead_ms": spread([r["overhead_ms"] for r in rounds]), "ratio": spread([r["ratio"] for r in rounds]),
              "target_ms": TARGET_MS, "replies_match": all(r["replies_match"] for r in rounds),
              "sample_reply": sample, "rounds": rounds}
    result["target_met"] = result["overhead_ms"]["median"] <= TARGET_MS
    if out is not None:
        for line in report_lines(result):
            out(line)
    if out_file is not None:
        from envhub.store import write_json_atomic

        write_json_atomic(out_file, result)
        if out is not None:
            out(f"wrote {out_file}")
    return result


def _range(f: dict[str, Any], fmt: str, sign: str = "") -> str:
    return f"{f['median']:{sign}{fmt}} [{f['min']:{sign}{fmt}}, {f['max']:{sign}{fmt}}]"


def report_lines(result: dict[str, Any]) -> list[str]:
    s, m = result["settings"], result["machine"]
    lines = [f"envhub bench host: {result['server']['url']} ({result['server']['origin']}), {result['mode']} mode, "
             f"task {result['task_id']}",
             f"step: {json.dumps(result['payload'])}; {s['rounds']} rounds x {s['steps']} steps per side, order "
             f"alternating, {s['warmup']} warm-up steps per side; {m['cpus']} CPUs, openenv {m['openenv']}",
             f"{'side':<28} {'step p50 ms, median [min, max] over rounds':>44} {'p90 ms':>8}"]
    for name in SIDES:
        lines.append(f"{LABELS[name]:<28} {_range(result[name]['median_ms'], '.3f'):>44} "
                     f"{result[name]['p90_ms']['median']:>8.3f}")
    lines.append(f"overhead (ours - theirs): {_range(result['overhead_ms'], '.3f', '+')} ms a step; "
                 f"ratio {_range(result['ratio'], '.2f')}x")
    lines.append(f"target (overhead <= {result['target_ms']:g} ms a step at the median): "
                 + ("met" if result["target_met"] else "NOT met"))
    digests = {r[name]["digest"] for r in result["rounds"] for name in SIDES}
    lines.append("replies: the same on both sides in every round" if result["replies_match"] else
                 f"replies: NOT the same on both sides (digests {', '.join(sorted(digests))}): the server is "
                 "not deterministic for this action, or the sides did not play alike")
    return lines


def parser() -> argparse.ArgumentParser:
    d = HostBenchSettings()
    p = argparse.ArgumentParser(prog="envhub bench host", description=(__doc__ or "").split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--rounds", type=int, default=d.rounds, help="rounds of both sides, order alternating")
    p.add_argument("--steps", type=int, default=d.steps, help="timed steps per side and round")
    p.add_argument("--warmup", type=int, default=d.warmup, help="untimed steps per side before the rounds")
    p.add_argument("--url", default=None, help="a running OpenEnv server (default: start envhub/Computation-v0)")
    p.add_argument("--tool", default=d.tool, help="the tool each step calls (a typed env's: act)")
    p.add_argument("--arguments", default=json.dumps(d.arguments), help="its arguments, as JSON")
    p.add_argument("--json", action="store_true", help="print the figures as JSON instead of the table")
    p.add_argument("--out", type=Path, default=None, help="also write the figures as JSON to this file")
    return p


def main(argv: list[str] | None = None) -> int:
    """``envhub bench host [options]`` (``python -m envhub.server.bench.host``); 2 on bad options."""
    args = parser().parse_args(sys.argv[1:] if argv is None else argv)
    try:
        arguments = json.loads(args.arguments)
        if not isinstance(arguments, dict):
            raise ValueError(f"--arguments must be a JSON object, got {args.arguments}")
        settings = HostBenchSettings(rounds=args.rounds, steps=args.steps, warmup=args.warmup, url=args.url,
                                     tool=args.tool, arguments=arguments)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        result = run_bench(settings, out=None if args.json else print, out_file=args.out)
    except (ValueError, InfraError) as exc:  # no such tool, a bad URL, a server that cannot be reached
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(result, indent=2, sort_keys=True))
    return 0


__all__ = ["HostBenchSettings", "main", "report_lines", "run_bench"]

if __name__ == "__main__":
    sys.exit(main())
