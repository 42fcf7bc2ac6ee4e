"""Build the differential corpus: apply every rule to every project, keep the correct variants.

A candidate is kept when

1. **the project's real pytest suite passes on it** -- every test the gold passes, on a fresh
   temporary copy of the project, run exactly as the manifest build runs tests
   (:func:`envhub.tasks.code_repair.offline.runs.run_tests`); and
2. **it differs from the gold in at least one observed value**: the probes are run on it and on
   the gold on the host (``record.run_on_host``, trusted code only: the gold and our own rewrites),
   and some hidden test's raw observations (status and the encoded values of every site, in
   order; at a ``pytest.raises`` site the raised classes and text) are not the gold's. This is a
   property of the variant, not of the grader's verdict: a variant that only renames a local
   is dropped, a subclass of the raised exception is kept whether or not the grader accepts it.

Form rules (:mod:`.refactors`, :mod:`.helpers`) change no observed value alone, so they are
applied to the project's *base* variant -- its first kept ``exception_subclass`` variant (else the
first kept variant of the other observable rules, in rule order) -- and the stacked variant is
judged by the same two conditions. Candidates are tried in the order the rules yield them; a rule
keeps at most ``--cap`` variants per project (``--form-cap`` for form rules) and tries at most
``--tries`` candidates; a project still short of ``MIN_PER_PROJECT`` variants then takes up to
``top_up`` of each rule, in rule order, until it has enough. Projects are built in parallel; within a project everything is
sequential, so the corpus is the same for any ``--jobs``.
"""

from __future__ import annotations

import difflib
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envhub.tasks.code_repair.manifest import PROJECTS_DIR, project_fingerprint, save_checked_json
from envhub.tasks.code_repair.observations import project_suite
from envhub.tasks.code_repair.offline.runs import Project, Runner, discover_projects, run_tests
from envhub.tasks.code_repair.workspace import project_sources, project_tests
from envhub.verifiers.probes.record import RecordError, run_on_host

from .corpus import MIN_PER_PROJECT, Corpus, Variant
from .rules import Rule, Sources, rules


@dataclass(frozen=True)
class Limits:
    cap: int = 3  # kept variants per (project, observable rule)
    form_cap: int = 2  # kept variants per (project, form rule)
    tries: int = 12  # candidates tried per (project, rule)
    top_up: int = 6  # kept per (project, rule) while the project is short of MIN_PER_PROJECT
    timeout: float = 60.0  # one pytest run


def unified_diff(gold: dict[str, str], files: dict[str, str]) -> str:
    out: list[str] = []
    for path in sorted(files):
        if files[path] != gold.get(path):
            out += difflib.unified_diff(gold[path].splitlines(keepends=True), files[path].splitlines(keepends=True),
                                        fromfile=f"a/{path}", tofile=f"b/{path}")
    return "".join(out)


def observed_difference(gold: dict[str, list[dict[str, Any]]], got: dict[str, list[dict[str, Any]]]) -> list[str]:
    """Hidden tests whose raw observations (per segment: status and observation list) differ."""
    def key(segments: list[dict[str, Any]]) -> list[tuple[Any, Any]]:
        return [(s.get("status"), s.get("observations")) for s in segments]

    return sorted(t for t in gold if key(gold[t]) != key(got.get(t, [])))


