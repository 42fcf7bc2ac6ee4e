"""The OpenEnv part of ``envhub verify openenv:...`` (the generic checks are
:mod:`envhub.verifiers.fidelity`'s):

- an **oracle** where the server offers one: an envhub server started with ``--expose-gold``
  answers ``{"type": "gold"}`` on the running ``/ws`` session with the task's reference actions
  (``GET /envhub/info`` says ``gold_exposed``); any other server has none, and the oracle check
  says "no oracle";
- **agreement**: N episodes played through the bridge, each step the bridge sent recorded as it
  went on the wire, then the same reset and the same step payloads played through OpenEnv's own
  ``openenv.core.GenericEnvClient`` on a fresh session; per step the reward, done and error code,
  and per episode the verdict (the done step's reward and outcome) must agree. The episodes' actions
  cycle through the oracle's (where there is one), a seeded random policy's (tool calls with often
  wrong arguments, garbage) and the empty answer.

A server that grades the same actions differently from one session to the next (state kept across
sessions, a reward drawn at random) fails agreement as surely as a bridge that misreads the
protocol: either way a reward seen through envhub is not the reward the source gives.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from envhub.policies import RandomPolicy
from envhub.types import Action, Observation, Outcome, Task
from envhub.verifiers.fidelity import CheckResult, ExtraCheck, NoOracle, Oracle, empty_answer, play

from .env import OpenEnvBridge
from .session import AGENT_ERROR_CODES, ActionRejected, ServerFault

#: turns of the random policy in an agreement episode before it submits the empty answer
RANDOM_TURNS = 6
_CODE = re.compile(r"\(code: ([A-Z_0-9]+)\)\s*$")


def served_oracle(env: Any, task: Task) -> list[Action]:
    """The reference actions of the running episode's task from the server itself (an envhub server
    with ``--expose-gold``); :class:`NoOracle` for any other server."""
    if not isinstance(env, OpenEnvBridge):
        raise NoOracle(f"{env.env_id} is no OpenEnv bridge")
    info = env.session.try_get_json("/envhub/info")
    if not (isinstance(info, dict) and info.get("gold_exposed")):
        why = ("the envhub server does not expose gold (serve it with --expose-gold)" if isinstance(info, dict)
               else "an OpenEnv server has no reference solution")
        raise NoOracle(why)
    try:
        reply = env.session.request("gold")
    except (ServerFault, ActionRejected) as exc:
        raise NoOracle(f"the server's gold failed: {exc}") from None
    return [Action.model_validate(a) for a in reply.get("actions") or []]


def fidelity_plan(env: Any, *, episodes: int = 3) -> tuple[Oracle, list[ExtraCheck]]:
    """The oracle and the extra checks of an ``openenv:`` env, for
    :func:`envhub.verifiers.fidelity.run_fidelity`."""
    return served_oracle, ([agreement_check(episodes)] if episodes > 0 else [])


# ---- agreement --------------------------------------------------------------------------------------

@dataclass
class Wire:
    """One request the bridge sent and what came of it: ``("ok", reward, done, outcome)``, or
    ``("error", code)``."""

    kind: str
    data: Any
    result: tuple[Any, ...]


@dataclass
class _Recorder:
    """Records the reset and step requests of a bridge's session (the bridge itself is unchanged:
    the session's ``request`` is wrapped on the instance for one episode)."""

    session: Any
    wires: list[Wire] = field(default_factory=list)

    def __enter__(self) -> _Recorder:
        inner = self.session.request

        def request(kind: str, data: Any = None) -> dict[str, Any]:
            if kind not in ("reset", "step"):
                return inner(kind, data)
            sent = json.loads(json.dumps(data))
            try:
                reply = inner(kind, data)
            except (ActionRejected, ServerFault) as exc:
                self.wires.append(Wire(kind, sent, ("error", exc.code)))
                raise
            self.wires.append(Wire(kind, sent, _ok(reply)))
            return reply

        self.session.request = request
        return self

    def __exit__(self, *exc: object) -> None:
        self.session.__dict__.pop("request", None)


def _ok(reply: dict[str, Any]) -> tuple[Any, ...]:
    obs = reply.get("observation")
    named = obs.get("outcome") if isinstance(obs, dict) else None
    return ("ok", reply.get("reward"), bool(reply.get("done")), named)


def replay(base_url: str, wires: Sequence[Wire], *, headers: dict[str, str] | None = None,
           timeout_s: float = 300.0) -> list[tuple[Any, ...]]:
    """The same requests through OpenEnv's ``GenericEnvClient`` on a fresh session: each one's result,
    in :class:`Wire`'s form."""
    from openenv.core import GenericEnvClient

    client = GenericEnvClient(base_url=base_url, message_timeout_s=timeout_s, headers=headers or None,
                              mode="simulation").sync()
    results: list[tuple[Any, ...]] = []
    try:
        for wire in wires:
            try:
                step = client.reset(**(wire.data or {})) if wire.kind == "reset" else client.step(wire.data)
            except RuntimeError as exc:  # the client's error frame: "Server error: ... (code: X)"
                found = _CODE.search(str(exc))
                results.append(("error", found.group(1) if found else "ERROR"))
                if found is None or found.group(1) not in AGENT_ERROR_CODES:
                    break  # the session is gone: the rest cannot be compared
                continue
            obs = step.observation if isinstance(step.observation, dict) else {}
            results.append(("ok", step.reward, bool(step.done), obs.get("outcome")))
    finally:
        client.close()
    return results


