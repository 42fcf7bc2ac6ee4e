"""The recorded gold observations: fresh, reproducible from the gold, and as discriminating as the tests.

The probes observe where pytest asserted; these checks show that nothing the instances promise was
lost in the translation: every fail-to-pass test still fails on its planted bug, and every instance
still has a failing test that the agent can neither see nor read in its issue.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from envhub.tasks.code_repair.manifest import PROJECTS_DIR, load_manifest
from envhub.tasks.code_repair.observations import _stored, project_suite, record, undetected

PROJECTS = sorted(p.name for p in PROJECTS_DIR.iterdir() if (p / "project.json").exists())


@pytest.mark.slow
def test_every_project_has_fresh_observations_for_every_test() -> None:
    manifest = load_manifest()
    for project in PROJECTS:
        suite = project_suite(project)  # raises StaleObservations if probes, runtime or runner changed
        wanted = {t for inst in manifest.instances if inst.project == project for t in inst.expected_tests}
        assert wanted <= set(suite.expected), project
        assert all(seg["status"] == "ok" for segments in suite.expected.values() for seg in segments)


def _untimed(records: dict) -> dict:
    """A project's record without the gold's batch times (measured, so never reproduced exactly)."""
    return {key: value for key, value in records.items() if key != "gold_s"}


@pytest.mark.slow
def test_the_gold_reproduces_the_recorded_observations() -> None:
    assert {p: _untimed(r) for p, r in record(PROJECTS).items()} == {p: _untimed(_stored()[p]) for p in PROJECTS}


def test_every_batch_of_the_gold_was_timed() -> None:
    """Grading deadlines come from the gold's time in each batch: every batch a plan can hold has one."""
    from envhub.verifiers.probes.grader import DEADLINES, PROBE_DIR, plan

    for project in PROJECTS:
        suite = project_suite(project)
        run_plan, _ = plan(suite, sorted(suite.tests))
        modules = [b["module"].removeprefix(f"{PROBE_DIR}/") for b in run_plan["batches"]]
        assert set(modules) <= set(suite.gold_s), (project, sorted(set(modules) - set(suite.gold_s))[:3])
        assert all(0 < suite.gold_s[m] < 1.0 for m in modules), project
        assert all(b["timeout_s"] < DEADLINES.unmeasured_s for b in run_plan["batches"]), project
        assert run_plan["budget_s"] <= sum(b["timeout_s"] for b in run_plan["batches"])


@pytest.mark.slow
def test_every_planted_bug_still_fails_its_fail_to_pass_tests() -> None:
    instances = load_manifest().instances
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(undetected, instances))
    lost = {inst.instance_id: tests for inst, (tests, _) in zip(instances, results, strict=True) if tests}
    unhidden = [inst.instance_id for inst, (_, hidden) in zip(instances, results, strict=True) if not hidden]
    assert not lost, f"fail-to-pass tests the buggy code passes under the probes: {lost}"
    assert not unhidden, f"instances whose failing tests are all visible or in the issue: {unhidden}"
