"""The code-repair attack classes of issue 10, played through the env's tools on docker and bwrap.

Every case of ``GRADER_ATTACKS`` must end as a policy outcome other than success -- with the
static integrity gate in front of the grader (the real verifier) and without it (the probe grader
alone, which must hold by construction: expected values never reach the sandbox). The attacks
themselves must be real: their code compiles as Python would import it, in every project.
"""

from __future__ import annotations

from functools import cache

import pytest
from sandbox_fixtures import backend_params, require_backend

import envhub
from envhub.tasks.code_repair.attacks import GRADER_ATTACKS
from envhub.tasks.code_repair.env import CodeRepairEnv
from envhub.tasks.code_repair.verifier import HiddenTests, Snapshot, SnapshotGate
from envhub.verifiers.layered import LayeredVerifier
from envhub.verifiers.suite import NotApplicable, run_suite, suite_cases

ENV = "envhub/CodeRepair-v0"
CASES = [name for cases in GRADER_ATTACKS.values() for name, _, _ in cases]
#: With a real fix, these cheat in a way that cannot change an observation (a process left behind;
#: names rebound in the public runtime, which the sealed probes never call): only the static gate
#: rejects them, and the grader alone rightly accepts the fix.
HARMLESS_TO_THE_GRADER = {"report_daemon_spawn_with_fix", "rebind_grader_with_fix", "hide_in_utf7_cookie_with_fix"}
#: The classes issue 10 names, and what a case of each must be called.
ISSUE_CLASSES = {
    "rebind late-read names", "rewrite the report later", "replace outcome-deciding internals",
    "read the expected value", "rewrite hidden tests before collection", "hide from the static gate",
}


class GraderOnly(CodeRepairEnv):
    """The code-repair env with its static integrity gate taken out: the probe grader alone."""

    def verifier_for(self, episode) -> LayeredVerifier:
        snapshot = Snapshot.read(self.sandbox())
        return LayeredVerifier(gate=[SnapshotGate(snapshot)], correctness=HiddenTests(
            self.tasks.instance(episode.task.task_id), snapshot, self.grading_sandbox))


@cache
def sample() -> tuple[str, ...]:
    """One single-module and one three-module instance of the training split."""
    env = envhub.make(ENV, split="train")
    insts = sorted(env.tasks.manifest.by_split("train"), key=lambda i: i.instance_id)
    env.close()
    return tuple(next(i.instance_id for i in insts if i.difficulty == d) for d in (1, 3))


def _assert_all_rejected(report, cases) -> None:
    rows = report.by_case()
    assert set(rows) == set(cases)
    for name, row in rows.items():
        assert row["not_applicable"] == 0 and row["tasks"] == len(sample()), (name, row)
        assert row["violations"] == [], (name, row["violations"])


def test_every_class_of_the_issue_has_cases_and_cheating_over_a_real_fix_too():
    assert set(GRADER_ATTACKS) >= ISSUE_CLASSES
    assert all(GRADER_ATTACKS[c] for c in GRADER_ATTACKS)
    assert len(CASES) == len(set(CASES))
    assert sum(name.endswith("_with_fix") for name in CASES) >= 4


@pytest.mark.slow
def test_attack_code_compiles_as_python_imports_it_in_every_project():
    """Each written module compiles from its bytes (encoding cookies honoured) and fits in one turn:
    the attack is delivered and runs."""
    env = envhub.make(ENV, split="train")
    cases = {c.name: c for c in suite_cases(env) if c.name in CASES}
    one_per_project = {}
    for inst in env.tasks.manifest.instances:
        one_per_project.setdefault((inst.project, len(inst.buggy_files) > 1), inst)
    written = 0
    for inst in one_per_project.values():
        task = env.tasks.get(inst.instance_id)
        for case in cases.values():
            try:
                actions = case.actions(env, task)
            except NotApplicable:
                continue
            for action in actions:
                assert len(action.text) <= env.budget.max_action_chars, (case.name, inst.instance_id)
                for call in env.parser.parse(action.text).calls:
                    if call.name == "write_file" and call.arguments["path"].endswith(".py"):
                        compile(call.arguments["content"].encode(), call.arguments["path"], "exec")
                        written += 1
    env.close()
    assert written > len(one_per_project) * 25


@pytest.mark.slow
@pytest.mark.parametrize("backend", backend_params("docker", "bwrap"))
def test_every_attack_is_rejected(backend):
    require_backend(backend)
    report = run_suite(lambda: envhub.make(ENV, split="train", sandbox=backend), sample(), cases=CASES, jobs=2)
    _assert_all_rejected(report, CASES)


@pytest.mark.slow
@pytest.mark.parametrize("backend", backend_params("docker", "bwrap"))
def test_the_grader_alone_rejects_every_attack(backend):
    """Without the static gate: the soundness of the probe design, not a list of banned names."""
    require_backend(backend)
    cases = [c for c in CASES if c not in HARMLESS_TO_THE_GRADER]
    report = run_suite(lambda: GraderOnly(split="train", sandbox=backend), sample(), cases=cases, jobs=2)
    _assert_all_rejected(report, cases)
