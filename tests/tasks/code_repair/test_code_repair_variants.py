"""The differential corpus (issue #20 item 3): correct variants of every project's gold.

``data/variants.json.gz`` holds variants made by general rewrite rules (an exception subclass, a
longer message, extra private state, an equal container, a property or a named tuple, a comprehension, an early return, an
extracted helper; ``envhub.tasks.code_repair.offline.variants``). Each passed the project's real pytest
suite when it was built and observes differently from the gold at some probe site. A grader that
keeps the tests' meaning accepts every one; each rejection is a false negative.

Rebuild after changing a project: ``python -m envhub.tasks.code_repair.offline.variants build``.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

import envhub
from envhub.tasks.code_repair.manifest import PROJECTS_DIR
from envhub.tasks.code_repair.offline.runs import Runner, discover_projects, run_tests
from envhub.tasks.code_repair.offline.variants import load_corpus, stale_projects
from envhub.tasks.code_repair.offline.variants.corpus import MIN_PER_PROJECT, MIN_TOTAL
from envhub.tasks.code_repair.offline.variants.grade import Graded, grade
from envhub.tasks.code_repair.offline.variants.rules import rules
from envhub.tasks.code_repair.workspace import project_sources

ENV = "envhub/CodeRepair-v0"


def test_the_corpus_is_fresh_and_large_enough() -> None:
    corpus = load_corpus()
    assert stale_projects(corpus) == [], "rebuild: python -m envhub.tasks.code_repair.offline.variants build"
    projects = sorted(p.name for p in PROJECTS_DIR.iterdir() if (p / "project.json").exists())
    per_project = Counter(v.project for v in corpus.variants)
    assert {p: n for p, n in per_project.items() if n < MIN_PER_PROJECT} == {}
    assert sorted(per_project) == projects and len(corpus.variants) >= MIN_TOTAL
    known = {r.name: r for r in rules()}
    ids = {v.id for v in corpus.variants}
    assert len(ids) == len(corpus.variants)
    for v in corpus.variants:
        files = v.files()  # the diff applies to today's gold
        assert files and all(project_sources(v.project)[p] != t for p, t in files.items()), v.id
        assert v.rule in known and v.observed, v.id
        assert (v.base in ids) == (not known[v.rule].observable), v.id  # form rules stack on a kept variant


@pytest.mark.slow
def test_a_variant_of_every_project_passes_its_pytest_suite() -> None:
    """What the build checked for every variant, re-checked here for one per project (the newest rule)."""
    corpus = load_corpus()
    with Runner(fork=True, size=1) as runner:
        for project in discover_projects():
            variant = corpus.by_project()[project.name][-1]
            gold = run_tests(project, {}, runner=runner)
            run = run_tests(project, variant.files(), runner=runner)
            assert not run.collection_errors and run.passed() == gold.passed() == set(gold.outcomes), variant.id


@pytest.fixture(scope="module")
def graded() -> list[Graded]:
    env = envhub.make(ENV, split="train")
    try:
        return grade(load_corpus().variants, env.grading_sandbox, jobs=2)
    finally:
        env.close()


def _rejections(results: list[Graded]) -> dict[str, Any]:
    return {r.variant.id: next(iter(r.failed.items())) for r in results if not r.accepted}


@pytest.mark.slow
def test_the_probes_accept_every_correct_variant(graded: list[Graded]) -> None:
    assert all(r.complete for r in graded), [r.variant.id for r in graded if not r.complete]
    rejected = _rejections(graded)
    assert rejected == {}, f"{len(rejected)} of {len(graded)} correct variants rejected"
