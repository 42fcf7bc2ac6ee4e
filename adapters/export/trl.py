"""TRL export: the columns of TRL's ``GRPOTrainer(rollout_func=...)`` contract, as Parquet.

``rollout_func`` returns ``prompt_ids``, ``completion_ids``, ``logprobs`` and, for multi-turn
episodes, ``env_mask`` (1 = the model's token, 0 = env feedback; TRL multiplies it into the
loss mask); any other key reaches the reward functions. ``trl.parquet`` stores one row per
episode with exactly those names plus ``reward`` and the envhub ids, so an offline pipeline and
:func:`envhub.adapters.trl.make_rollout_func` speak the same schema. ``datasets`` loads it.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from envhub.types import TrajectoryRecord

from .common import check_token_view, trainable_mask, write_parquet_atomic


def to_trl_row(rec: TrajectoryRecord) -> dict[str, Any]:
    check_token_view(rec)
    return {
        "prompt_ids": list(rec.prompt_ids),
        "completion_ids": list(rec.response_ids),
        "logprobs": list(rec.response_logprobs),
        "env_mask": trainable_mask(rec),  # all 0 for an infra failure
        "reward": float(rec.reward),
        "outcome": rec.outcome.value,
        "episode_id": rec.episode_id,
        "task_id": rec.task_id,
        "env_id": rec.env_id,
        "group_id": rec.group_id,
        "sample_index": rec.sample_index,
    }


def trl_schema() -> Any:
    import pyarrow as pa

    return pa.schema([
        ("prompt_ids", pa.list_(pa.int64())), ("completion_ids", pa.list_(pa.int64())),
        ("logprobs", pa.list_(pa.float64())), ("env_mask", pa.list_(pa.int8())),
        ("reward", pa.float64()), ("outcome", pa.string()), ("episode_id", pa.string()),
        ("task_id", pa.string()), ("env_id", pa.string()), ("group_id", pa.string()),
        ("sample_index", pa.int64()),
    ])


def export_trl(records: Sequence[TrajectoryRecord], out: Path) -> list[Path]:
    import pyarrow as pa

    table = pa.Table.from_pylist([to_trl_row(r) for r in records], schema=trl_schema())
    return [write_parquet_atomic(out / "trl.parquet", table)]


def read_trl(out: Path) -> list[dict[str, Any]]:
    import pyarrow.parquet as pq

    rows = []
    for row in pq.read_table(out / "trl.parquet").to_pylist():
        rows.append({
            **{k: row[k] for k in ("episode_id", "task_id", "group_id", "sample_index", "outcome", "reward")},
            "prompt_ids": row["prompt_ids"], "response_ids": row["completion_ids"],
            "response_mask": row["env_mask"], "response_logprobs": row["logprobs"],
        })
    return rows
