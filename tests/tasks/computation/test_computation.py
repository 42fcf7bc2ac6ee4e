import itertools
import json
import subprocess
import sys

import pytest

from envhub.tasks.computation.env import AnswerTypeMatch, ComputationTasks, computation_attacks
from envhub.tasks.computation.generator import KINDS, LEVELS, generate
from envhub.types import Task
from envhub.verifiers import AnswerPresent, LayeredVerifier
from envhub.verifiers.suite import NotApplicable


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


def _verify(task, answer):
    return LayeredVerifier(gate=[AnswerPresent()], correctness=AnswerTypeMatch()).verify(task, {"answer": answer})


def test_every_suite_case_behaves_as_it_expects_on_every_kind(tasks):
    class _Env:
        terminal_tool = "answer"

    linear = [t for t in tasks.task_ids("test") if t.startswith("comp-linear")][:40]
    ids = list(dict.fromkeys(tasks.task_ids("test")[:60] + linear))
    applied: dict[str, int] = {}
    for tid in ids:
        task = tasks.get(tid)
        for case in computation_attacks():
            try:
                [action] = case.actions(_Env(), task)
            except NotApplicable:
                continue
            applied[case.name] = applied.get(case.name, 0) + 1
            payload = json.loads(action.text.removeprefix("<tool_call>").removesuffix("</tool_call>"))
            verdict = _verify(task, payload["arguments"]["answer"])
            expected = ("success",) if case.expect == "pass" else ("wrong_answer", "format_error")
            assert verdict.outcome.value in expected, (case.name, tid, payload["arguments"], verdict)
    assert set(applied) == {c.name for c in computation_attacks()}  # every case really ran somewhere
    n_linear = sum(t.startswith("comp-linear") for t in ids)
    assert applied["gold_unlabelled"] == applied["duplicated_label"] == n_linear >= 40
    assert applied["labels_reversed"] >= 0.8 * n_linear  # not applicable only where x == y (== z)


def _system(values, labels=("x", "y")):
    return Task(task_id="comp-linear-L1-0", family="computation", split="test", prompt="?",
                metadata={"kind": "linear", "answer_type": "sequence"},
                hidden={"answer": list(values), "answer_type": "sequence", "labels": list(labels)})


@pytest.mark.parametrize("answer, outcome", [
    ("x=-4, y=6", "success"),
    ("y=6, x=-4", "success"),  # labels in another order: compared by label
    ("-4, 6", "success"),  # unlabelled: in the order the prompt asks for (x, y)
    ("x = -4 ; y = 6.", "success"),
    ("`x=-4, y=6`", "success"),
    ("x='-4', y=\"6\"", "success"),
    ("x=-4., y=6.", "success"),
    ("y=-4, x=6", "wrong_answer"),  # values in gold order, labels swapped: was accepted by position
    ("x=6, y=-4", "wrong_answer"),
    ("6, -4", "wrong_answer"),
    ("x=-4, x=6", "wrong_answer"),  # duplicated label
    ("a=-4, b=6", "wrong_answer"),  # unknown labels
    ("x=-4, 6", "wrong_answer"),  # one value unlabelled
    ("x=-4", "wrong_answer"),  # missing label
    ("x=-4, y=6, z=0", "wrong_answer"),  # extra label
    ("x=-4, y=6, x=-4", "wrong_answer"),
    ("X=-4, Y=6", "wrong_answer"),  # the prompt's labels are lower case
    ("-4", "format_error"),
    ("-4, 6, 0", "format_error"),
    ("x=-4 or 5, y=6", "format_error"),
    ("x is -4, y is 6", "format_error"),
])
def test_systems_are_compared_by_label(answer, outcome):
    assert _verify(_system(["-4", "6"]), answer).outcome.value == outcome


def test_every_labelling_of_every_generated_system_is_graded_by_label(tasks):
    ids = [t for t in tasks.task_ids("train") if t.startswith("comp-linear")][:150]
    assert any(t.startswith("comp-linear-L3") for t in ids)
    for tid in ids:
        task = tasks.get(tid)
        labels, gold = task.hidden["labels"], task.hidden["answer"]
        assert task.prompt.endswith(f"Answer as {', '.join(f'{v}=<value>' for v in labels)}.")
        for order in itertools.permutations(range(len(gold))):
            written = ", ".join(f"{labels[i]}={gold[i]}" for i in order)
            assert _verify(task, written).outcome.value == "success", (tid, written)
            # the same values in that order, labelled in the prompt's order: right only if unchanged
            relabelled = ", ".join(f"{lb}={gold[i]}" for lb, i in zip(labels, order, strict=True))
            right = [gold[i] for i in order] == gold
            assert (_verify(task, relabelled).outcome.value == "success") is right, (tid, relabelled)


@pytest.mark.parametrize("answer, outcome", [
    ("42", "success"), ("42.", "success"), ("'42'", "success"), ("`42`", "success"), ('"42"', "success"),
    ("`42`.", "success"), ("x = 42.", "success"), ("\u201c42\u201d", "success"), (" 42. ", "success"),
    ("43.", "wrong_answer"), ("'43'", "wrong_answer"),
    ("'42' or '43'", "format_error"), ("`42` `43`", "format_error"), ("'42", "format_error"),
    ("42.0.0", "format_error"), ("four", "format_error"),
])
def test_a_number_may_end_a_sentence_or_be_quoted(answer, outcome):
    task = Task(task_id="comp-bigint-L1-0", family="computation", split="test", prompt="?",
                metadata={"kind": "bigint", "answer_type": "integer"},
                hidden={"answer": "42", "answer_type": "integer"})
    assert _verify(task, answer).outcome.value == outcome


def test_quotes_and_full_stops_keep_each_kinds_tolerance(tasks):
    for tid in [t for t in tasks.task_ids("test") if t.startswith(("comp-unit", "comp-stats"))][:40]:
        task = tasks.get(tid)
        gold = task.hidden["answer"]
        for spelling in (f"{gold}.", f"'{gold}'", f"`{gold}`", f'"{gold}"'):
            assert _verify(task, spelling).outcome.value == "success", (tid, spelling)
