"""What every exporter shares: reading a run, choosing its episodes, writing files atomically.

An exporter is a pure function of trajectory records. It never re-tokenizes or re-templates
anything: the token view it writes is the one the rollout recorded (token in, token out), so a
trainer downstream scores exactly the tokens the policy sampled.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envhub.run_dir import Run
from envhub.store import atomic_path
from envhub.types import OutcomeClass, TrajectoryRecord

#: The fields that every round-trip test compares between a source record and its export.
ROUND_TRIP_FIELDS = (
    "episode_id", "task_id", "group_id", "sample_index", "prompt_ids", "response_ids",
    "response_mask", "response_logprobs", "reward", "outcome",
)


@dataclass
class Selection:
    """The records an export writes, grouped (see :func:`select`), and what it left out (and why)."""

    records: list[TrajectoryRecord]
    excluded_infra: int = 0
    skipped_no_tokens: int = 0
    #: episodes left out because their group is unfinished (an interrupted run not yet resumed)
    incomplete_groups: int = 0
    group_size: int = 1


@dataclass
class ExportResult:
    format: str
    out: Path
    files: list[Path] = field(default_factory=list)
    exported: int = 0
    excluded_infra: int = 0
    skipped_no_tokens: int = 0
    incomplete_groups: int = 0
    group_size: int = 1

    def summary(self) -> str:
        parts = [f"exported {self.exported} episode(s) as {self.format} to {self.out}"]
        parts.append(f"excluded {self.excluded_infra} infra-failure episode(s)")
        if self.skipped_no_tokens:
            parts.append(f"skipped {self.skipped_no_tokens} episode(s) without a token view "
                         "(scripted policies record no tokens)")
        if self.incomplete_groups:
            parts.append(f"left out {self.incomplete_groups} episode(s) of unfinished groups "
                         f"(fewer than {self.group_size} samples: resume the run to finish them)")
        return "; ".join(parts)

    def manifest(self) -> dict[str, Any]:
        return {
            "format": self.format,
            "files": [p.name for p in self.files],
            "exported": self.exported,
            "excluded_infra": self.excluded_infra,
            "skipped_no_tokens": self.skipped_no_tokens,
            "incomplete_groups": self.incomplete_groups,
            "group_size": self.group_size,
            "schema_doc": "docs/trajectory-schema.md",
        }


def load_records(run: str | Path) -> list[TrajectoryRecord]:
    """Every complete record of a run (its directory or its trajectories JSONL file), in file
    order (a torn last line is ignored); FileNotFoundError when it has none."""
    return list(Run.at(run).require().records())


def has_tokens(record: TrajectoryRecord) -> bool:
    return bool(record.prompt_ids) or bool(record.response_ids)


def is_infra(rec: TrajectoryRecord) -> bool:
    return rec.outcome_class is OutcomeClass.INFRA_FAILURE


def whole_groups(records: Iterable[TrajectoryRecord], group_size: int | None = None
                 ) -> tuple[list[list[TrajectoryRecord]], int, int]:
    """(groups, episodes of unfinished groups, group size) of a run's records.

    Records come in completion order, and a resumed run appends the episodes it finishes at the
    end, so one group's samples are scattered over the file. Here every group is one list in
    sample order, groups in order of first appearance. A group is whole when it holds sample
    indices ``0 .. group_size - 1`` (``group_size``: the run's, else the largest seen); an
    unfinished one is left out, counted, never exported half.
    """
    by_group: dict[str, dict[int, TrajectoryRecord]] = {}
    for rec in records:
        by_group.setdefault(rec.group_id, {}).setdefault(rec.sample_index, rec)
    size = max([group_size or 1, *(i + 1 for g in by_group.values() for i in g)])
    groups, left_out = [], 0
    for members in by_group.values():
        if sorted(members) == list(range(size)):
            groups.append([members[i] for i in range(size)])
        else:
            left_out += len(members)
    return groups, left_out, size


def select(records: Iterable[TrajectoryRecord], *, include_infra: bool = False, require_tokens: bool = True,
           infra_in_place: bool = False, group_size: int | None = None) -> Selection:
    """The records an export writes: whole groups (:func:`whole_groups`), each contiguous and in
    sample order, under the default training rule -- infra failures out (counted), token-less
    records out.

    Infra failures (``env_error``, ``verifier_error``, ``engine_error``) are not the model's
    doing; scoring them as its failures would teach it to avoid our bugs. They stay countable.
    ``infra_in_place`` keeps them whatever ``include_infra`` says, for formats whose trainers
    find a group by its position (slime, Miles): the writer then masks them out of the loss. A
    group whose (non-infra) samples lack tokens is skipped whole.
    """
    groups, incomplete, size = whole_groups(records, group_size)
    sel = Selection(records=[], incomplete_groups=incomplete, group_size=size)
    for group in groups:
        if require_tokens and not all(has_tokens(r) for r in group if not is_infra(r)):
            sel.skipped_no_tokens += len(group)
            continue
        for rec in group:
            if is_infra(rec) and not (include_infra or infra_in_place):
                sel.excluded_infra += 1
            elif require_tokens and not has_tokens(rec) and not (infra_in_place and is_infra(rec)):
                sel.skipped_no_tokens += 1
            else:
                sel.records.append(rec)
    return sel


def trainable_mask(rec: TrajectoryRecord) -> list[int]:
    """The loss mask a trainer gets for ``rec``: its ``response_mask``, or all zeros for an infra
    failure (``--include-infra`` exports keep those records for counting, never for gradients).

    Every token exporter writes its mask (``loss_mask`` / ``response_mask`` / ``env_mask`` /
    ``loss_masks``) from here; ``parquet`` is the record itself and keeps the recorded mask.
    """
    if is_infra(rec):
        return [0] * len(rec.response_mask)
    return list(rec.response_mask)


def check_token_view(rec: TrajectoryRecord) -> None:
    """Refuse to export a record whose token view is inconsistent (lengths differ)."""
    n = len(rec.response_ids)
    if len(rec.response_mask) != n or len(rec.response_logprobs) != n:
        raise ValueError(
            f"episode {rec.episode_id}: response_ids ({n}), response_mask ({len(rec.response_mask)}) "
            f"and response_logprobs ({len(rec.response_logprobs)}) differ in length; run `envhub audit`"
        )


def group_indices(records: Iterable[TrajectoryRecord]) -> dict[str, int]:
    """A dense integer per ``group_id`` in order of first appearance (trainers want ints)."""
    out: dict[str, int] = {}
    for rec in records:
        out.setdefault(rec.group_id, len(out))
    return out


def envhub_metadata(rec: TrajectoryRecord) -> dict[str, Any]:
    """The ids and outcome that every export carries beside the token view."""
    return {
        "episode_id": rec.episode_id,
        "task_id": rec.task_id,
        "env_id": rec.env_id,
        "group_id": rec.group_id,
        "sample_index": rec.sample_index,
        "split": rec.split,
        "outcome": rec.outcome.value,
        "outcome_class": rec.outcome_class.value if rec.outcome_class else None,
        "outcome_detail": rec.outcome_detail,
        "num_turns": rec.num_turns,
        "policy": rec.policy,
        "model": rec.versions.model,
    }


def task_prompt_messages(rec: TrajectoryRecord) -> list[dict[str, str]]:
    """The messages before the first assistant turn (system + user): the task's prompt."""
    out = []
    for m in rec.messages:
        if m.role == "assistant":
            break
        out.append({"role": m.role, "content": m.content})
    return out


def write_jsonl_atomic(path: str | Path, rows: Iterable[dict[str, Any]]) -> Path:
    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")
    return Path(path)


def read_jsonl_rows(path: str | Path) -> list[dict[str, Any]]:
    with open(path, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def write_parquet_atomic(path: str | Path, table: Any) -> Path:
    import pyarrow.parquet as pq

    with atomic_path(path) as tmp:
        pq.write_table(table, tmp)
    return Path(path)
