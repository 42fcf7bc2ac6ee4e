"""The code-repair verifier: snapshot the agent's repository, check its integrity, run hidden tests.

Layers (DESIGN.md):

1. gate ``snapshot`` -- the agent's sandbox answers and its files can be read (else ``env_error``);
2. gate ``integrity`` -- no tampering with tests, configuration or the test runner
   (:mod:`envhub.verifiers.integrity`; a finding is ``format_error`` with the reasons);
3. correctness ``hidden_tests`` -- the submitted ``src/`` and the *original* tests go into a fresh
   sandbox; every fail-to-pass and pass-to-pass test must be reported passed by our own report
   plugin (:mod:`envhub.verifiers.pytest_grader`). Partial credit (fraction of fail-to-pass tests
   passing while every pass-to-pass test still passes) is optional and off by default.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from envhub.sandboxes.base import Sandbox
from envhub.types import Outcome, Task
from envhub.verifiers.integrity import code_findings, file_findings, is_ignored
from envhub.verifiers.layered import GateFailure, Graded, LayeredVerifier
from envhub.verifiers.pytest_grader import run_hidden_tests

from .workspace import project_tests

if TYPE_CHECKING:
    from envhub.env import Episode

    from .env import CodeRepairEnv

MAX_FILE_BYTES = 512 * 1024
SOURCE_ROOT = "src"


def snapshot(sandbox: Sandbox) -> dict[str, str]:
    """Every file of the agent's repository as text (caches skipped; binary files shown as such)."""
    read_tree = getattr(sandbox, "read_tree", None)
    if read_tree is not None:  # one round trip for the whole repository
        raw = read_tree(".")
    else:
        raw = {rel: sandbox.read_file(rel) for rel in sandbox.list_files(".")}
    return {rel: data[:MAX_FILE_BYTES].decode("utf-8", "replace") if b"\0" not in data else "<binary>"
            for rel, data in sorted(raw.items()) if not is_ignored(rel)}


class SnapshotGate:
    name = "snapshot"

    def __init__(self, env: CodeRepairEnv):
        self.env = env

    def __call__(self, task: Task, submission: dict[str, Any], episode: Episode | None) -> str:
        assert episode is not None
        episode.scratch["final"] = snapshot(self.env.sandbox())
        return f"read {len(episode.scratch['final'])} files"


class IntegrityGate:
    name = "integrity"

    def __call__(self, task: Task, submission: dict[str, Any], episode: Episode | None) -> str:
        assert episode is not None
        given, final = episode.scratch["given"], episode.scratch["final"]
        findings = file_findings(given, final, editable_roots=[SOURCE_ROOT])
        findings += code_findings(given, {p: t for p, t in final.items() if p.startswith(f"{SOURCE_ROOT}/")})
        if findings:
            raise GateFailure(Outcome.FORMAT_ERROR,
                              "tampering detected: " + "; ".join(str(f) for f in findings[:10]))
        changed = sum(1 for p, t in final.items() if given.get(p) != t)
        return f"no tampering; {changed} files changed"


class HiddenTests:
    name = "hidden_tests"

    def __init__(self, env: CodeRepairEnv):
        self.env = env

    def __call__(self, task: Task, submission: dict[str, Any], episode: Episode | None) -> Graded:
        assert episode is not None
        inst = self.env.tasks.instance(task.task_id)
        sources = {p: t for p, t in episode.scratch["final"].items() if p.startswith(f"{SOURCE_ROOT}/")}
        with self.env.grading_sandbox() as sandbox:
            results = run_hidden_tests(sandbox, files=sources, tests=project_tests(inst.project),
                                       expected=inst.expected_tests, timeout=120.0)
        if results.tampered:
            raise GateFailure(Outcome.FORMAT_ERROR, "tampering detected while the tests ran: "
                              + "; ".join(results.tampered[:5]))
        f2p_passed = len(results.passed(inst.fail_to_pass))
        p2p_ok = len(results.passed(inst.pass_to_pass)) == len(inst.pass_to_pass)
        score = f2p_passed / len(inst.fail_to_pass) if p2p_ok else 0.0
        details = {
            "fail_to_pass_passed": f2p_passed, "fail_to_pass": len(inst.fail_to_pass),
            "pass_to_pass_passed": len(results.passed(inst.pass_to_pass)), "pass_to_pass": len(inst.pass_to_pass),
            "missing": results.missing[:20], "failed": results.failed[:20],
            "collection_errors": results.collection_errors[:5], "report_written": results.report_written,
            "timed_out": results.timed_out,
        }
        if results.all_passed:
            return Graded(1.0, True, f"all {len(inst.expected_tests)} hidden tests passed", details)
        why = ("the test run timed out" if results.timed_out else
               "no test report (the run exited early)" if not results.report_written else
               f"{len(results.failed)} failed, {len(results.missing)} missing of {len(inst.expected_tests)}")
        return Graded(score, False, why, details)


class CodeRepairVerifier(LayeredVerifier):
    def __init__(self, env: CodeRepairEnv, *, partial_credit: bool = False):
        super().__init__(gate=[SnapshotGate(env), IntegrityGate()], correctness=HiddenTests(env),
                         partial_credit=partial_credit)
