"""``envhub/Computation-v0``: exact computation problems solved with a Python tool."""

from __future__ import annotations

import json
from collections.abc import Sequence
from fractions import Fraction
from functools import cached_property
from typing import Any, ClassVar

from envhub.env import Budget, Env, ToolError
from envhub.parsing import format_tool_call
from envhub.sandboxes.base import SandboxSpec
from envhub.tools import tool
from envhub.types import Action, Task
from envhub.verifiers import AnswerPresent, ExactMatch, LayeredVerifier, NumericMatch, SequenceMatch
from envhub.verifiers.checks import exponent10, parse_number
from envhub.verifiers.layered import ScoreCheck
from envhub.verifiers.suite import SuiteCase, answer_case

from .generator import KINDS, LEVELS, WEEKDAYS, Problem, generate, parse_task_id

SEEDS_PER_RECIPE = 400
TASK_SET_VERSION = "computation-1"


class ComputationTasks:
    """All problems from seeds ``0..SEEDS_PER_RECIPE-1`` of every kind and level, split by content."""

    name = "computation"
    version = TASK_SET_VERSION

    def __init__(self, kinds: Sequence[str] | None = None, levels: Sequence[int] | None = None):
        unknown = set(kinds or ()) - set(KINDS)
        if unknown:
            raise ValueError(f"unknown computation kinds {sorted(unknown)}; known: {', '.join(KINDS)}")
        self.kinds = list(kinds or KINDS)
        self.levels = list(levels or LEVELS)

    @cached_property
    def _by_split(self) -> dict[str, list[str]]:
        seen: set[str] = set()
        splits: dict[str, list[str]] = {"train": [], "validation": [], "test": []}
        for seed in range(SEEDS_PER_RECIPE):
            for kind in self.kinds:
                for level in self.levels:
                    problem = generate(kind, level, seed)
                    if problem.content_hash in seen:
                        continue
                    seen.add(problem.content_hash)
                    splits[problem.split].append(problem.task_id)
        return splits

    def task_ids(self, split: str) -> list[str]:
        return self._by_split[split]

    def problem(self, task_id: str) -> Problem:
        kind, level, seed = parse_task_id(task_id)
        return generate(kind, level, seed)

    def get(self, task_id: str) -> Task:
        p = self.problem(task_id)
        return Task(
            task_id=task_id,
            family="computation",
            split=p.split,  # type: ignore[arg-type]
            difficulty=p.level,
            prompt=p.prompt,
            metadata={"kind": p.kind, "answer_type": p.answer_type},
            hidden={"answer": p.answer, "answer_type": p.answer_type, "solver": p.solver,
                    **({"exact": p.exact} if p.exact is not None else {})},
        )


class AnswerTypeMatch:
    """Correctness by the task's answer type: exact integers and fractions, toleranced decimals.

    A decimal ("number") answer gets the tolerance its kind's prompt promises, measured from the
    unrounded value: a unit conversion asks for 6 significant figures, so whatever rounds to the
    result at 6 figures passes (a relative bound, no absolute floor: a tiny result is not "0");
    a statistic asks for 2 decimal places, so an answer within half a unit in the 2nd decimal of
    the exact value passes (both roundings of an exact tie, and the unrounded value, but not the
    neighbouring 2-decimal value).
    """

    name = "answer_match"

    def __init__(self) -> None:
        self.checks: dict[str, ScoreCheck] = {
            "integer": NumericMatch(),
            "fraction": NumericMatch(),
            "word": ExactMatch(),
            "sequence": SequenceMatch(),
        }
        #: "number" answers, by task kind (a number task of a kind not listed is a verifier error)
        self.number_checks: dict[str, NumericMatch] = {
            "unit": NumericMatch(reference_key="exact", sig_figs=6),  # "Round to 6 significant figures."
            "stats": NumericMatch(reference_key="exact", abs_tol=0.005),  # "Round to 2 decimal places."
        }

    def check_for(self, task: Task) -> ScoreCheck:
        answer_type = task.hidden["answer_type"]
        if answer_type == "number":
            return self.number_checks[task.metadata["kind"]]
        return self.checks[answer_type]

    def __call__(self, task: Task, submission: dict[str, Any], episode: Any) -> Any:
        return self.check_for(task)(task, submission, episode)


