"""The code-repair verifier: the agent's repository as submitted, checked for tampering, then graded
by hidden tests.

It is given what it grades and nothing else -- no env to call back into:

* the :class:`~.manifest.Instance`: the bug, its fail-to-pass and pass-to-pass tests, and (through
  :func:`~.workspace.agent_files`) the repository the agent was given;
* a :data:`GradingSandbox`: each call opens a fresh sandbox no agent touched (``env.grading_sandbox``);
* the episode's :class:`Snapshot`: what the agent's tree held at submit.

Layers:

1. gate ``snapshot`` -- the agent's tree was read whole. A tree that could not be read through what
   the agent did to it (deleted, made unreadable, filled past memory) or that grew past the bounds
   of the walk is ``format_error``: the agent's outcome, never ``verifier_error``. (A sandbox that
   does not answer at all raises :class:`~envhub.errors.InfraError` while the snapshot is taken,
   which ends the episode as ``env_error`` before this verifier is made.)
2. gate ``integrity`` -- no tampering with tests, configuration or the test runner
   (:mod:`envhub.verifiers.integrity`; a finding is ``format_error`` with the reasons);
3. correctness ``hidden_tests`` -- the submitted ``src/`` and the hidden tests compiled into
   observation probes (no expected values in them) go into a fresh sandbox; every fail-to-pass and
   pass-to-pass test must observe exactly what the gold sources observed, compared here, in the
   trusted process (:mod:`envhub.verifiers.probes`). Partial credit (fraction of fail-to-pass tests
   passing while every pass-to-pass test still passes) is optional and off by default.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from envhub.sandboxes.base import Sandbox
from envhub.types import Outcome, Task
from envhub.verifiers.integrity import code_findings, file_findings, is_cache_file
from envhub.verifiers.layered import GateFailure, Graded, LayeredVerifier
from envhub.verifiers.probes.grader import plan, run_probes, wall_limit

from .manifest import Instance
from .observations import project_suite
from .workspace import agent_files

if TYPE_CHECKING:
    from envhub.episode import Episode

MAX_FILE_BYTES = 512 * 1024
#: the most one grading may take, whatever the gold's times make of its budget
GRADE_TIMEOUT_S = 120.0
#: a broken run is retried only where this much of the grading's budget is left
RETRY_MIN_S = 1.0
SOURCE_ROOT = "src"

#: Opens a grading sandbox: each call a context manager of a fresh sandbox, never one an agent
#: worked in, closed (back to its pool) when the block ends -- e.g. ``env.grading_sandbox``.
GradingSandbox = Callable[[], AbstractContextManager[Sandbox]]


@dataclass(frozen=True)
class Snapshot:
    """The agent's repository at submit, as the verifier grades it.

    ``files``: every file as text by path from the repository root (caches skipped, each cut at
    ``MAX_FILE_BYTES``, a binary file as ``"<binary>"``). ``cut``: the bounds of the walk the tree
    hit; files past them are missing from ``files``. ``unreadable``: why the tree could not be read
    at all (then ``files`` is empty), or None.
    """

    files: Mapping[str, str]
    cut: tuple[str, ...] = ()
    unreadable: str | None = None

    @classmethod
    def read(cls, sandbox: Sandbox) -> Snapshot:
        """Read the agent's tree out of its ``sandbox``. An :class:`OSError` is what the agent did
        to its own tree (deleted, made unreadable, filled past memory) and is kept in
        ``unreadable``; anything else (:class:`~envhub.errors.InfraError`: the sandbox broke) raises."""
        try:
            tree = sandbox.read_tree(".")
        except OSError as exc:
            return cls(files={}, unreadable=str(exc))
        files = {rel: data[:MAX_FILE_BYTES].decode("utf-8", "replace") if b"\0" not in data else "<binary>"
                 for rel, data in sorted(tree.items()) if not is_cache_file(rel)}
        return cls(files=files, cut=tuple(getattr(tree, "cut", ())))

    def sources(self) -> dict[str, str]:
        """The submitted files under ``src/``: what is graded."""
        return {p: t for p, t in self.files.items() if p.startswith(f"{SOURCE_ROOT}/")}


class SnapshotGate:
    """The agent's tree was read whole, else ``format_error`` (see the module docstring)."""

    name = "snapshot"

    def __init__(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot

    def __call__(self, task: Task, submission: dict[str, Any], episode: Episode | None) -> str:
        if self.snapshot.unreadable is not None:
            raise GateFailure(Outcome.FORMAT_ERROR, f"the repository could not be read: {self.snapshot.unreadable}")
        if self.snapshot.cut:  # the agent grew its tree past what is read: what it submitted cannot be known whole
            raise GateFailure(Outcome.FORMAT_ERROR,
                              "the repository is too large to grade: " + "; ".join(self.snapshot.cut[:3]))
        return f"read {len(self.snapshot.files)} files"


class IntegrityGate:
    """No file outside ``src/`` changed, none that Python or pytest runs implicitly was added, and
    the code added to ``src/`` needs no capability a bug fix never needs, else ``format_error``."""

    name = "integrity"

    def __init__(self, given: Mapping[str, str], snapshot: Snapshot) -> None:
        self.given = given
        self.snapshot = snapshot

    def __call__(self, task: Task, submission: dict[str, Any], episode: Episode | None) -> str:
        given, final = self.given, self.snapshot.files
        findings = file_findings(given, final, editable_roots=[SOURCE_ROOT])
        findings += code_findings(given, self.snapshot.sources())
        if findings:
            raise GateFailure(Outcome.FORMAT_ERROR,
                              "tampering detected: " + "; ".join(str(f) for f in findings[:10]))
        changed = sum(1 for p, t in final.items() if given.get(p) != t)
        return f"no tampering; {changed} files changed"


class HiddenTests:
    """Hidden tests as observation probes in a fresh sandbox, judged against the gold's observations.

    The whole grading runs against one budget made from the gold's measured times, which the runner
    spends as its batches run (running and CPU time: a busy machine does not spend it), inside a
    generous wall-clock ceiling (:func:`~envhub.verifiers.probes.grader.wall_limit`): a run still
    going at the ceiling is ended by the host, its unreported tests failed and not retried -- the
    submission's doing (it cannot signal the runner, so only a machine loaded past the ceiling's
    margin gets there). A run that broke
    early (the submission killed the runner or the sandbox) is retried once in another fresh sandbox
    with what is left of the budget; a second break is the submission's failure. Starting a grading
    sandbox happens before any submitted code runs and is not counted: a failure there stays
    infrastructure.
    """

    name = "hidden_tests"

    def __init__(self, instance: Instance, snapshot: Snapshot, grading_sandbox: GradingSandbox) -> None:
        self.instance = instance
        self.snapshot = snapshot
        self.grading_sandbox = grading_sandbox

    def __call__(self, task: Task, submission: dict[str, Any], episode: Episode | None) -> Graded:
        inst = self.instance
        sources = self.snapshot.sources()
        suite = project_suite(inst.project)
        run_plan = plan(suite, inst.expected_tests)[0]
        budget = min(GRADE_TIMEOUT_S, wall_limit(run_plan))
        spent = 0.0
        for attempt in (1, 2):
            with self.grading_sandbox() as sandbox:
                results = run_probes(sandbox, suite, files=sources, tests=inst.expected_tests, timeout=budget - spent)
            spent += results.duration_s
            if results.complete or results.timed_out or attempt == 2 or budget - spent < RETRY_MIN_S:
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
            "attempts": attempt, "budget_s": run_plan["budget_s"], "wall_limit_s": round(budget, 3),
            "grading_s": round(spent, 3),
        }
        if not failed:
            return Graded(1.0, True, f"all {len(inst.expected_tests)} hidden tests observed as the gold", details)
        why = (f"{len(failed)} of {len(inst.expected_tests)} hidden tests differ from the gold"
               + ("" if results.complete else
                  f"; the grading run passed its {budget:.1f}s wall ceiling (the submission stopped or starved "
                  "the probe runner): the tests it had not reported fail" if results.timed_out else
                  "; the grading run did not finish (the submission killed the runner or its sandbox)")
               + (f"; {'; '.join(results.anomalies)}" if results.anomalies else ""))
        return Graded(score, False, why, details)


class CodeRepairVerifier(LayeredVerifier):
    """The verifier of one submission: ``snapshot`` of ``instance``'s repository, graded in sandboxes
    that ``grading_sandbox`` opens. Made per episode, at submit (``CodeRepairEnv.verifier_for``);
    ``verify`` reads nothing of the episode it is handed."""

    def __init__(self, instance: Instance, grading_sandbox: GradingSandbox, snapshot: Snapshot, *,
                 partial_credit: bool = False) -> None:
        super().__init__(gate=[SnapshotGate(snapshot), IntegrityGate(agent_files(instance), snapshot)],
                         correctness=HiddenTests(instance, snapshot, grading_sandbox),
                         partial_credit=partial_credit)
