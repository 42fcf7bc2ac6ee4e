"""``envhub/Computation-v0``: exact computation problems solved with a Python tool."""

from __future__ import annotations

from collections.abc import Sequence
from functools import cached_property
from typing import Any, ClassVar

from envhub.budget import Budget
from envhub.env import Env
from envhub.episode import SuiteCase
from envhub.errors import ToolError
from envhub.parsing import format_tool_call
from envhub.sandboxes.base import SandboxSpec
from envhub.tasks.computation import ENV_ID
from envhub.tools import tool
from envhub.types import Action, Task
from envhub.verifiers import AnswerPresent, LayeredVerifier

from .attacks import computation_attacks
from .generator import KINDS, LEVELS, Problem, generate, parse_task_id
from .grading import ANSWER_MATCH, AnswerTypeMatch, gold_text
from .python_tool import run_python

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
                    **({"exact": p.exact} if p.exact is not None else {}),
                    **({"labels": p.labels} if p.labels is not None else {})},
        )


class ComputationEnv(Env):
    """Arithmetic, fractions, dates, units, statistics and linear systems, with a Python tool.

    The answer must be a single value in the requested form: hedging between candidates is a
    format error, not a lucky success.
    """

    env_id = ENV_ID
    family = "computation"
    version = "1"
    default_budget = Budget(max_turns=6, max_tool_calls=8, max_agent_seconds=300.0)

    #: The solvers' usual imports, loaded once by the sandbox's executor so that every forked
    #: ``python`` call starts with them (random reseeds itself in each child, as after a fork).
    sandbox_spec: ClassVar[SandboxSpec] = SandboxSpec(
        preload=("collections", "csv", "datetime", "decimal", "fractions", "io", "itertools", "math",
                 "statistics"))

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
        return LayeredVerifier(gate=[AnswerPresent()], correctness=ANSWER_MATCH)

    def system_prompt(self, task: Task) -> str:
        return (
            "You solve computation problems exactly. You may run Python code with the `python` tool "
            "(it prints what your code prints). When you know the result, call `answer` once with "
            "only the final value in the requested form. Call a tool by writing "
            f"{format_tool_call('python', {'code': 'print(2 + 2)'})}."
        )

    @tool
    def python(self, code: str) -> str:
        """Run a Python 3 program and return what it prints (stdout and stderr)."""
        if not code.strip():
            raise ToolError("the code is empty")
        return run_python(self.sandbox(), code)

    @tool(terminal=True)
    def answer(self, answer: str) -> str:
        """Submit the final answer (only the value, in the form the problem asks for)."""
        return answer

    def gold_actions(self, task: Task) -> list[Action]:
        return [
            Action(text=format_tool_call("python", {"code": task.hidden["solver"]})),
            Action(text=format_tool_call("answer", {"answer": gold_text(task)})),
        ]

    def adversarial_cases(self) -> list[SuiteCase]:
        return computation_attacks()


__all__ = ["AnswerTypeMatch", "ComputationEnv", "ComputationTasks", "computation_attacks"]