class ProjectBuild:
    """One project's candidates, judged one at a time against its gold."""

    def __init__(self, project: Project, runner: Runner, limits: Limits) -> None:
        self.project, self.runner, self.limits = project, runner, limits
        self.name = project.name
        self.gold = dict(project_sources(self.name))
        self.tests = dict(project_tests(self.name))
        self.suite = project_suite(self.name)
        self.ids = sorted(self.suite.tests)
        baseline = run_tests(project, {}, timeout=limits.timeout, runner=runner)
        self.baseline = baseline.passed()
        if baseline.collection_errors or not self.baseline or self.baseline != set(baseline.outcomes):
            raise RuntimeError(f"{self.name}: the gold does not pass its own tests")
        self.gold_observed = run_on_host(self.suite, self.gold, self.ids)
        self.kept: list[Variant] = []
        self.seen: set[tuple[tuple[str, str], ...]] = set()
        self.stats: dict[str, dict[str, int]] = {}

    def judge(self, files: dict[str, str]) -> tuple[str, list[str]]:
        """``kept`` with the tests whose observations differ, or why the candidate was dropped."""
        full = {**self.gold, **files}
        run = run_tests(self.project, full, timeout=self.limits.timeout, runner=self.runner)
        if run.timed_out or run.collection_errors or not self.baseline <= run.passed():
            return "tests_fail", []
        try:
            observed = run_on_host(self.suite, full, self.ids, timeout=120.0)
        except (RecordError, OSError) as exc:
            return f"probe_error: {exc}"[:80], []
        differ = observed_difference(self.gold_observed, observed)
        return ("kept", differ) if differ else ("unobserved", [])

    def apply(self, rule: Rule, base: Variant | None, cap: int, until: int | None = None) -> None:
        """Try ``rule``'s candidates (those not tried before) until it has ``cap`` kept variants, its
        tries are spent, or (topping up) the project has ``until`` variants."""
        start = {**self.gold, **(base.files() if base else {})}
        counts = self.stats.setdefault(rule.name, {})
        kept = sum(v.rule == rule.name for v in self.kept)
        for candidate in rule.generate(Sources(start, self.tests)):
            if kept >= cap or counts.get("tried", 0) >= self.limits.tries or (until and len(self.kept) >= until):
                break
            full = {**start, **candidate.files}
            changed = {p: t for p, t in full.items() if t != self.gold.get(p)}
            key = tuple(sorted(changed.items()))
            if key in self.seen:
                continue
            self.seen.add(key)
            counts["tried"] = counts.get("tried", 0) + 1
            status, differ = self.judge(changed)
            counts[status] = counts.get(status, 0) + 1
            if status != "kept":
                continue
            kept += 1
            variant = Variant(f"{self.name}/{rule.name}/{kept}", self.name, rule.name, candidate.where,
                              unified_diff(self.gold, changed), differ[:5], base.id if base else None)
            if variant.files() != changed:
                raise RuntimeError(f"{variant.id}: the stored diff does not give back the variant")
            self.kept.append(variant)

    def base(self) -> Variant | None:
        order = ["exception_subclass", *(r.name for r in rules() if r.observable)]
        for name in order:
            for variant in self.kept:
                if variant.rule == name:
                    return variant
        return None

    def run(self) -> tuple[list[Variant], dict[str, dict[str, int]]]:
        limits = self.limits
        for rule in rules():
            self.apply(rule, None if rule.observable else self.base(), limits.cap if rule.observable else limits.form_cap)
        for rule in rules():  # a project short of the minimum: more of each rule, in the same order
            if len(self.kept) >= MIN_PER_PROJECT:
                break
            self.apply(rule, None if rule.observable else self.base(), limits.top_up, until=MIN_PER_PROJECT)
        return self.kept, self.stats


def build(names: Sequence[str] | None = None, jobs: int = 2, limits: Limits | None = None,
          log: Any = sys.stderr) -> Corpus:
    projects = discover_projects(PROJECTS_DIR, names)
    limits = limits or Limits()

    with Runner(fork=True, size=jobs) as runner:
        def one(project: Project) -> tuple[str, list[Variant], dict[str, dict[str, int]]]:
            start = time.monotonic()
            kept, stats = ProjectBuild(project, runner, limits).run()
            print(f"{project.name}: {len(kept)} variants ({time.monotonic() - start:.0f} s)", file=log, flush=True)
            return project.name, kept, stats

        with ThreadPoolExecutor(max_workers=jobs) as pool:
            done = list(pool.map(one, projects))
    return Corpus([v for _, kept, _ in done for v in kept],
                  {p.name: project_fingerprint(p.root) for p in projects},
                  {r.name: {"description": r.description, "observable": r.observable} for r in rules()},
                  {name: stats for name, _, stats in done})


def save(corpus: Corpus, path: Path) -> str:
    return save_checked_json(path, "variants", corpus.payload())
