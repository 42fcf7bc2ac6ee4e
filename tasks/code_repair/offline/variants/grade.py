"""Grade the corpus with the observation probes, as the verifier grades a submission.

Each variant's whole ``src/`` goes through :func:`envhub.verifiers.probes.grader.run_probes` with
the project's recorded suite (:func:`envhub.tasks.code_repair.observations.project_suite`) and
every hidden test of the project, in a grading sandbox of the code-repair env. A variant is
accepted when every test passes; every variant is correct (the real pytest suite passes on it), so
each rejection is a false negative.

``per_project`` grades a project's variants one after another in one sandbox instead of a fresh
sandbox each: fine for our own variants (each run writes the whole ``src/`` and the probes again;
nothing of a variant outlives its run that the next could read), never for submissions.
"""

from __future__ import annotations

import contextlib
import json
import re
import time
from collections import Counter
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from envhub.sandboxes.base import Sandbox
from envhub.tasks.code_repair.observations import project_suite
from envhub.verifiers.probes.compare import approx_holds, raised_as_expected
from envhub.verifiers.probes.grader import run_probes
from envhub.verifiers.probes.record import run_on_host

from .corpus import Variant

OpenSandbox = Callable[[], contextlib.AbstractContextManager[Sandbox]]


@dataclass
class Graded:
    variant: Variant
    accepted: bool
    failed: dict[str, str] = field(default_factory=dict)  # test id -> the probes' reason
    complete: bool = True
    anomalies: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def reason(self) -> str:
        """The first failing test's reason with numbers elided, for grouping."""
        if not self.failed:
            return "accepted"
        return re.sub(r"\d+", "N", next(iter(self.failed.values())))


def grade_one(sandbox: Sandbox, variant: Variant) -> Graded:
    suite = project_suite(variant.project)
    tests = sorted(suite.tests)
    start = time.monotonic()
    run = run_probes(sandbox, suite, files=variant.sources(), tests=tests)
    failed = {t: run.verdicts[t].reason if t in run.verdicts else "not judged" for t in tests
              if t not in set(run.passed(tests))}
    return Graded(variant, not failed, failed, run.complete, run.anomalies, time.monotonic() - start)


def grade(variants: Iterable[Variant], open_sandbox: OpenSandbox, *, jobs: int = 2,
          per_project: bool = False) -> list[Graded]:
    """Grade every variant (in parallel, ``jobs`` sandboxes at a time); results in input order."""
    variants = list(variants)
    if not per_project:
        def one(variant: Variant) -> Graded:
            with open_sandbox() as sandbox:
                return grade_one(sandbox, variant)

        with ThreadPoolExecutor(max_workers=jobs) as pool:
            return list(pool.map(one, variants))
    groups: dict[str, list[Variant]] = {}
    for v in variants:
        groups.setdefault(v.project, []).append(v)

    def project(group: list[Variant]) -> list[Graded]:
        with open_sandbox() as sandbox:
            return [grade_one(sandbox, v) for v in group]

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        graded = {g.variant.id: g for gs in pool.map(project, groups.values()) for g in gs}
    return [graded[v.id] for v in variants]


def explain(result: Graded) -> str:
    """Where the first failing test's observations leave the gold's: the site, what the gold's
    record expects there and what the variant observed (on the host: our own code). A
    ``pytest.raises`` or ``pytest.approx`` site the variant satisfies is passed over; other rules the
    trusted side applies (``in``) are not, so this names the first *differing* site."""
    if not result.failed:
        return ""
    test = next(iter(result.failed))
    suite = project_suite(result.variant.project)
    got = run_on_host(suite, result.variant.sources(), [test])[test]
    for want_segment, got_segment in zip(suite.expected[test], got, strict=False):
        want_obs, got_obs = want_segment.get("observations") or [], got_segment.get("observations") or []
        for want, seen in zip(want_obs, got_obs, strict=False):
            if want != seen and not (_is_raises(want[1]) and raised_as_expected(seen[1], want[1])) \
                    and not (_is_approx(want[1]) and approx_holds(seen[1], want[1])):
                return f"{test} site {want[0]}: gold {_short(want[1])} / variant {_short(seen[1])}"
        if len(want_obs) != len(got_obs) or want_segment.get("status") != got_segment.get("status"):
            return f"{test}: gold {len(want_obs)} observations, variant {len(got_obs)} ({got_segment.get('status')})"
    return f"{test}: {result.failed[test]}"


def _is_raises(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and value[0] == "raises"


def _is_approx(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and value[0] == "approx"


def _short(value: Any, limit: int = 160) -> str:
    text = json.dumps(value, separators=(",", ":"))
    return text if len(text) <= limit else text[:limit] + "..."


def summarize(results: list[Graded]) -> dict[str, Any]:
    """Counts by rule and project, the rejected variants and their reasons grouped."""
    by_rule: dict[str, list[int]] = {}
    by_project: dict[str, list[int]] = {}
    for r in results:
        for table, key in ((by_rule, r.variant.rule), (by_project, r.variant.project)):
            row = table.setdefault(key, [0, 0])
            row[0] += 1
            row[1] += not r.accepted
    rejected = [r for r in results if not r.accepted]
    return {
        "total": len(results), "rejected": len(rejected),
        "false_negative_rate": len(rejected) / len(results) if results else 0.0,
        "by_rule": {k: {"variants": v[0], "rejected": v[1]} for k, v in sorted(by_rule.items())},
        "by_project": {k: {"variants": v[0], "rejected": v[1]} for k, v in sorted(by_project.items())},
        "reasons": dict(Counter(f"{r.variant.rule}: {r.reason()}" for r in rejected).most_common()),
        "rejected_variants": [{"id": r.variant.id, "where": r.variant.where, "base": r.variant.base,
                               "failed_tests": len(r.failed), "first": next(iter(r.failed.items()))}
                              for r in rejected],
        "seconds": sum(r.seconds for r in results),
    }
