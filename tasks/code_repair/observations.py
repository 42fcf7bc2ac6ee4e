"""The expected side of code-repair grading: each project's probes and its gold observations.

``data/observations.json.gz`` holds, per project, the map from hidden-test ids to probe calls and
what the gold sources observe there, with the fingerprint of the probes, runtime and runner it
was recorded against. It lives in the envhub package and is never written into a sandbox (the
bwrap backend masks the installed package; the docker image never contains it). A stale file is
refused, not graded against: rerun

    python -m envhub.tasks.code_repair.observations

after changing a project's tests or sources, the compiler, the runtime or the runner.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache
from pathlib import Path

from envhub.verifiers.probes.compiler import ProbeCompileError
from envhub.verifiers.probes.equality import eq_fields
from envhub.verifiers.probes.grader import ProbeSuite, ProbeTest
from envhub.verifiers.probes.record import attach_views, judge_on_host, record_project

from .manifest import PACKAGE_DIR, PROJECTS_DIR, Instance, load_checked_json, save_checked_json
from .workspace import project_sources, project_tests

OBSERVATIONS = PACKAGE_DIR / "data" / "observations.json.gz"
OBSERVATIONS_VERSION = 1


class StaleObservations(RuntimeError):
    """The recorded observations do not belong to the probes that would run now."""


@lru_cache(maxsize=1)
def _stored(path: Path = OBSERVATIONS) -> dict:
    payload = load_checked_json(path, "observations")
    if payload.get("version") != OBSERVATIONS_VERSION:
        raise ValueError(f"{path}: observations version {payload.get('version')} != {OBSERVATIONS_VERSION}")
    return payload["projects"]


@lru_cache(maxsize=64)
def project_suite(project: str) -> ProbeSuite:
    """The compiled probes of ``project`` with its recorded gold observations (checked fresh)."""
    stored = _stored().get(project)
    if stored is None:
        raise StaleObservations(f"no observations recorded for project {project!r}; run "
                                "`python -m envhub.tasks.code_repair.observations`")
    layout = {t: ProbeTest(**spec) for t, spec in stored["tests"].items()}
    suite = ProbeSuite.compile(project_tests(project), layout, stored["expected"], stored.get("unsegmented"),
                               stored.get("batches"))
    suite.gold_s = dict(stored.get("gold_s", {}))  # measured, not fingerprinted: deadlines only
    attach_views(suite, eq_fields(project_sources(project)))
    if suite.fingerprint() != stored["fingerprint"]:
        raise StaleObservations(f"the observations of {project!r} were recorded for other probes; rerun "
                                "`python -m envhub.tasks.code_repair.observations`")
    return suite


def record(projects: Sequence[str], jobs: int = 2) -> dict[str, dict]:
    """Record every project's suite from its gold sources (build time; runs the gold on the host)."""
    def one(name: str) -> tuple[str, dict]:
        suite = record_project(PROJECTS_DIR / name, project_sources(name), project_tests(name))
        leaks = [f"{path}: {leak}" for path, probe in sorted(suite.probes.items()) for leak in probe.leaks]
        if leaks:  # a probe that holds what its test expected hands it to the submission
            raise ProbeCompileError(f"{name}: expected values left in probes: {'; '.join(leaks)}")
        return name, {"fingerprint": suite.fingerprint(), "unsegmented": suite.unsegmented, "batches": suite.batches,
                      "tests": {t: dataclasses.asdict(spec) for t, spec in sorted(suite.tests.items())},
                      "expected": suite.expected, "gold_s": suite.gold_s}

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        return dict(pool.map(one, projects))


def undetected(inst: Instance) -> tuple[list[str], bool]:
    """How the planted bugs of ``inst`` grade under the probes: the fail-to-pass tests that the buggy
    code nevertheless passes, and whether some test it fails is hidden from the agent (neither
    visible nor named in the issue) -- the hard-coding resistance the manifest promises."""
    suite = project_suite(inst.project)
    buggy = {**project_sources(inst.project), **inst.buggy_files}
    passed = set(judge_on_host(suite, buggy, inst.expected_tests).passed(inst.expected_tests))
    failing = [t for t in inst.expected_tests if t not in passed]
    shown = set(inst.visible_tests) | {t for t in failing if t.split("::")[-1].split("[")[0] in inst.issue_text}
    return [t for t in inst.fail_to_pass if t in passed], any(t not in shown for t in failing)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--projects", nargs="*", help="only these projects (the others keep their records)")
    parser.add_argument("--out", type=Path, default=OBSERVATIONS)
    args = parser.parse_args(argv)
    names = sorted(p.name for p in PROJECTS_DIR.iterdir() if (p / "project.json").exists())
    chosen = args.projects or names
    unknown = sorted(set(chosen) - set(names))
    if unknown:
        parser.error(f"unknown projects: {', '.join(unknown)}")
    projects = dict(_stored(args.out)) if args.projects and args.out.exists() else {}
    projects.update(record(chosen))
    tests = sum(len(p["tests"]) for p in projects.values())
    save_checked_json(args.out, "observations", {"version": OBSERVATIONS_VERSION, "projects": projects})
    print(f"recorded {tests} tests of {len(projects)} projects into {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
