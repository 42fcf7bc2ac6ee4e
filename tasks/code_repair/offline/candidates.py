"""Mutants to validate, the validated ones, and the code-repair instance each one becomes.

A :class:`Candidate` is a set of planted bugs applied to a project; once its test run shows the
bugs (:class:`Accepted`), :func:`build_instance` turns it into a manifest :class:`Instance`: the
buggy files, the gold patch, the fail-to-pass and pass-to-pass tests, the visible tests and the
issue text written from how the tests failed.
"""

from __future__ import annotations

import difflib
import hashlib
import itertools
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from envhub.tasks.code_repair.manifest import Instance, Mutation, instance_id

from .issue_text import choose_visible_tests, rank, render_issue, stable_rng
from .mutate import MutationResult, apply_mutations, enumerate_sites, normalized
from .operators import OPERATORS
from .runs import Project, RunResult, Verdict
from .sites import MutationError, SiteRef


@dataclass(frozen=True)
class Candidate:
    """A (possibly multi-site) mutant ready to be tested."""

    refs: tuple[SiteRef, ...]
    result: MutationResult
    key: str

    @property
    def functions(self) -> set[tuple[str, str]]:
        return {(r.file, r.function) for r in self.refs}


Evidence = dict[SiteRef, tuple[str, ...]]


@dataclass
class Accepted:
    """A validated mutant; ``evidence`` maps each planted bug to the tests that show it."""

    candidate: Candidate
    verdict: Verdict
    run: RunResult
    evidence: Evidence


def _symptom(record: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(record.get(k) for k in ("kind", "exc_type", "exc_message", "raised_in", "call", "actual"))


def combined_evidence(singles: dict[SiteRef, Accepted], run: RunResult, verdict: Verdict) -> Evidence:
    """For each bug of a combination, the failing tests that fail exactly as with that bug alone.

    A bug without such a test is masked by another (its function is never reached, say), so
    no report of the observed behaviour could mention it.
    """
    return {
        ref: tuple(t for t in verdict.fail_to_pass if t in single.verdict.fail_to_pass
                   and _symptom(run.failures.get(t, {})) == _symptom(single.run.failures.get(t, {})))
        for ref, single in singles.items()
    }


def make_candidate(project: Project, refs: Sequence[SiteRef]) -> Candidate | None:
    """Apply mutations; ``None`` if a site cannot be applied faithfully."""
    refs = tuple(sorted(refs))
    try:
        result = apply_mutations(project.read, refs)
    except MutationError:
        return None
    key = hashlib.sha256(json.dumps(sorted((f, normalized(t)) for f, t in result.files.items())).encode()).hexdigest()
    return Candidate(refs, result, key)


def ordered_sites(project: Project, seed: int) -> list[SiteRef]:
    """All sites, shuffled per operator and interleaved so every operator gets its turn."""
    rng = stable_rng("sites", seed, project.name)
    by_op: dict[str, list[SiteRef]] = {name: [] for name in OPERATORS}
    for rel in project.modules:
        for ref in enumerate_sites(project.read(rel), rel):
            by_op[ref.operator].append(ref)
    queues = []
    for name in OPERATORS:
        refs = by_op[name]
        rng.shuffle(refs)
        queues.append(refs)
    rng.shuffle(queues)
    return [ref for group in itertools.zip_longest(*queues) for ref in group if ref is not None]


def unified_diff(old: str, new: str, rel: str) -> str:
    """``git apply``-compatible diff of one file, including the no-newline marker."""
    lines = difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True),
                                 fromfile=f"a/{rel}", tofile=f"b/{rel}")
    return "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines)


def pick_issue_tests(acc: Accepted, key: str) -> list[str]:
    """One failing test per planted bug (from its evidence), preferring clearly described calls."""
    rng = stable_rng("issue-tests", key)
    chosen: list[str] = []
    for ref in acc.candidate.refs:
        pool = [t for t in acc.evidence.get(ref, ()) if t not in chosen]
        if not pool:
            continue
        ranked = sorted(pool, key=lambda t: (rank(acc.run.failures.get(t, {})), t))
        best = rank(acc.run.failures.get(ranked[0], {}))[0]
        chosen.append(rng.choice([t for t in ranked if rank(acc.run.failures.get(t, {}))[0] == best][:3]))
    return chosen


def build_instance(project: Project, split: str, acc: Accepted) -> Instance:
    files = acc.candidate.result.files
    iid = instance_id(project.name, files)
    issue_tests = pick_issue_tests(acc, iid)
    text = render_issue([acc.run.failures.get(t, {"kind": "other"}) for t in issue_tests], project=project.name,
                        rng=stable_rng("issue", iid))
    return Instance(
        instance_id=iid,
        project=project.name,
        split=split,  # type: ignore[arg-type]
        difficulty=len(acc.candidate.refs),
        mutations=[Mutation(file=r.file, function=r.function, operator=r.operator, site=r.site, description=d)
                   for r, d in zip(acc.candidate.refs, acc.candidate.result.descriptions, strict=True)],
        patch="".join(unified_diff(files[rel], project.read(rel), rel) for rel in sorted(files)),
        buggy_files=dict(sorted(files.items())),
        fail_to_pass=list(acc.verdict.fail_to_pass),
        pass_to_pass=list(acc.verdict.pass_to_pass),
        visible_tests=choose_visible_tests(iid, acc.verdict.fail_to_pass, acc.verdict.pass_to_pass, issue_tests),
        issue_text=text,
    )


def hardcode_resistant(inst: Instance) -> bool:
    """At least one failing test is neither described in the issue (one per bug) nor visible.

    Otherwise special-casing the examples the agent can see -- hard-coding the issue's call --
    could pass every hidden test without fixing anything.
    """
    return len(set(inst.fail_to_pass) - set(inst.visible_tests)) > inst.difficulty
