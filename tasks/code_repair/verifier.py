"""The code-repair verifier: snapshot the agent's repository, check its integrity, run hidden tests.

Layers (DESIGN.md):

1. gate ``snapshot`` -- the agent's sandbox answers and its files can be read (else ``env_error``);
2. gate ``integrity`` -- no tampering with tests, configuration or the test runner
   (:mod:`envhub.verifiers.integrity`; a finding is ``format_error`` with the reasons);
3. correctness ``hidden_tests`` -- the submitted ``src/`` and the hidden tests compiled into
   observation probes (no expected values in them) go into a fresh sandbox; every fail-to-pass and
   pass-to-pass test must observe exactly what the gold sources observed, compared here, in the
   trusted process (:mod:`envhub.verifiers.probes`). Partial credit (fraction of fail-to-pass tests
   passing while every pass-to-pass test still passes) is optional and off by default.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from envhub.sandboxes.base import Sandbox
from envhub.types import Outcome, Task
from envhub.verifiers.integrity import code_findings, file_findings, is_ignored
from envhub.verifiers.layered import GateFailure, Graded, LayeredVerifier
from envhub.verifiers.probes.grader import run_probes

from .observations import project_suite

if TYPE_CHECKING:
    from envhub.env import Episode

    from .env import CodeRepairEnv

MAX_FILE_BYTES = 512 * 1024
GRADE_TIMEOUT_S = 120.0
SOURCE_ROOT = "src"


def snapshot(sandbox: Sandbox) -> tuple[dict[str, str], list[str]]:
    """Every file of the agent's repository as text (caches skipped; binary files shown as such),
    and the bounds of the walk the agent's tree hit (then files are missing from it)."""
    tree = sandbox.read_tree(".")
    files = {rel: data[:MAX_FILE_BYTES].decode("utf-8", "replace") if b"\0" not in data else "<binary>"
             for rel, data in sorted(tree.items()) if not is_ignored(rel)}
    return files, list(getattr(tree, "cut", []))


class SnapshotGate:
    name = "snapshot"

    def __init__(self, env: CodeRepairEnv):
        self.env = env

    def __call__(self, task: Task, submission: dict[str, Any], episode: Episode | None) -> str:
        assert episode is not None
        try:
            episode.scratch["final"], cut = snapshot(self.env.sandbox())
        except OSError as exc:  # the agent's own tree: deleted, made unreadable, or filled past memory
            raise GateFailure(Outcome.FORMAT_ERROR, f"the repository could not be read: {exc}") from None
        if cut:  # the agent grew its tree past what is read: what it submitted cannot be known whole
            raise GateFailure(Outcome.FORMAT_ERROR, "the repository is too large to grade: " + "; ".join(cut[:3]))
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
    """Hidden tests as observation probes in a fresh sandbox, judged against the gold's observations.

    A grading run that breaks (the submission killed the runner or the sandbox) is retried once in
    another fresh sandbox; a second break is the submission's failure. Starting a grading sandbox
    happens before any submitted code runs, so a failure there stays infrastructure.
    """

    name = "hidden_tests"

    def __init__(self, env: CodeRepairEnv):
        self.env = env

    def __call__(self, task: Task, submission: dict[str, Any], episode: Episode | None) -> Graded:
        assert episode is not None
        inst = self.env.tasks.instance(task.task_id)
        sources = {p: t for p, t in episode.scratch["final"].items() if p.startswith(f"{SOURCE_ROOT}/")}
        suite = project_suite(inst.project)
        for attempt in (1, 2):
            with self.env.grading_sandbox() as sandbox:
                results = run_probes(sandbox, suite, files=sources, tests=inst.expected_tests, timeout=GRADE_TIMEOUT_S)
            if results.complete or attempt == 2:
                break
        f2p_passed = len(results.passed(inst.fail_to_pass))
        p2p_passed = len(results.passed(inst.pass_to_pass))
        p2p_ok = p2p_passed == len(inst.pass_to_pass)
        score = f2p_passed / len(inst.fail_to_pass) if p2p_ok else 0.0
        failed = [t for t in inst.expected_tests if t not in results.passed(inst.expected_tests)]
        details = {
            "fail_to_pass_passed": f2p_passed, "fail_to_pass": len(inst.fail_to_pass),
            "pass_to_pass_passed": p2p_passed, "pass_to_pass": len(inst.pass_to_pass),
            "failed": {t: getattr(results.verdicts.get(t), "reason", "not judged") for t in failed[:20]},
            "complete": results.complete, "timed_out": results.timed_out, "anomalies": results.anomalies,
            "attempts": attempt,
        }
        if not failed:
            return Graded(1.0, True, f"all {len(inst.expected_tests)} hidden tests observed as the gold", details)
        why = (f"{len(failed)} of {len(inst.expected_tests)} hidden tests differ from the gold"
               + ("" if results.complete else "; the grading run did not finish (timed out or killed)")
               + (f"; {'; '.join(results.anomalies)}" if results.anomalies else ""))
        return Graded(score, False, why, details)


class CodeRepairVerifier(LayeredVerifier):
    def __init__(self, env: CodeRepairEnv, *, partial_credit: bool = False):
        super().__init__(gate=[SnapshotGate(env), IntegrityGate()], correctness=HiddenTests(env),
                         partial_credit=partial_credit)
