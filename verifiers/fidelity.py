"""Fidelity of a hosted env: what can be checked of any env without knowing its family.

``envhub verify PREFIX:TARGET`` (a bridged id) runs these checks, per task, through the env's own
episode API (:class:`~envhub.episode.EpisodeEnv`: ``reset`` / ``step``), so any bridge can reuse
them:

- ``oracle`` -- the reference solution, where the env (or the bridge) can get one, must earn the
  top of the reward range as a ``success``; where there is none the check is skipped ("no oracle"),
  never failed;
- ``nothing_done`` -- turns that call no tool -- and ``empty_answer`` -- the terminal tool called
  with empty arguments, turn after turn (the noop policy) -- must earn the bottom of the range,
  never a ``success`` and never an infrastructure outcome: the floor; and doing nothing must earn
  no more than the empty answer (``floor_order``: where the source's floor is below the reward the
  bridge gives its own verdicts, an agent would be paid for saying nothing);
- ``huge_action`` -- a 1 MB message, then every tool called with a 1 MB string argument --,
  ``malformed`` -- an unknown tool, a call that is no JSON or no JSON object, garbage -- and
  ``wrong_types`` -- every tool called with arguments of the wrong JSON types -- must end in no
  infrastructure outcome and raise nothing out of our side: an agent must never be able to cause
  an outcome the loss leaves out.

A source-specific check (say, the same actions through the source's own client, verdicts compared)
is an :data:`ExtraCheck`, handed in by whoever knows the source (the OpenEnv bridge's family folder
has one).

The reward range is the env's ``reward_range`` where it declares one (an OpenEnv package's
``validation:`` block), else ``[0, success_reward]`` (``success_reward`` defaulting to 1.0).
"""

from __future__ import annotations

import contextlib
import itertools
import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from envhub.parsing import format_tool_call
from envhub.types import Action, Observation, Outcome, Task, ToolCall

if TYPE_CHECKING:
    from envhub.episode import EpisodeEnv

Status = Literal["pass", "fail", "skip"]
#: How long a scripted episode may go on before the check gives up on it (each env's budget ends
#: its episodes far sooner: 8 turns by default).
MAX_STEPS = 64
HUGE_BYTES = 1 << 20
UNKNOWN_TOOL = "envhub_fidelity_no_such_tool"
_EPS = 1e-9


class NoOracle(Exception):
    """The env has no reference solution for a task; the message says why."""


@dataclass
class CheckResult:
    """One row of the fidelity table."""

    task_id: str
    check: str
    expected: str
    got: str
    status: Status
    detail: str = ""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class FidelityReport:
    env_id: str
    reward_range: tuple[float, float]
    results: list[CheckResult] = field(default_factory=list)

    @property
    def failures(self) -> int:
        return sum(r.status == "fail" for r in self.results)

    def by_task(self) -> dict[str, list[CheckResult]]:
        rows: dict[str, list[CheckResult]] = {}
        for r in self.results:
            rows.setdefault(r.task_id, []).append(r)
        return rows

    def counts(self) -> dict[str, int]:
        return {s: sum(r.status == s for r in self.results) for s in ("pass", "fail", "skip")}

    def to_json(self) -> dict[str, Any]:
        return {"env_id": self.env_id, "reward_range": list(self.reward_range), **self.counts(),
                "tasks": {tid: [r.to_json() for r in rows] for tid, rows in self.by_task().items()}}


#: the reference solution of the running episode's task: its actions, or :class:`NoOracle`
Oracle = Callable[["EpisodeEnv", Task], list[Action]]
#: a check over the whole task sample (env, task ids) -> rows
ExtraCheck = Callable[["EpisodeEnv", Sequence[str]], Iterable[CheckResult]]


def default_oracle(env: EpisodeEnv, task: Task) -> list[Action]:
    """``env.gold_actions(task)``; :class:`NoOracle` where the env has none (it raises)."""
    try:
        return list(env.gold_actions(task))
    except Exception as exc:  # NotImplementedError for a bridge; a served env without gold
        raise NoOracle(str(exc) or type(exc).__name__) from None


def reward_range(env: EpisodeEnv) -> tuple[float, float]:
    """The env's declared ``reward_range``, else ``(0, success_reward or 1.0)``."""
    declared = getattr(env, "reward_range", None)
    if isinstance(declared, tuple | list) and len(declared) == 2:
        low, high = (float(x) for x in declared)
        if math.isfinite(low) and math.isfinite(high) and low < high:
            return low, high
    return 0.0, float(getattr(env, "success_reward", 1.0) or 1.0)


