import json
import subprocess
import sys

import pytest

from envhub.tasks.computation.env import AnswerTypeMatch, ComputationTasks, computation_attacks
from envhub.tasks.computation.generator import KINDS, LEVELS, generate
from envhub.verifiers import AnswerPresent, LayeredVerifier


@pytest.fixture(scope="module")
def tasks():
    return ComputationTasks()


def test_at_least_six_kinds_and_three_levels():
    assert set(KINDS) >= {"bigint", "fraction", "date", "unit", "stats", "linear"}
    assert LEVELS == (1, 2, 3)


def test_generation_is_deterministic():
    for kind in KINDS:
        assert generate(kind, 2, 17) == generate(kind, 2, 17)
        assert generate(kind, 2, 17).prompt != generate(kind, 2, 18).prompt


def test_splits_are_disjoint_by_content_and_stable(tasks):
    ids = {s: tasks.task_ids(s) for s in ("train", "validation", "test")}
    assert len(ids["train"]) > 4000 and len(ids["validation"]) > 300 and len(ids["test"]) > 300
    prompts = {s: {tasks.get(t).prompt for t in v} for s, v in ids.items()}
    assert not prompts["train"] & prompts["validation"]
    assert not prompts["train"] & prompts["test"]
    assert not prompts["validation"] & prompts["test"]
    assert ComputationTasks().task_ids("test") == ids["test"]
    for split, v in ids.items():
        assert all(tasks.get(t).split == split for t in v[:200])


def test_every_kind_and_level_appears_in_every_split(tasks):
    for split in ("train", "validation", "test"):
        seen = {(tasks.get(t).metadata["kind"], tasks.get(t).difficulty) for t in tasks.task_ids(split)}
        assert seen == {(k, lv) for k in KINDS for lv in LEVELS}


def _solver_output(code: str) -> str:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30,
                          check=True).stdout.strip()


@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("level", LEVELS)
def test_gold_solver_program_agrees_with_the_answer_and_the_verifier(tasks, kind, level):
    verifier = LayeredVerifier(gate=[AnswerPresent()], correctness=AnswerTypeMatch())
    for seed in range(6):
        task = tasks.get(f"comp-{kind}-L{level}-{seed}")
        printed = _solver_output(task.hidden["solver"])
        verdict = verifier.verify(task, {"answer": printed})
        assert verdict.outcome.value == "success", (task.prompt, printed, task.hidden["answer"])


def test_attacks_are_all_rejected(tasks):
    verifier = LayeredVerifier(gate=[AnswerPresent()], correctness=AnswerTypeMatch())

    class _Env:
        terminal_tool = "answer"

    for tid in tasks.task_ids("test")[:60]:
        task = tasks.get(tid)
        for case in computation_attacks():
            [action] = case.actions(_Env(), task)
            payload = json.loads(action.text.removeprefix("<tool_call>").removesuffix("</tool_call>"))
            verdict = verifier.verify(task, payload["arguments"])
            assert verdict.outcome.value in ("wrong_answer", "format_error"), (case.name, tid, verdict)