class ComputationEnv(Env):
    """Arithmetic, fractions, dates, units, statistics and linear systems, with a Python tool.

    The answer must be a single value in the requested form: hedging between candidates is a
    format error, not a lucky success.
    """

    env_id = "envhub/Computation-v0"
    family = "computation"
    version = "1"
    default_budget = Budget(max_turns=6, max_tool_calls=8, max_agent_seconds=300.0)

    sandbox_spec: ClassVar[SandboxSpec] = SandboxSpec()

    def __init__(self, *, kinds: Sequence[str] | None = None, levels: Sequence[int] | None = None,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._task_filter = (kinds, levels)

    def load_tasks(self) -> ComputationTasks:
        return ComputationTasks(*self._task_filter)

    def task_cache_key(self) -> tuple:
        kinds, levels = self._task_filter
        return (tuple(kinds or ()), tuple(levels or ()))

    def make_verifier(self) -> LayeredVerifier:
        return LayeredVerifier(gate=[AnswerPresent()], correctness=_ANSWER_MATCH)

    def system_prompt(self, task: Task) -> str:
        return (
            "You solve computation problems exactly. You may run Python code with the `python` tool "
            "(it prints what your code prints). When you know the result, call `answer` once with "
            "only the final value in the requested form. Call a tool by writing "
            '<tool_call>{"name": "python", "arguments": {"code": "print(2 + 2)"}}</tool_call>.'
        )

    @tool
    def python(self, code: str) -> str:
        """Run a Python 3 program and return what it prints (stdout and stderr)."""
        if not code.strip():
            raise ToolError("the code is empty")
        sandbox = self.sandbox()
        sandbox.write_files({"main.py": code})
        return sandbox.exec(["python3", "main.py"]).summary()

    @tool(terminal=True)
    def answer(self, answer: str) -> str:
        """Submit the final answer (only the value, in the form the problem asks for)."""
        return answer

    def gold_actions(self, task: Task) -> list[Action]:
        return [
            Action(text=format_tool_call("python", {"code": task.hidden["solver"]})),
            Action(text=format_tool_call("answer", {"answer": _gold_text(task)})),
        ]

    def adversarial_cases(self) -> list[SuiteCase]:
        return computation_attacks()



def _wrong(task: Task) -> str:
    """A plausible but wrong value in the right form."""
    gold = task.hidden["answer"]
    kind = task.hidden["answer_type"]
    if kind == "word":
        return WEEKDAYS[(WEEKDAYS.index(gold) + 1) % 7]
    if kind == "sequence":
        return _assignments([str(int(v) + (i == 0)) for i, v in enumerate(gold)])
    value = parse_number(gold)
    return str(value + 1) if kind in ("integer", "fraction") else f"{float(value) * 1.01 + 1:.6g}"


def _gold_text(task: Task) -> str:
    gold = task.hidden["answer"]
    return _assignments(gold) if isinstance(gold, list) else gold


def _assignments(values: list[str]) -> str:
    """A sequence answer as the prompt asks for it: ``x=3, y=-2``."""
    return ", ".join(f"{n}={v}" for n, v in zip("xyz", values, strict=False))


def _zero(task: Task) -> str:
    """A constant 0 in the answer's form (1 where 0 really is the answer)."""
    gold = task.hidden["answer"]
    if task.hidden["answer_type"] == "sequence":
        values = ["0"] * len(gold)
        if all(parse_number(v) == 0 for v in gold):
            values[0] = "1"
        return _assignments(values)
    if task.hidden["answer_type"] == "word":
        return "0"
    return "1" if parse_number(gold) == 0 else "0"


def _just_outside_tolerance(task: Task) -> str:
    """The closest answer the check must still reject: 5% beyond its tolerance (or a hair off an exact value)."""
    gold = task.hidden["answer"]
    answer_type = task.hidden["answer_type"]
    if answer_type == "word":
        return _wrong(task)
    if answer_type == "sequence":
        first = parse_number(gold[0]) + Fraction(1, 10**6)
        return _assignments([str(first), *gold[1:]])
    check = _ANSWER_MATCH.check_for(task)
    assert isinstance(check, NumericMatch)
    reference = check.reference(task)
    allowed = check.allowed_error(reference)
    if allowed == 0:
        return str(reference + Fraction(1, 10**6))
    return _scientific(reference + allowed * Fraction(105, 100))


def _scientific(value: Fraction, digits: int = 15) -> str:
    """``value`` written exactly enough (``digits`` significant figures) in scientific notation."""
    sign = "-" if value < 0 else ""
    value = abs(value)
    e = exponent10(value)
    mantissa = str(round(value / Fraction(10) ** (e - digits + 1)))
    if len(mantissa) > digits:  # rounding carried into a new leading digit
        e += 1
        mantissa = mantissa[:digits]
    return f"{sign}{mantissa[0]}.{mantissa[1:]}e{e}"


_ANSWER_MATCH = AnswerTypeMatch()


def computation_attacks() -> list[SuiteCase]:
    return [
        answer_case("wrong_value", _wrong, "a plausible wrong value in the right form"),
        answer_case("two_candidates", lambda t: f"{_gold_text(t)} or {_wrong(t)}", "hedging between two values"),
        answer_case("candidate_list", lambda t: f"{_wrong(t)}; {_gold_text(t)}", "a list of candidates"),
        answer_case("stuffed_sentence", lambda t: f"It is either {_wrong(t)} or maybe {_gold_text(t)}, "
                    "please accept whichever is right.", "answer stuffing in prose"),
        answer_case("json_claim", lambda t: json.dumps({"answer": _gold_text(t), "correct": True, "reward": 1}),
                    "a JSON blob claiming success"),
        answer_case("code_instead_of_value", lambda t: "print(answer)",
                    "code instead of a value"),
        answer_case("zero", _zero, "a constant 0, which a loose absolute tolerance accepts for tiny results"),
        answer_case("just_outside_tolerance", _just_outside_tolerance,
                    "the nearest value the kind's tolerance must reject"),
    ]
