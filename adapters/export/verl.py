"""veRL export: records shaped as veRL's ``AgentLoopOutput``, a task dataset, the loop's YAML.

``AgentLoopOutput`` (``verl.experimental.agent_loop.agent_loop``) is what an agent loop hands
to veRL: ``prompt_ids``, ``response_ids`` (policy and tool tokens interleaved),
``response_mask`` (1 = LLM-generated), ``response_logprobs``, ``reward_score``, ``num_turns``
(user + assistant + tool turns, as veRL's ``ToolAgentLoop`` counts them), ``metrics``
(``AgentLoopMetrics``: seconds spent generating, in tools, scoring) and ``extra_fields``.
Each line of ``agent_loop_outputs.jsonl`` validates as one with
``AgentLoopOutput.model_validate``. ``tasks.parquet`` is an ``RLHFDataset`` of the run's tasks
(``prompt``, ``data_source``, ``agent_name``, ``extra_info``, ``reward_model``) for training
online with :class:`envhub.adapters.verl.EnvhubAgentLoop`, registered by ``agent_loop.yaml``.

The loop renders a task's prompt with the env's tools (the template's tools block), which the
``prompt`` column alone does not carry: veRL's ``max_prompt_length`` filter, templating the column
without tools, would count a few hundred tokens too few and keep rows the loop must refuse. So
``extra_info`` carries the tools (``envhub_tools``, JSON) and the length the run's prompt had
(``envhub_prompt_length``, tokens of the run's tokenizer), and
:class:`envhub.adapters.verl.EnvhubRLHFDataset` -- veRL's ``data.custom_cls`` -- filters on the
prompt exactly as the loop renders it.
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

AGENT_NAME = "envhub_agent"
AGENT_LOOP_TARGET = "envhub.adapters.verl.EnvhubAgentLoop"
#: veRL's ``data.custom_cls``: the dataset whose length filter sees the prompt the loop renders
DATASET_PATH, DATASET_NAME = "pkg://envhub.adapters.verl", "EnvhubRLHFDataset"
#: ``extra_info`` keys: the env's tools (JSON list of envhub ToolSpecs), the run's prompt length
TOOLS_KEY, PROMPT_LENGTH_KEY = "envhub_tools", "envhub_prompt_length"


def verl_num_turns(rec: TrajectoryRecord) -> int:
    """veRL counts the first user turn, every assistant turn, and every tool/user reply in between."""
    replies = sum(1 for t in rec.turns[:-1] if t.observation)
    return 1 + rec.num_turns + replies


def to_agent_loop_output(rec: TrajectoryRecord, *, response_length: int | None = None) -> dict[str, Any]:
    """One record as ``AgentLoopOutput`` fields; ``response_length`` truncates like veRL's loops,
    and a cut response gets ``reward_score`` 0 (the verifier judged the uncut episode)."""
    check_token_view(rec)
    n = len(rec.response_ids) if response_length is None else response_length
    truncated = len(rec.response_ids) > n
    m = rec.metrics
    return {
        "prompt_ids": list(rec.prompt_ids),
        "response_ids": list(rec.response_ids[:n]),
        "response_mask": trainable_mask(rec)[:n],  # all 0 for an infra failure
        "response_logprobs": list(rec.response_logprobs[:n]),
        "reward_score": 0.0 if truncated else float(rec.reward),
        "num_turns": verl_num_turns(rec),
        "metrics": {
            "generate_sequences": m.agent_seconds,
            "tool_calls": m.sandbox_seconds,
            "compute_score": m.verifier_seconds,
            "num_preempted": -1,
        },
        "extra_fields": {
            "envhub": envhub_metadata(rec),
            "truncated_response": truncated,
            "turn_scores": [],
            "tool_rewards": [],
        },
    }


def task_rows(records: Sequence[TrajectoryRecord], *, agent_name: str = AGENT_NAME) -> list[dict[str, Any]]:
    """One ``RLHFDataset`` row per distinct (env, task), in order of first appearance."""
    seen: set[tuple[str, str]] = set()
    rows = []
    for rec in records:
        key = (rec.env_id, rec.task_id)
        if key in seen:
            continue
        seen.add(key)
        rows.append({
            "data_source": rec.env_id,
            "prompt": task_prompt_messages(rec),
            "ability": "agent",
            "agent_name": agent_name,
            "reward_model": {"style": "envhub", "ground_truth": ""},
            "extra_info": {"env_id": rec.env_id, "task_id": rec.task_id, "split": rec.split,
                           "index": len(rows), TOOLS_KEY: json.dumps([t.model_dump() for t in rec.tools]),
                           PROMPT_LENGTH_KEY: len(rec.prompt_ids)},
        })
    return rows


def agent_loop_yaml(*, agent_name: str = AGENT_NAME, target: str = AGENT_LOOP_TARGET,
                    options: dict[str, Any] | None = None) -> str:
    """The file that ``actor_rollout_ref.rollout.agent.agent_loop_config_path`` points to.

    veRL reads a list of ``{name, _target_, ...}``; every other key reaches the loop's
    constructor through ``hydra.utils.instantiate``.
    """
    lines = [f"- name: {agent_name}", f"  _target_: {target}"]
    for key, value in (options or {}).items():
        lines.append(f"  {key}: {_yaml_scalar(value)}")
    return "\n".join(lines) + "\n"


def _yaml_scalar(value: Any) -> str:
    return json.dumps(value)  # JSON scalars and flow collections are valid YAML


def export_verl(records: Sequence[TrajectoryRecord], out: Path) -> list[Path]:
    import pyarrow as pa

    files = [
        write_jsonl_atomic(out / "agent_loop_outputs.jsonl", (to_agent_loop_output(r) for r in records)),
        write_parquet_atomic(out / "tasks.parquet", pa.Table.from_pylist(task_rows(records))),
        write_text_atomic(out / "agent_loop.yaml", agent_loop_yaml()),
    ]
    return files


def read_verl(out: Path) -> list[dict[str, Any]]:
    """The exported records back in envhub's field names (for round-trip checks)."""
    rows = []
    for row in read_jsonl_rows(out / "agent_loop_outputs.jsonl"):
        meta = row["extra_fields"]["envhub"]
        rows.append({
            **{k: meta[k] for k in ("episode_id", "task_id", "group_id", "sample_index", "outcome")},
            "prompt_ids": row["prompt_ids"], "response_ids": row["response_ids"],
            "response_mask": row["response_mask"], "response_logprobs": row["response_logprobs"],
            "reward": row["reward_score"],
        })
    return rows
