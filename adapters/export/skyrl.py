"""SkyRL export: the run as one ``GeneratorOutput`` batch, plus a SkyRL task dataset.

``GeneratorOutput`` (``skyrl_train.generators.base``) is what a SkyRL generator hands to the
trainer: per trajectory ``prompt_token_ids``, ``response_ids``, ``rewards``, ``loss_masks``,
``rollout_logprobs``, ``stop_reasons`` and ``trajectory_ids`` (``instance_id`` = the prompt's
uid, ``repetition_id`` = the sample within its group), with batch-level ``rollout_metrics``.
``generator_output.json`` holds exactly those keys; ``trajectories_meta.jsonl`` carries envhub's
ids and outcome per trajectory, aligned by position (the TypedDict has no per-trajectory
metadata field). ``dataset.parquet`` is a SkyRL prompt dataset (``data_source``, ``prompt``,
``env_class``, ``reward_spec``, ``extra_info``) for training online with
:class:`envhub.adapters.skyrl.EnvhubTextEnv`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from envhub.store import write_text_atomic
from envhub.types import TrajectoryRecord

from .common import (
    check_token_view,
    envhub_metadata,
    read_jsonl_rows,
    task_prompt_messages,
    trainable_mask,
    write_jsonl_atomic,
    write_parquet_atomic,
)

ENV_CLASS = "envhub"


def stop_reason(rec: TrajectoryRecord) -> str:
    last = rec.turns[-1].finish_reason if rec.turns else None
    return last if last in ("stop", "length", "abort") else "stop"


def generator_output(records: Sequence[TrajectoryRecord]) -> dict[str, Any]:
    from envhub.rollout.summary import summarize

    for rec in records:
        check_token_view(rec)
    report = summarize(records)
    return {
        "prompt_token_ids": [list(r.prompt_ids) for r in records],
        "response_ids": [list(r.response_ids) for r in records],
        "rewards": [float(r.reward) for r in records],
        "loss_masks": [trainable_mask(r) for r in records],  # all 0 for infra failures
        "stop_reasons": [stop_reason(r) for r in records],
        "rollout_metrics": {
            "envhub/strict_success_rate": report["strict_success_rate"],
            "envhub/mean_reward": report["mean_reward"],
            **{f"envhub/outcome/{k}": v for k, v in report["by_outcome"].items()},
        },
        "rollout_logprobs": [list(r.response_logprobs) for r in records],
        "trajectory_ids": [{"instance_id": r.group_id, "repetition_id": r.sample_index} for r in records],
    }


def dataset_rows(records: Sequence[TrajectoryRecord]) -> list[dict[str, Any]]:
    seen: set[tuple[str, str]] = set()
    rows = []
    for rec in records:
        if (rec.env_id, rec.task_id) in seen:
            continue
        seen.add((rec.env_id, rec.task_id))
        rows.append({
            "data_source": rec.env_id,
            "prompt": task_prompt_messages(rec),
            "env_class": ENV_CLASS,
            "reward_spec": {"method": "envhub", "ground_truth": ""},
            "extra_info": {"env_id": rec.env_id, "task_id": rec.task_id, "split": rec.split},
        })
    return rows


def export_skyrl(records: Sequence[TrajectoryRecord], out: Path) -> list[Path]:
    import pyarrow as pa

    return [
        write_text_atomic(out / "generator_output.json", json.dumps(generator_output(records)) + "\n"),
        write_jsonl_atomic(out / "trajectories_meta.jsonl", (envhub_metadata(r) for r in records)),
        write_parquet_atomic(out / "dataset.parquet", pa.Table.from_pylist(dataset_rows(records))),
    ]


def read_skyrl(out: Path) -> list[dict[str, Any]]:
    batch = json.loads((out / "generator_output.json").read_text(encoding="utf-8"))
    metas = read_jsonl_rows(out / "trajectories_meta.jsonl")
    rows = []
    for i, meta in enumerate(metas):
        tid = batch["trajectory_ids"][i]
        rows.append({
            "episode_id": meta["episode_id"], "task_id": meta["task_id"], "outcome": meta["outcome"],
            "group_id": tid["instance_id"], "sample_index": tid["repetition_id"],
            "prompt_ids": batch["prompt_token_ids"][i], "response_ids": batch["response_ids"][i],
            "response_mask": batch["loss_masks"][i], "response_logprobs": batch["rollout_logprobs"][i],
            "reward": batch["rewards"][i],
        })
    return rows
