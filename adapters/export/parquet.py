"""Trajectories as one Parquet file with a fixed, documented schema (docs/trajectory-schema.md).

Scalars and the token view are typed columns, so Hugging Face ``datasets`` and pandas load
them without a schema of their own. Nested parts whose shape varies per env (messages, turns,
verdict, tool arguments) are JSON strings: a struct column would need one Arrow schema for every
tool's arguments, and a run mixing envs would not unify. ``read_parquet`` rebuilds the exact
:class:`~envhub.types.TrajectoryRecord` objects, which is what the round-trip tests check.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from envhub.types import TrajectoryRecord

from .common import write_parquet_atomic

PARQUET_SCHEMA_NAME = "envhub-trajectory-parquet"
PARQUET_SCHEMA_VERSION = "1"

#: column -> (arrow type name, record field or None when JSON-encoded from a nested field)
_SCALARS = {
    "schema_version": "int32",
    "episode_id": "string",
    "task_id": "string",
    "env_id": "string",
    "group_id": "string",
    "sample_index": "int64",
    "split": "string",
    "policy": "string",
    "outcome": "string",
    "outcome_class": "string",
    "outcome_detail": "string",
    "reward": "float64",
    "num_turns": "int64",
}
_JSON = ("versions", "sampling_params", "messages", "tools", "turns", "verdict", "metrics")


def arrow_schema() -> Any:
    import pyarrow as pa

    fields = [pa.field(name, getattr(pa, kind)(), nullable=name == "outcome_class")
              for name, kind in _SCALARS.items()]
    fields += [
        pa.field("prompt_ids", pa.list_(pa.int64())),
        pa.field("response_ids", pa.list_(pa.int64())),
        pa.field("response_mask", pa.list_(pa.int8())),
        pa.field("response_logprobs", pa.list_(pa.float64())),
        pa.field("model", pa.string()),
    ]
    fields += [pa.field(f"{name}_json", pa.string()) for name in _JSON]
    return pa.schema(fields, metadata={
        "envhub.schema": PARQUET_SCHEMA_NAME, "envhub.schema_version": PARQUET_SCHEMA_VERSION,
    })


def to_row(rec: TrajectoryRecord) -> dict[str, Any]:
    data = rec.model_dump(mode="json")
    row: dict[str, Any] = {name: data[name] for name in _SCALARS}
    for name in ("prompt_ids", "response_ids", "response_mask", "response_logprobs"):
        row[name] = data[name]
    row["model"] = rec.versions.model
    for name in _JSON:
        row[f"{name}_json"] = json.dumps(data[name], ensure_ascii=False, sort_keys=True)
    return row


def from_row(row: dict[str, Any]) -> TrajectoryRecord:
    data: dict[str, Any] = {name: row[name] for name in _SCALARS}
    for name in ("prompt_ids", "response_ids", "response_mask", "response_logprobs"):
        data[name] = list(row[name] or [])
    for name in _JSON:
        data[name] = json.loads(row[f"{name}_json"])
    return TrajectoryRecord.model_validate(data)


def to_table(records: Sequence[TrajectoryRecord]) -> Any:
    import pyarrow as pa

    rows = [to_row(r) for r in records]
    schema = arrow_schema()
    return pa.Table.from_pylist(rows, schema=schema)


def write_parquet(records: Sequence[TrajectoryRecord], path: str | Path) -> Path:
    return write_parquet_atomic(path, to_table(records))


def read_parquet(path: str | Path) -> list[TrajectoryRecord]:
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    meta = table.schema.metadata or {}
    if meta.get(b"envhub.schema") != PARQUET_SCHEMA_NAME.encode():
        raise ValueError(f"{path} is not an envhub trajectory Parquet file")
    return [from_row(row) for row in table.to_pylist()]
