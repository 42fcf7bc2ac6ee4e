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


@pytest.mark.slow
def test_the_gold_reproduces_the_recorded_observations() -> None:
    assert record(PROJECTS) == {p: _stored()[p] for p in PROJECTS}


@pytest.mark.slow
def test_every_planted_bug_still_fails_its_fail_to_pass_tests() -> None:
    instances = load_manifest().instances
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(undetected, instances))
    lost = {inst.instance_id: tests for inst, (tests, _) in zip(instances, results, strict=True) if tests}
    unhidden = [inst.instance_id for inst, (_, hidden) in zip(instances, results, strict=True) if not hidden]
    assert not lost, f"fail-to-pass tests the buggy code passes under the probes: {lost}"
    assert not unhidden, f"instances whose failing tests are all visible or in the issue: {unhidden}"
