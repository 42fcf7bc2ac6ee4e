"""The code-repair instance data model and its on-disk manifest.

A manifest is the single source of truth for which instances exist: the synthesizer writes it,
the episode, verifier and exporters only read it.  It is gzip JSON written deterministically
(sorted keys, gzip mtime 0, instances in a fixed order) so that the same projects and the same
seed always produce a byte-identical file that can be committed and diffed, and it carries a
checksum so a truncated or hand-edited file is refused instead of silently grading against it.

Splits are assigned per *project*, never per instance: all bugs planted in one project share its
split, so no project whose code appears in the test split is ever seen during training.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from envhub.verifiers.integrity import is_cache_file

MANIFEST_VERSION = 1
PACKAGE_DIR = Path(__file__).resolve().parent
PROJECTS_DIR = PACKAGE_DIR / "projects"
DEFAULT_MANIFEST = PACKAGE_DIR / "data" / "manifest.json.gz"

Split = Literal["train", "validation", "test"]
SPLITS: tuple[Split, ...] = ("train", "validation", "test")

# Frozen once for the first corpus so splits never move when projects are added; projects not
# listed here fall back to a stable hash bucket (70/15/15) of their name.  The first 25 were
# ranked by that same hash and cut 17/4/4, because 25 independent buckets came out 21/1/3.
PINNED_SPLITS: dict[str, Split] = {
    "bank_statement": "train",
    "bitset": "test",
    "calendar_recur": "train",
    "csv_lite": "validation",
    "datetime_parse": "train",
    "dijkstra": "test",
    "event_scheduler": "validation",
    "expr_eval": "train",
    "ini_config": "train",
    "interval_set": "train",
    "inventory": "test",
    "json_pointer": "train",
    "ledger": "train",
    "line_diff": "train",
    "lru_ttl_cache": "train",
    "matrix_ops": "train",
    "money": "train",
    "priority_queue": "train",
    "rate_limiter": "validation",
    "rle_codec": "validation",
    "roman": "train",
    "semver": "train",
    "text_wrap": "test",
    "tokenizer_words": "train",
    "url_query": "train",
}


def assign_split(project: str) -> Split:
    """The split of a project: pinned if listed, otherwise a stable 70/15/15 hash bucket."""
    if project in PINNED_SPLITS:
        return PINNED_SPLITS[project]
    bucket = int(hashlib.sha256(f"envhub-code-repair-split:{project}".encode()).hexdigest(), 16) % 100
    return "train" if bucket < 70 else "validation" if bucket < 85 else "test"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Mutation(_Model):
    """One planted bug: where it is and what the operator did (for analysis, not for agents)."""

    file: str
    function: str
    operator: str
    site: int
    description: str


class Instance(_Model):
    """One repair task: buggy files over a project, the gold patch, and the hidden test split."""

    instance_id: str
    project: str
    split: Split
    difficulty: int = Field(ge=1, le=3)
    mutations: list[Mutation]
    patch: str
    buggy_files: dict[str, str]
    fail_to_pass: list[str]
    pass_to_pass: list[str]
    visible_tests: list[str] = Field(default_factory=list)
    issue_text: str

    @model_validator(mode="after")
    def _check(self) -> Instance:
        if not self.fail_to_pass or not self.pass_to_pass:
            raise ValueError("an instance needs both fail-to-pass and pass-to-pass tests")
        if set(self.fail_to_pass) & set(self.pass_to_pass):
            raise ValueError("fail_to_pass and pass_to_pass overlap")
        if len(self.mutations) != self.difficulty:
            raise ValueError("difficulty must equal the number of mutations")
        return self

    @property
    def expected_tests(self) -> list[str]:
        """Every test that must pass after a correct fix."""
        return sorted({*self.fail_to_pass, *self.pass_to_pass})


class ProjectInfo(_Model):
    """A source project and the fingerprint of the code the instances were made from."""

    name: str
    split: Split
    description: str
    tags: list[str] = Field(default_factory=list)
    source_sha256: str
    tests: list[str]


class Manifest(_Model):
    """All instances plus the projects and seed they were made from."""

    version: int = MANIFEST_VERSION
    seed: int
    settings: dict[str, int] = Field(default_factory=dict)
    projects: list[ProjectInfo]
    instances: list[Instance]

    @model_validator(mode="after")
    def _check(self) -> Manifest:
        splits = {p.name: p.split for p in self.projects}
        ids = [i.instance_id for i in self.instances]
        if len(ids) != len(set(ids)):
            raise ValueError("duplicate instance ids")
        for inst in self.instances:
            if splits.get(inst.project) != inst.split:
                raise ValueError(f"{inst.instance_id}: split differs from its project's split")
        return self

    def by_split(self, split: Split) -> list[Instance]:
        return [i for i in self.instances if i.split == split]

    def get(self, instance_id: str) -> Instance:
        for inst in self.instances:
            if inst.instance_id == instance_id:
                return inst
        raise KeyError(instance_id)

    def checksum(self) -> str:
        return _digest(self._payload())

    def _payload(self) -> dict[str, object]:
        return self.model_dump(mode="json")


def _canonical(obj: object) -> bytes:
    return json.dumps(obj, sort_keys=True, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def _digest(obj: object) -> str:
    return hashlib.sha256(_canonical(obj)).hexdigest()


def instance_id(project: str, buggy_files: dict[str, str]) -> str:
    """``<project>-<hash8>`` of the buggy file contents: stable across runs and orderings."""
    digest = hashlib.sha256(_canonical(sorted(buggy_files.items()))).hexdigest()
    return f"{project}-{digest[:8]}"


def project_fingerprint(root: Path) -> str:
    """Hash of a project's source, tests and metadata (caches and bytecode ignored)."""
    h = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        rel = path.relative_to(root).as_posix()
        if is_cache_file(rel):
            continue
        h.update(rel.encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def save_checked_json(path: str | Path, key: str, payload: object) -> str:
    """Write ``{"checksum", key: payload}`` as deterministic gzip JSON, atomically; returns the checksum."""
    path = Path(path)
    checksum = _digest(payload)
    buf = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buf, mtime=0, compresslevel=9) as gz:
        gz.write(_canonical({"checksum": checksum, key: payload}))
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(buf.getvalue())
    os.replace(tmp, path)
    return checksum


def load_checked_json(path: str | Path, key: str) -> dict:
    """Read what :func:`save_checked_json` wrote; refuses a checksum mismatch (truncated or edited)."""
    path = Path(path)
    raw = json.loads(gzip.decompress(path.read_bytes()))
    payload = raw.get(key, {})
    if _digest(payload) != raw.get("checksum"):
        raise ValueError(f"{path}: checksum mismatch")
    return payload


def save_manifest(manifest: Manifest, path: str | Path = DEFAULT_MANIFEST) -> str:
    """Write gzip JSON atomically (temp file + ``os.replace``); returns the checksum."""
    return save_checked_json(path, "manifest", manifest._payload())


def load_manifest(path: str | Path = DEFAULT_MANIFEST) -> Manifest:
    """Read and validate a manifest; refuses a wrong version or a checksum mismatch."""
    payload = load_checked_json(path, "manifest")
    if payload.get("version") != MANIFEST_VERSION:
        raise ValueError(f"{path}: manifest version {payload.get('version')} != {MANIFEST_VERSION}")
    return Manifest.model_validate(payload)
