"""The Verifiers part of ``envhub verify verifiers:...`` (the generic checks are
:mod:`envhub.verifiers.fidelity`'s): **agreement** with Verifiers' own runner.

Each of N episodes is played through the bridge with a fixed script (an empty answer, a guess, a
tool call with missing arguments then a guess); the answers the bridge gave the harness are then
replayed, in order, as the model of ``vf-eval`` -- Verifiers' own CLI runner, in the bridge's
environment, on the same task with the same harness -- and the trace it writes is scored the way
the bridge scores its own (:func:`.outcomes.verdict_of`). The outcome and reward must be equal. A
bridge that loses or reorders what the model said, or misreads the taskset's rewards, fails; so
does a taskset that grades the same answers differently from one run to the next.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import queue
import subprocess
import tempfile
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from envhub.types import Action, Observation, ToolCall
from envhub.verifiers.fidelity import CheckResult, ExtraCheck, Played, play

from .env import VerifiersBridge
from .outcomes import verdict_of
from .relay import ModelCall, Relay
from .venv import bridge_python

EVAL_TIMEOUT_S = 600.0


def _scripts() -> list[tuple[str, Callable[[Any, Observation], list[Action]]]]:
    def empty(_env: Any, _obs: Observation) -> list[Action]:
        return [Action(text="")]

    def guess(_env: Any, _obs: Observation) -> list[Action]:
        return [Action(text="The answer is 0")]

    def tool_then_guess(_env: Any, obs: Observation) -> list[Action]:
        first = [Action(text="", tool_calls=[ToolCall(name=obs.tools[0].name, arguments={})])] if obs.tools else []
        return [*first, Action(text="The answer is 8")]

    return [("empty_answer", empty), ("guess", guess), ("tool_then_guess", tool_then_guess)]


def agreement_check(episodes: int = 3) -> ExtraCheck:
    """``episodes`` episodes over the task sample in turn, each compared with ``vf-eval``'s run of the
    same answers; one row per episode (see the module docstring)."""

    def check(env: Any, task_ids: Sequence[str]) -> list[CheckResult]:
        if not isinstance(env, VerifiersBridge):
            return [CheckResult("*", "agreement", "same verdicts as vf-eval", "not a Verifiers bridge", "skip")]
        rows = []
        scripts = _scripts()
        for i in range(episodes):
            task_id = task_ids[i % len(task_ids)]
            name, script = scripts[i % len(scripts)]
            played = play(env, task_id, script)
            rows.append(_compare(env, task_id, name, list(env.answers), played))
        return rows

    return check


def _compare(env: VerifiersBridge, task_id: str, name: str, answers: list[dict[str, Any]], played: Played
             ) -> CheckResult:
    check = f"agreement:{name}"
    if played.error or not played.ended or played.last is None:
        return CheckResult(task_id, check, "same verdict as vf-eval", played.got(), "fail", "the bridge's episode did not end")
    last = played.last
    got = f"{last.outcome.value if last.outcome else '?'}, reward {last.reward:g}"
    try:
        trace = run_vf_eval(env, env.tasks.index_of(task_id), answers)
    except Exception as exc:
        return CheckResult(task_id, check, "vf-eval plays the same answers", f"raised {type(exc).__name__}", "fail",
                           str(exc)[:300])
    want = verdict_of(trace, acted=bool(answers), success_reward=env.success_reward, floor=env.floor)
    same = want.outcome is last.outcome and math.isclose(want.reward, last.reward, abs_tol=1e-9)
    return CheckResult(task_id, check, f"vf-eval: {want.outcome.value}, reward {want.reward:g}", f"bridge: {got}",
                       "pass" if same else "fail", f"{len(answers)} answer(s) replayed" if same else want.detail[:200])


def run_vf_eval(env: VerifiersBridge, index: int, answers: list[dict[str, Any]]) -> dict[str, Any]:
    """``vf-eval`` on task ``index`` with ``answers`` as its model (in order; a request past them is
    refused); the summary of the trace it wrote, in the worker's form."""
    source = env.source
    calls: queue.Queue[Any] = queue.Queue()
    relay = Relay(calls=calls)
    stop = threading.Event()

    def answer() -> None:
        given = iter(answers)
        while not stop.is_set():
            try:
                call: ModelCall = calls.get(timeout=0.2)
            except queue.Empty:
                continue
            reply = next(given, None)
            if reply is None:
                call.fail(503, "the replayed episode has no further answer")
            else:
                call.answer(reply["content"], [ToolCall.model_validate(c) for c in reply["tool_calls"]])

    threading.Thread(target=answer, name="vf-eval-replay", daemon=True).start()
    python = bridge_python()
    with tempfile.TemporaryDirectory(prefix="envhub-vf-eval-") as out:
        cmd = [python, "-P", "-c", "from verifiers.v1.cli.eval.main import main; main()", source["taskset"],
               "-m", "envhub-replay", "--client.base-url", relay.base_url, "--client.api-key-var", "ENVHUB_NO_KEY",
               "--no-push", "--select.include.idx", str(index), "-n", "1", "-o", out,
               "--env.agent.harness.id", source["harness"], "--env.agent.runtime.type", "subprocess"]
        for key, value in (source.get("taskset_args") or {}).items():
            cmd += [f"--env.taskset.{key.replace('_', '-')}", json.dumps(value) if not isinstance(value, str) else value]
        environ = {**os.environ}
        if source.get("pythonpath"):
            environ["PYTHONPATH"] = source["pythonpath"]
        try:
            done = subprocess.run(cmd, cwd=out, env=environ, capture_output=True, text=True, timeout=EVAL_TIMEOUT_S)
        finally:
            stop.set()
            relay.close()
        written = sorted(Path(out).glob("*/traces.jsonl"))
        if not written or not written[0].read_text().strip():
            raise RuntimeError(f"vf-eval wrote no trace (exit {done.returncode}): {(done.stderr or done.stdout)[-300:]}")
        episode = json.loads(written[0].read_text().splitlines()[-1])
    return _summary(episode)


def _summary(episode: dict[str, Any]) -> dict[str, Any]:
    """A ``traces.jsonl`` episode as the worker summarizes a trace (:func:`.worker._trace_summary`)."""
    trace = (episode.get("traces") or [{}])[-1]
    rewards = {name: (None if r is None else float(r["score"]) * float(r.get("weight", 1.0)))
               for name, r in (trace.get("rewards") or {}).items()}
    total = sum(v for v in rewards.values() if v is not None) if all(v is not None for v in rewards.values()) else None
    with contextlib.suppress(TypeError):
        if total is not None and not math.isfinite(total):
            total = str(total)
    errors = [{"type": e.get("type"), "message": e.get("message", "")} for e in trace.get("errors") or []]
    return {"ok": trace.get("ok"), "reward": total, "rewards": rewards, "stop_condition": trace.get("stop_condition"),
            "is_timeout": bool(trace.get("is_timeout") or episode.get("is_timeout")),
            "is_truncated": trace.get("stop_condition") in ("max_turns", "max_input_tokens", "max_output_tokens",
                                                            "max_total_tokens", "compaction_failed"),
            "errors": errors,
            "episode_errors": [{"type": e.get("type"), "message": e.get("message", "")}
                               for e in episode.get("errors") or []]}


__all__ = ["agreement_check", "run_vf_eval"]