def run_fidelity(env: EpisodeEnv, task_ids: Sequence[str], *, oracle: Oracle = default_oracle,
                 extra_checks: Sequence[ExtraCheck] | None = None, huge_bytes: int = HUGE_BYTES,
                 on_result: Callable[[CheckResult], None] | None = None) -> FidelityReport:
    """Every check of the module docstring on each of ``task_ids``, then ``extra_checks`` (None: an
    ``agreement`` row saying that no reference client is known for this env)."""
    low, high = reward_range(env)
    report = FidelityReport(env_id=str(env.env_id), reward_range=(low, high))

    def add(result: CheckResult) -> None:
        report.results.append(result)
        if on_result is not None:
            on_result(result)

    for task_id in task_ids:
        add(_oracle_check(env, task_id, oracle, high))
        nothing, nothing_reward = _floor_check(env, task_id, "nothing_done", low,
                                               lambda _env, _obs: _repeat(Action(text="")))
        empty, empty_reward = _floor_check(env, task_id, "empty_answer", low,
                                           lambda e, obs: _repeat(empty_answer(e, obs)))
        add(nothing)
        add(empty)
        if nothing_reward is not None and empty_reward is not None and empty_reward < nothing_reward - _EPS:
            add(CheckResult(task_id, "floor_order", "doing nothing earns no more than an empty answer",
                            f"nothing {nothing_reward:g} > empty answer {empty_reward:g}", "fail",
                            "the source's floor is below the reward of the bridge's own verdicts: an agent is "
                            "paid for saying nothing (declare the env's reward_range)"))
        add(_robust_check(env, task_id, "huge_action", f"every tool with a {_size(huge_bytes)} argument",
                          lambda e, obs: _huge_actions(e, obs, huge_bytes)))
        add(_robust_check(env, task_id, "malformed", "unknown tool, no JSON, no object, garbage",
                          _malformed_actions))
        add(_robust_check(env, task_id, "wrong_types", "every tool with arguments of the wrong types",
                          _wrong_type_actions))
    if extra_checks is None:
        add(CheckResult("*", "agreement", "same verdicts as the source's own client", "no reference client",
                        "skip", "no agreement check is known for this kind of env"))
    for extra in extra_checks or ():
        for result in extra(env, task_ids):
            add(result)
    return report


# ---- one scripted episode -------------------------------------------------------------------------

Script = Callable[["EpisodeEnv", Observation], Iterable[Action]]


@dataclass
class Played:
    """What a scripted episode came to: its last observation, steps, and what went wrong."""

    last: Observation | None = None
    steps: int = 0
    infra_steps: list[str] = field(default_factory=list)
    error: str = ""

    @property
    def ended(self) -> bool:
        return self.last is not None and self.last.done

    def got(self) -> str:
        if self.error:
            return self.error
        if not self.ended or self.last is None:
            return f"not ended after {self.steps} steps"
        outcome = self.last.outcome.value if self.last.outcome is not None else "?"
        return f"{outcome}, reward {self.last.reward:g}"


def play(env: EpisodeEnv, task_id: str, script: Script, *, max_steps: int = MAX_STEPS) -> Played:
    """Reset ``task_id`` and step the script's actions until the episode ends; an exception from
    ``reset`` or ``step`` is caught and reported (``Played.error``), never raised."""
    played = Played()
    try:
        obs = env.reset(task_id=task_id)
        played.last = obs
        actions: Iterator[Action] = iter(script(env, obs))
        while not obs.done and played.steps < max_steps:
            action = next(actions, None)
            if action is None:
                break
            obs = env.step(action)
            played.last, played.steps = obs, played.steps + 1
            if obs.done and obs.outcome is not None and obs.outcome.is_infra:
                played.infra_steps.append(f"step {played.steps}: {obs.outcome.value}: {_detail(obs)}")
    except NoOracle:
        raise
    except Exception as exc:  # a crash of our side is exactly what a check must report
        played.error = f"raised {type(exc).__name__}: {str(exc)[:200]}"
    return played


def _oracle_check(env: EpisodeEnv, task_id: str, oracle: Oracle, high: float) -> CheckResult:
    expected = f"success, reward {high:g}"

    def script(e: EpisodeEnv, _obs: Observation) -> list[Action]:
        episode = e.episode
        if episode is None:
            raise NoOracle("the env has no running episode")
        return oracle(e, episode.task)

    try:
        played = play(env, task_id, script)
    except NoOracle as why:
        _end(env)
        return CheckResult(task_id, "oracle", expected, "no oracle", "skip", str(why)[:300])
    last = played.last
    ok = (played.ended and not played.error and last is not None and last.outcome is Outcome.SUCCESS
          and math.isclose(last.reward, high, rel_tol=_EPS, abs_tol=_EPS))
    return CheckResult(task_id, "oracle", expected, played.got(), "pass" if ok else "fail",
                       "" if ok else _why(played))


def _floor_check(env: EpisodeEnv, task_id: str, name: str, low: float, script: Script
                 ) -> tuple[CheckResult, float | None]:
    """The row, and the reward the episode ended with (None: it did not end)."""
    played = play(env, task_id, script)
    last = played.last
    ok = (played.ended and not played.error and last is not None and last.outcome is not None
          and last.outcome is not Outcome.SUCCESS and not last.outcome.is_infra and last.reward <= low + _EPS)
    reward = last.reward if played.ended and not played.error and last is not None else None
    return (CheckResult(task_id, name, f"reward {low:g}, no success, no infra", played.got(),
                        "pass" if ok else "fail", "" if ok else _why(played)), reward)


