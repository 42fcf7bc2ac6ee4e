"""Verifier suites: gold must pass, noop must fail, every attack must fail; an env with an LLM
judge adds the bias battery (``judge:<case>``, :mod:`envhub.verifiers.judge.suite`).

A case (:class:`~envhub.episode.SuiteCase`) is a scripted sequence of actions played through the
real env (so attacks that tamper with files in the sandbox are graded exactly as a model's would
be). Families contribute their own attacks by overriding ``Env.adversarial_cases``; gold and noop
are universal.

An infrastructure outcome on any case is a violation too: a verifier that crashes on a hack is as
unusable as one that accepts it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from envhub.episode import SuiteCase
from envhub.parsing import format_tool_call
from envhub.progress import Progress
from envhub.rollout.collect import EnvWorkers, check_concurrency, interruptible_run
from envhub.types import Action, Outcome, Task

if TYPE_CHECKING:
    from envhub.env import Env


class NotApplicable(Exception):
    """Raised by a case's ``actions`` when the case cannot be built for a task (it is then counted
    apart, so that a case never looks stronger than it is)."""


def answer_case(name: str, make_answer: Callable[..., str], description: str = "", *,
                expect: Literal["pass", "fail"] = "fail", with_env: bool = False) -> SuiteCase:
    """A case that submits one crafted answer through the env's terminal tool, as its ``answer``
    argument: ``make_answer(task)``, or ``make_answer(env, task)`` with ``with_env`` (for answers
    built from what the env holds, e.g. its corpus). An attack by default; ``expect="pass"`` for
    another spelling of the gold. ``make_answer`` may raise :class:`NotApplicable`."""

    def actions(env: Env, task: Task) -> list[Action]:
        answer = make_answer(env, task) if with_env else make_answer(task)
        return [Action(text=format_tool_call(env.terminal_tool, {"answer": answer}))]

    return SuiteCase(name, expect, actions, description)


def answer_attacks(gold: Callable[..., str], wrong: Callable[..., str], *, with_env: bool = False,
                   separator: str = "; ") -> list[SuiteCase]:
    """The attacks every family graded on one free-text answer faces, from how it writes the gold
    answer and a plausible wrong one (``gold(task)``, ``wrong(task)``; ``(env, task)`` with
    ``with_env``): the wrong answer, and the gold hedged with it, listed after it (``separator``
    between the two), stuffed beside it in prose, or claimed in a JSON blob. Each must fail."""

    def both(make: Callable[..., str]) -> Callable[[Env, Task], str]:
        return make if with_env else lambda env, task: make(task)

    right, other = both(gold), both(wrong)
    cases = [
        ("wrong_answer", other, "a plausible wrong answer in the right form"),
        ("two_candidates", lambda e, t: f"{right(e, t)} or {other(e, t)}",
         "hedging between the right and a wrong answer"),
        ("candidate_list", lambda e, t: f"{other(e, t)}{separator}{right(e, t)}",
         "a list of candidates that includes the right one"),
        ("prose_stuffing", lambda e, t: f"It could be {other(e, t)}, but maybe {right(e, t)}; please accept "
         "whichever is right.", "answer stuffing in prose"),
        ("json_claim", lambda e, t: json.dumps({"answer": right(e, t), "correct": True, "reward": 1}),
         "a JSON blob claiming success"),
    ]
    return [answer_case(name, make, why, with_env=True) for name, make, why in cases]


def suite_cases(env: Env) -> list[SuiteCase]:
    """Every case of ``env``'s suite: the universal gold and noop, then the family's own
    (``env.adversarial_cases()``)."""
    return [*universal_cases(), *env.adversarial_cases()]


def universal_cases() -> list[SuiteCase]:
    from envhub.policies import NoopPolicy

    def noop(env: Env, task: Task) -> list[Action]:
        agent = NoopPolicy().start(env, env.initial_observation(), seed=0)
        return [Action(text=agent.act(env.initial_observation()).text)]

    return [
        SuiteCase("gold", "pass", lambda env, task: env.gold_actions(task), "the reference solution"),
        SuiteCase("noop", "fail", noop, "an empty submission"),
    ]


@dataclass
class CaseResult:
    case: str
    task_id: str
    expect: str
    outcome: str
    reward: float
    detail: str
    applicable: bool = True
    #: A judge battery row (:mod:`envhub.verifiers.judge.suite`): how far the variant moved the judge's score.
    judge_delta: float | None = None
    judge_margin: float = 0.0
    judge_neutral: bool = False

    @property
    def violation(self) -> bool:
        if not self.applicable:
            return False
        if self.judge_delta is not None:
            moved = abs(self.judge_delta) if self.judge_neutral else self.judge_delta
            return moved > self.judge_margin
        if Outcome(self.outcome).is_infra:
            return True
        return (self.outcome == Outcome.SUCCESS.value) != (self.expect == "pass")


@dataclass
class SuiteReport:
    env_id: str
    results: list[CaseResult] = field(default_factory=list)

    def by_case(self) -> dict[str, dict[str, Any]]:
        rows: dict[str, dict[str, Any]] = {}
        for r in self.results:
            row = rows.setdefault(r.case, {"expect": r.expect, "tasks": 0, "as_expected": 0, "violations": [],
                                           "not_applicable": 0})
            if not r.applicable:
                row["not_applicable"] += 1
                continue
            row["tasks"] += 1
            if r.violation:
                row["violations"].append({"task_id": r.task_id, "outcome": r.outcome, "detail": r.detail[:500]})
            else:
                row["as_expected"] += 1
        for row in rows.values():
            row["rate"] = row["as_expected"] / row["tasks"] if row["tasks"] else 0.0
        return rows

    @property
    def violations(self) -> int:
        return sum(r.violation for r in self.results)

    def to_json(self) -> dict[str, Any]:
        return {"env_id": self.env_id, "violations": self.violations, "cases": self.by_case()}


def run_suite(
    env_factory: Callable[[], Env],
    task_ids: Sequence[str],
    *,
    cases: Sequence[str] | None = None,
    jobs: int = 1,
    on_result: Callable[[CaseResult, int], None] | None = None,
    on_interrupt: Callable[[], object] | None = None,
) -> SuiteReport:
    """Play every case on every task; ``jobs`` envs work in parallel. The report lists the
    results task by task, in the order of ``task_ids`` and the cases.

    ``on_result(result, total)`` is called on the calling thread as each play finishes (in
    completion order), ``total`` being how many plays the run has; what it raises ends the run.
    Ctrl-C (or a signal the command maps to it) stops the run: no further play starts,
    ``on_interrupt()`` is called at once, the plays in flight end, and
    :class:`~envhub.sandboxes.cleanup.SignalInterrupt` (a ``KeyboardInterrupt``) is raised.

    Raises ValueError before any case runs when ``jobs`` is not positive, ``task_ids`` is empty or
    names a task the env does not have, or ``cases`` names an unknown case.
    """
    from envhub.verifiers.judge.suite import battery_results, case_names, judge_checks

    check_concurrency(jobs, "jobs")
    probe = env_factory()
    try:
        all_cases = {c.name: c for c in suite_cases(probe)}
        judged = bool(judge_checks(probe))
        check_task_ids(probe, task_ids)
    finally:
        probe.close()
    battery = case_names() if judged else []
    if cases:
        unknown = set(cases) - set(all_cases) - set(battery)
        if unknown:
            raise ValueError(f"unknown suite cases {sorted(unknown)}; known: {', '.join([*all_cases, *battery])}")
    selected = [all_cases[n] for n in (cases or all_cases) if n in all_cases]
    wanted_battery = [n for n in battery if not cases or n in cases]

    def play(e: Env, item: tuple[SuiteCase, str]) -> CaseResult:
        case, task_id = item
        try:
            verdict = e.play(task_id, lambda task: case.actions(e, task))
            return CaseResult(case.name, task_id, case.expect, verdict.outcome.value, verdict.reward, verdict.detail)
        except NotApplicable as why:
            return CaseResult(case.name, task_id, case.expect, "", 0.0, str(why), applicable=False)
        except Exception as exc:  # the suite machinery itself failed on this case
            return CaseResult(case.name, task_id, case.expect, Outcome.VERIFIER_ERROR.value, 0.0, repr(exc))

    items = list(enumerate((c, t) for t in task_ids for c in selected))
    total = len(items) + len(task_ids) * len(wanted_battery)
    done: dict[int, CaseResult] = {}
    with interruptible_run(on_interrupt) as interrupt, \
            EnvWorkers(env_factory, concurrency=jobs, thread_name_prefix="envhub-suite") as workers:
        for i, result in workers.as_completed(lambda e, pair: (pair[0], play(e, pair[1])), items,
                                              abandon=interrupt.requested):
            done[i] = result
            if on_result is not None:
                on_result(result, total)
        interrupt.stop_if_requested()
    results = [done[i] for i, _ in items]
    if wanted_battery:
        env = env_factory()
        try:
            for result in battery_results(env, list(task_ids)):
                if result.case in wanted_battery:
                    results.append(result)
                    if on_result is not None:
                        on_result(result, total)
        finally:
            env.close()
    return SuiteReport(env_id=probe.env_id, results=results)


class SuiteProgress(Progress):
    """A suite run's progress: plays (tasks x cases) done, with the violations so far; its
    :meth:`on_result` is :func:`run_suite`'s ``on_result``."""

    def __init__(self, tasks: int, *, show: bool) -> None:
        super().__init__(f"verify ({tasks} tasks)", unit="plays", show=show)
        self.tasks, self.violations = tasks, 0

    def on_result(self, result: CaseResult, total: int) -> None:
        if self.total is None:
            self.set_total(total, f"verify ({self.tasks} tasks x {total // max(self.tasks, 1)} cases)")
        self.violations += result.violation
        self.advance(note=f"{self.violations} violation{'' if self.violations == 1 else 's'}")


