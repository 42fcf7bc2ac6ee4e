"""The stored differential corpus: correct variants of every project's gold, as unified diffs.

``data/variants.json.gz`` (written by :mod:`.build`, atomically, with a checksum) holds per
variant its project, rule, site, the base variant it was stacked on (form rules), the diff
against the gold ``src/`` and a few of the hidden tests whose observations differ from the
gold's. The projects' fingerprints are stored too: a corpus built for other gold sources or tests
is stale (:func:`stale_projects`) and must be rebuilt.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from envhub.tasks.code_repair.manifest import (
    PACKAGE_DIR,
    PROJECTS_DIR,
    load_checked_json,
    project_fingerprint,
)
from envhub.tasks.code_repair.patching import apply_patch
from envhub.tasks.code_repair.workspace import project_sources

CORPUS = PACKAGE_DIR / "data" / "variants.json.gz"
CORPUS_VERSION = 1
#: the least the corpus must hold (issue #20 item 3)
MIN_PER_PROJECT = 10
MIN_TOTAL = 250


@dataclass(frozen=True)
class Variant:
    """One correct variant of a project's gold."""

    id: str
    project: str
    rule: str
    where: str
    diff: str
    observed: list[str] = field(default_factory=list)  # hidden tests whose observations differ (a few)
    base: str | None = None  # the observable variant a form rule was stacked on

    def files(self) -> dict[str, str]:
        """The changed ``src/`` files, full text."""
        return apply_patch(project_sources(self.project), self.diff)

    def sources(self) -> dict[str, str]:
        """The whole ``src/`` of the variant."""
        return {**project_sources(self.project), **self.files()}

    def record(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}


@dataclass
class Corpus:
    variants: list[Variant]
    projects: dict[str, str]  # project -> fingerprint it was built against
    rules: dict[str, dict[str, Any]]  # rule -> {"description", "observable"}
    stats: dict[str, dict[str, dict[str, int]]]  # project -> rule -> outcome -> count

    def by_project(self) -> dict[str, list[Variant]]:
        out: dict[str, list[Variant]] = {}
        for v in self.variants:
            out.setdefault(v.project, []).append(v)
        return out

    def payload(self) -> dict[str, Any]:
        return {"version": CORPUS_VERSION, "projects": self.projects, "rules": self.rules, "stats": self.stats,
                "variants": [v.record() for v in self.variants]}


@lru_cache(maxsize=4)
def load_corpus(path: Path = CORPUS) -> Corpus:
    payload = load_checked_json(path, "variants")
    if payload.get("version") != CORPUS_VERSION:
        raise ValueError(f"{path}: corpus version {payload.get('version')} != {CORPUS_VERSION}")
    return Corpus([Variant(**v) for v in payload["variants"]], payload["projects"], payload["rules"],
                  payload.get("stats", {}))


def stale_projects(corpus: Corpus) -> list[str]:
    """Projects whose sources or tests changed since the corpus was built (or that it lacks)."""
    names = sorted(p.name for p in PROJECTS_DIR.iterdir() if (p / "project.json").exists())
    return [n for n in names if corpus.projects.get(n) != project_fingerprint(PROJECTS_DIR / n)]