def _same(a: tuple[Any, ...], b: tuple[Any, ...]) -> bool:
    if a[0] != b[0]:
        return False
    if a[0] == "error":
        return a[1] == b[1]
    (_, ra, da, oa), (_, rb, db, ob) = a, b
    if da != db or oa != ob:
        return False
    if ra is None or rb is None or not all(isinstance(r, int | float) for r in (ra, rb)):
        return ra == rb
    return ra == rb or math.isclose(ra, rb, rel_tol=1e-9, abs_tol=1e-12)


def _show(result: tuple[Any, ...] | None) -> str:
    if result is None:
        return "nothing"
    if result[0] == "error":
        return f"error {result[1]}"
    reward = "None" if result[1] is None else f"{result[1]:g}" if isinstance(result[1], int | float) else repr(result[1])
    return f"reward {reward}{', done' if result[2] else ''}"


def _verdict_of(results: Sequence[tuple[Any, ...]], success_reward: float) -> str:
    """The verdict a step sequence comes to: the first done step's reward and outcome (the server's
    own where it names one), or that the server never ended the episode."""
    for r in results:
        if r[0] == "ok" and r[2]:
            reward = 0.0 if r[1] is None else r[1]
            if not isinstance(reward, int | float) or not math.isfinite(reward):
                return f"{Outcome.VERIFIER_ERROR.value}, reward {reward!r}"
            named = r[3] if r[3] in Outcome.__members__.values() else None
            outcome = named or (Outcome.SUCCESS.value if reward >= success_reward else Outcome.WRONG_ANSWER.value)
            return f"{outcome}, reward {float(reward):g}"
    return "not ended by the server"


def _scripts(oracle: Oracle | None) -> Iterator[tuple[str, Callable[[Any, Observation], list[Action]]]]:
    """The action scripts the agreement episodes cycle through."""
    def random_script(seed: int) -> Callable[[Any, Observation], list[Action]]:
        def script(env: Any, obs: Observation) -> list[Action]:
            agent = RandomPolicy().start(env, obs, seed=seed)
            return [Action(text=agent.act(obs).text) for _ in range(RANDOM_TURNS)] + [empty_answer(env, obs)] * 60
        return script

    kinds: list[tuple[str, Any]] = []
    if oracle is not None:
        kinds.append(("oracle", lambda env, obs: oracle(env, env.episode.task)))
    kinds += [("random", None), ("empty_answer", lambda env, obs: [empty_answer(env, obs)] * 64)]
    n = 0
    while True:
        for name, script in kinds:
            yield (f"random(seed={n})", random_script(n)) if name == "random" else (name, script)
            n += 1


def agreement_check(episodes: int = 3, *, oracle: Oracle | None = served_oracle) -> ExtraCheck:
    """``episodes`` episodes, over the task sample in turn, played through the bridge and replayed
    through ``GenericEnvClient``; one row per episode (see the module docstring)."""

    def check(env: Any, task_ids: Sequence[str]) -> list[CheckResult]:
        if not isinstance(env, OpenEnvBridge):
            return [CheckResult("*", "agreement", "same verdicts as GenericEnvClient", "not an OpenEnv bridge", "skip")]
        rows: list[CheckResult] = []
        scripts = _scripts(oracle)
        for i in range(episodes):
            task_id = task_ids[i % len(task_ids)]
            name, script = next(scripts)
            with _Recorder(env.session) as rec:
                try:
                    played = play(env, task_id, script)
                except NoOracle:  # no oracle here: this episode and the rest go without it
                    scripts = _scripts(None)
                    name, script = next(scripts)
                    rec.wires.clear()
                    played = play(env, task_id, script)
            rows.append(_compare(env, task_id, name, rec.wires, played))
        return rows

    return check


def _compare(env: OpenEnvBridge, task_id: str, name: str, wires: list[Wire], played: Any) -> CheckResult:
    check = f"agreement:{name}"
    if played.error or not wires:
        return CheckResult(task_id, check, "same verdicts as GenericEnvClient", played.error or "no request sent",
                           "fail", "the bridge's episode did not run")
    env.session.disconnect()  # a server takes one session by default: the replay needs the bridge's
    try:
        reference = replay(env.session.base_url, wires, headers=env.session.headers, timeout_s=env.session.timeout_s)
    except Exception as exc:
        return CheckResult(task_id, check, "GenericEnvClient plays the same steps", f"raised {type(exc).__name__}",
                           "fail", str(exc)[:300])
    ours = [w.result for w in wires]
    want, got = _verdict_of(reference, env.success_reward), _verdict_of(ours, env.success_reward)
    last: Observation | None = played.last
    if last is not None and last.done and got != "not ended by the server":  # what the bridge made of it
        outcome = last.outcome.value if last.outcome is not None else "?"
        got = f"{outcome}, reward {last.reward:g}"
    mismatch = next((i for i, (a, b) in enumerate(zip(ours, reference, strict=False)) if not _same(a, b)), None)
    if mismatch is None and len(reference) != len(ours):
        mismatch = min(len(reference), len(ours))
    steps = f"{len(ours)} requests"
    if mismatch is not None:
        a = ours[mismatch] if mismatch < len(ours) else None
        b = reference[mismatch] if mismatch < len(reference) else None
        detail = (f"request {mismatch} ({wires[min(mismatch, len(wires) - 1)].kind}): bridge {_show(a)}, "
                  f"GenericEnvClient {_show(b)}")
        return CheckResult(task_id, check, f"client: {want}", f"bridge: {got}", "fail", detail)
    ok = want == got
    return CheckResult(task_id, check, f"client: {want}", f"bridge: {got}", "pass" if ok else "fail",
                       f"{steps} agree step by step" if ok else f"{steps} agree, the verdicts do not")


__all__ = ["RANDOM_TURNS", "Wire", "agreement_check", "fidelity_plan", "replay", "served_oracle"]