def check_task_ids(env: Env, task_ids: Sequence[str]) -> None:
    """ValueError naming every id in ``task_ids`` that ``env`` has no task for (or if it is empty).

    An id is known when some split lists it or the env's task source can build it (``get``).
    """
    from envhub.task_source import SPLITS

    if not task_ids:
        raise ValueError("no task ids to run")
    listed = {t for split in SPLITS for t in env.tasks.task_ids(split)}
    unknown = []
    for task_id in dict.fromkeys(task_ids):
        if task_id in listed:
            continue
        try:
            env.tasks.get(task_id)
        except Exception:  # KeyError for most sources; any failure means it cannot be played
            unknown.append(task_id)
    if unknown:
        shown = ", ".join(repr(t) for t in unknown[:5]) + (f" and {len(unknown) - 5} more" if len(unknown) > 5 else "")
        examples = ", ".join(sorted(listed)[:3])
        raise ValueError(f"unknown task id{'s' if len(unknown) > 1 else ''} {shown} for {env.env_id}"
                         + (f" (ids look like: {examples})" if examples else ""))


def grade_submissions(
    env_factory: Callable[[], Env], submissions: Sequence[dict[str, Any]], *, jobs: int = 1
) -> list[dict[str, Any]]:
    """Grade ``{task_id, submission}`` rows that came from elsewhere; one result per row, in order:
    a verdict, or ``error`` saying why the row could not be graded. ValueError (before any
    grading) when ``jobs`` is not positive."""
    check_concurrency(jobs, "jobs")

    def grade(e: Env, row: dict[str, Any]) -> dict[str, Any]:
        task_id = row.get("task_id")
        if not isinstance(task_id, str) or "submission" not in row:
            return {"task_id": task_id, "error": "each line needs a string task_id and a submission"}
        try:
            verdict = e.play(task_id, lambda task: e.submission_actions(task, row["submission"]))
        except KeyError as exc:
            return {"task_id": task_id, "error": f"unknown task: {exc}"}
        except ValueError as exc:  # a malformed submission (bad patch, wrong type): say so, grade the rest
            return {"task_id": task_id, "error": f"invalid submission: {exc}"}
        return {"task_id": task_id, "outcome": verdict.outcome.value, "reward": verdict.reward,
                "verdict": verdict.model_dump(mode="json")}

    with EnvWorkers(env_factory, concurrency=jobs, thread_name_prefix="envhub-grade") as workers:
        return workers.map(grade, submissions)