def _robust_check(env: EpisodeEnv, task_id: str, name: str, what: str, script: Script) -> CheckResult:
    played = play(env, task_id, lambda e, obs: itertools.chain(script(e, obs), _repeat(empty_answer(e, obs))))
    ok = not played.error and not played.infra_steps and played.ended
    return CheckResult(task_id, name, "no infra outcome, nothing raised", played.got(), "pass" if ok else "fail",
                       what if ok else f"{what}: {_why(played)}")


def _why(played: Played) -> str:
    if played.error:
        return played.error
    if played.infra_steps:
        return "; ".join(played.infra_steps)[:300]
    if not played.ended:
        return f"the episode did not end within {played.steps} steps"
    return _detail(played.last) if played.last is not None else ""


def _detail(obs: Observation) -> str:
    return (obs.verdict.detail if obs.verdict is not None else "")[:300]


def _end(env: EpisodeEnv) -> None:
    """Abort the running episode, if any (an oracle that could not be had leaves one behind)."""
    episode = env.episode
    if episode is not None and not episode.done:
        with contextlib.suppress(Exception):  # best effort: the next reset starts afresh anyway
            env.abort(Outcome.FORMAT_ERROR, "fidelity check: no oracle")


def _size(n: int) -> str:
    return f"{n >> 20} MB" if n >= 1 << 20 and n % (1 << 20) == 0 else f"{n} B"


# ---- the actions ----------------------------------------------------------------------------------

def _repeat(action: Action) -> Iterator[Action]:
    while True:
        yield action


def empty_answer(env: EpisodeEnv, obs: Observation) -> Action:
    """The terminal tool with an empty value for each required argument (what the noop policy sends)."""
    from envhub.policies import NoopPolicy

    return Action(text=NoopPolicy().start(env, obs, seed=0).act(obs).text)


def _tools_terminal_last(env: EpisodeEnv, obs: Observation) -> list[Any]:
    terminal = env.terminal_tool
    return sorted(obs.tools, key=lambda t: t.name == terminal)


def _huge_actions(env: EpisodeEnv, obs: Observation, size: int) -> list[Action]:
    """A ``size``-byte message (our parser's limit answers it), then each tool (the terminal one
    last) called structurally -- no text limit applies -- with every string argument ``size`` bytes
    long and other required arguments empty; a tool with no string argument gets an extra one."""
    blob = ("0123456789abcdef" * (size // 16 + 1))[:size]
    actions = [Action(text=format_tool_call(env.terminal_tool, {"answer": blob}))]
    for spec in _tools_terminal_last(env, obs):
        props = spec.parameters.get("properties") or {}
        required = spec.parameters.get("required") or []
        args: dict[str, Any] = {k: blob for k, p in props.items() if isinstance(p, dict) and p.get("type") == "string"}
        for k in required:
            args.setdefault(k, _EMPTY.get(str((props.get(k) or {}).get("type"))))
        if not any(isinstance(v, str) and v for v in args.values()):
            args["padding"] = blob
        actions.append(Action(tool_calls=[ToolCall(name=spec.name, arguments=args)]))
    return actions


_EMPTY: dict[str, Any] = {"string": "", "integer": 0, "number": 0, "boolean": False, "array": [], "object": {}}
#: a value of another type than each JSON-schema type asks for (and no plausible answer)
_WRONG: dict[str, Any] = {"string": {"not": ["a", "string"]}, "integer": "not a number", "number": [],
                          "boolean": "maybe", "array": 7, "object": "not an object", "null": 1}


def _malformed_actions(env: EpisodeEnv, obs: Observation) -> list[Action]:
    """What our side must turn away (as format errors): an unknown tool, a call that is no JSON, no
    JSON object, misnamed, and garbage text."""
    call = format_tool_call(UNKNOWN_TOOL, {})
    head, tail = call.split("{", 1)[0], call.rsplit("}", 1)[1]
    return [Action(text=call),
            Action(text=f'{head}{{"name": "{env.terminal_tool}", "arguments": {{"answer": }}{tail}'),
            Action(text=f"{head}[1, 2, 3]{tail}"),
            Action(text=f'{head}{{"name": 5, "arguments": "x"}}{tail}'),
            Action(text="\x00\x01\ufffd\U0010ffff" * 64)]


def _wrong_type_actions(env: EpisodeEnv, obs: Observation) -> list[Action]:
    """Each tool (the terminal one last: it may end the episode) with arguments of the wrong JSON
    types: what reaches the source, which must answer it as the agent's error."""
    actions = []
    for spec in _tools_terminal_last(env, obs):
        props = spec.parameters.get("properties") or {}
        args = {k: _WRONG.get(str(p.get("type")) if isinstance(p, dict) else "", {"unexpected": True})
                for k, p in props.items()} or {"unexpected": {"nested": [1]}}
        actions.append(Action(text=format_tool_call(spec.name, args)))
    return actions


__all__ = ["MAX_STEPS", "CheckResult", "ExtraCheck", "FidelityReport", "NoOracle", "Oracle", "Played",
           "default_oracle", "empty_answer", "play", "reward_range", "run_fidelity"]
