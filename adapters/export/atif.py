"""ATIF export: one Agent Trajectory Interchange Format (Harbor's trajectory format) file per episode.

Followed: ATIF **v1.8**, as Harbor's own pydantic models define it in the PyPI package ``harbor``
0.26.0 (the newest release; Python >= 3.12), modules ``harbor/models/trajectories/{trajectory,
agent,step,tool_call,observation,observation_result,metrics,final_metrics}.py`` and the validator
``harbor/utils/trajectory_validator.py`` (RFC 0001, ``docs/rfcs/0001-trajectory-format.md`` in
github.com/laude-institute/harbor). No snapshot of the git repository could be had here, so the
pin is that release, not a commit. Read, not copied: nothing of Harbor is imported or vendored.

``envhub export DIR --format atif`` writes ``OUT/<episode_id>.json``, one ``Trajectory`` object per
file (Harbor's agents write one ``trajectory.json`` per trial), compact JSON, ``None`` fields left
out (as Harbor's ``to_json_dict`` does). The mapping (docs/integrations.md, "ATIF"):

* ``schema_version`` ``"ATIF-v1.8"``; ``session_id`` and ``trajectory_id``: ``episode_id``;
* ``agent``: ``name`` ``"envhub"``, ``version`` (envhub's), ``model_name`` (``versions.model``),
  ``tool_definitions`` (the tools in OpenAI function form, as ATIF asks);
* steps ``1..``: the messages before the first assistant turn (``system`` / ``user`` steps), then one
  ``agent`` step per turn: ``message`` = the sampled action text, ``tool_calls`` (ATIF wants an id:
  a call recorded without one gets ``call-<turn>-<i>``, marked ``extra.envhub_id_absent``),
  ``observation`` (the env's reply messages; a tool reply is linked to its call by
  ``source_call_id``), ``metrics``: ``prompt_token_ids`` = the exact context the model was given
  for that turn (prompt + every earlier sampled and observation token, ATIF's "including chat
  history"), ``completion_token_ids`` / ``logprobs`` = the turn's exact samples,
  ``prompt_tokens`` / ``completion_tokens`` their counts, ``extra.finish_reason`` /
  ``extra.weight_version``; ATIF has no field for the tokens of the env's reply, so they are
  ``step.extra.observation_token_ids`` (with ``turn_index``, ``parse_error``, ``timings``);
* ``final_metrics``: token totals, ``total_steps``, and in ``extra`` our ``reward``, ``outcome``,
  ``outcome_class``, ``outcome_detail``, ``verdict`` and the episode ``metrics``;
* ``extra.envhub``: ids (``episode_id``, ``task_id``, ``env_id``, ``group_id``, ``sample_index``,
  ``split``), ``policy``, ``versions``, ``sampling_params``, ``num_turns``, ``trainable`` (false for
  an infra failure: ATIF has no loss mask) -- and, only where the ATIF fields above would not give
  them back exactly, ``messages``, ``token_view`` or ``prompt_ids``.

The response mask is not written: it is 1 exactly on each step's ``completion_token_ids``, 0 on the
observation tokens between them. :mod:`envhub.adapters.import_atif` reads a file back into the
identical record.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from envhub.store import write_text_atomic
from envhub.types import Message, TrajectoryRecord, Turn

from .common import ROUND_TRIP_FIELDS, is_infra, trainable_mask

ATIF_VERSION = "ATIF-v1.8"
#: The schema versions a reader accepts (Harbor's ``Trajectory.schema_version`` literal).
ATIF_VERSIONS = tuple(f"ATIF-v1.{i}" for i in range(9))
AGENT_NAME = "envhub"


def synthetic_call_id(turn: int, i: int) -> str:
    return f"call-{turn}-{i}"


def opening_messages(rec: TrajectoryRecord) -> list[Message]:
    """The messages before the first assistant message (system, user)."""
    out = []
    for m in rec.messages:
        if m.role == "assistant":
            break
        out.append(m)
    return out


def derived_messages(opening: Sequence[Message], turns: Sequence[Turn]) -> list[Message]:
    """The conversation as the turns tell it: the opening, then per turn the sampled text as an
    assistant message and the env's reply. A record whose ``messages`` are exactly this needs no
    copy of them in the file."""
    out = list(opening)
    for turn in turns:
        out.append(Message(role="assistant", content=turn.action_text))
        out.extend(turn.observation)
    return out


def turns_token_view(prompt_ids: Sequence[int], turns: Sequence[Turn]) -> dict[str, list[Any]]:
    """The token view the turns add up to (each turn's samples with mask 1, then its observation
    tokens with mask 0), as the model policy and the audit build it."""
    ids: list[int] = []
    mask: list[int] = []
    lps: list[float] = []
    for turn in turns:
        ids += turn.token_ids
        mask += [1] * len(turn.token_ids)
        lps += turn.logprobs
        ids += turn.observation_ids
        mask += [0] * len(turn.observation_ids)
        lps += [0.0] * len(turn.observation_ids)
    return {"prompt_ids": list(prompt_ids), "response_ids": ids, "response_mask": mask, "response_logprobs": lps}


def _record_view(rec: TrajectoryRecord) -> dict[str, list[Any]]:
    return {"prompt_ids": list(rec.prompt_ids), "response_ids": list(rec.response_ids),
            "response_mask": list(rec.response_mask), "response_logprobs": list(rec.response_logprobs)}


def _drop_none(d: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if v is not None}


def _message_step(step_id: int, m: Message) -> dict[str, Any]:
    source = "system" if m.role == "system" else "user"
    extra = _drop_none({"role": m.role if m.role not in ("system", "user") else None, "name": m.name,
                        "tool_call_id": m.tool_call_id})
    return _drop_none({"step_id": step_id, "source": source, "message": m.content, "extra": extra or None})


def _tool_calls(turn: Turn) -> list[dict[str, Any]]:
    calls = []
    for i, tc in enumerate(turn.tool_calls):
        call: dict[str, Any] = {"tool_call_id": tc.id if tc.id is not None else synthetic_call_id(turn.index, i),
                                "function_name": tc.name, "arguments": dict(tc.arguments)}
        if tc.id is None:
            call["extra"] = {"envhub_id_absent": True}
        calls.append(call)
    return calls


def _link_replies(turn: Turn, calls: list[dict[str, Any]]) -> list[str | None]:
    """The ``source_call_id`` of each reply message: its own ``tool_call_id`` when a call has it;
    else the next unanswered call of the same tool name, for a ``tool`` message; else none."""
    ids = [c["tool_call_id"] for c in calls]
    free = list(range(len(calls)))
    out: list[str | None] = []
    for m in turn.observation:
        if m.tool_call_id is not None and m.tool_call_id in ids:
            k = ids.index(m.tool_call_id)
            free = [j for j in free if j != k]
            out.append(m.tool_call_id)
            continue
        k = next((j for j in free if m.role == "tool" and calls[j]["function_name"] == m.name), None)
        if k is None:
            out.append(None)
        else:
            free.remove(k)
            out.append(ids[k])
    return out


def _agent_step(step_id: int, turn: Turn, context: list[int]) -> dict[str, Any]:
    calls = _tool_calls(turn)
    results = []
    for m, source in zip(turn.observation, _link_replies(turn, calls), strict=True):
        extra = {"role": m.role, "name": m.name, "tool_call_id": m.tool_call_id}
        if m.tool_calls is not None:
            extra["tool_calls"] = [tc.model_dump(mode="json") for tc in m.tool_calls]
        results.append(_drop_none({"source_call_id": source, "content": m.content, "extra": extra}))
    metrics: dict[str, Any] = {}
    if turn.token_ids or turn.logprobs or context:
        metrics = {"prompt_tokens": len(context), "completion_tokens": len(turn.token_ids),
                   "prompt_token_ids": list(context), "completion_token_ids": list(turn.token_ids),
                   "logprobs": list(turn.logprobs)}
    sampling = _drop_none({"finish_reason": turn.finish_reason, "weight_version": turn.weight_version})
    if sampling:
        metrics["extra"] = sampling
    extra = {"turn_index": turn.index, "observation_token_ids": list(turn.observation_ids),
             "parse_error": turn.parse_error, "timings": dict(turn.timings)}
    return _drop_none({
        "step_id": step_id, "source": "agent", "message": turn.action_text,
        "tool_calls": calls or None, "observation": {"results": results} if results else None,
        "metrics": metrics or None, "extra": _drop_none(extra),
    })


def to_atif(rec: TrajectoryRecord) -> dict[str, Any]:
    """The ATIF v1.8 ``Trajectory`` (as a JSON-ready dict) of one episode record."""
    opening = opening_messages(rec)
    steps = [_message_step(i + 1, m) for i, m in enumerate(opening)]
    context = list(rec.prompt_ids)
    for turn in rec.turns:
        steps.append(_agent_step(len(steps) + 1, turn, context))
        context = context + list(turn.token_ids) + list(turn.observation_ids)
    if not steps:  # ATIF needs one step at least; a record without messages is not one we make
        raise ValueError(f"episode {rec.episode_id}: no messages and no turns, nothing to write as ATIF")
    envhub: dict[str, Any] = {
        "schema_version": rec.schema_version, "episode_id": rec.episode_id, "task_id": rec.task_id,
        "env_id": rec.env_id, "group_id": rec.group_id, "sample_index": rec.sample_index, "split": rec.split,
        "policy": rec.policy, "versions": rec.versions.model_dump(mode="json"),
        "sampling_params": rec.sampling_params, "num_turns": rec.num_turns, "trainable": not is_infra(rec),
    }
    if rec.messages != derived_messages(opening, rec.turns):
        envhub["messages"] = [m.model_dump(mode="json") for m in rec.messages]
    if turns_token_view(rec.prompt_ids, rec.turns) != _record_view(rec):
        envhub["token_view"] = _record_view(rec)  # not what the turns add up to: kept as recorded
    elif not rec.turns and rec.prompt_ids:
        envhub["prompt_ids"] = list(rec.prompt_ids)  # no agent step to carry them
    agent_steps = [s for s in steps if s["source"] == "agent" and "metrics" in s]
    final_metrics = _drop_none({
        "total_prompt_tokens": sum(s["metrics"].get("prompt_tokens", 0) for s in agent_steps) if agent_steps else None,
        "total_completion_tokens": sum(s["metrics"].get("completion_tokens", 0) for s in agent_steps)
        if agent_steps else None,
        "total_steps": len(steps),
        "extra": {
            "reward": rec.reward, "outcome": rec.outcome.value,
            "outcome_class": rec.outcome_class.value if rec.outcome_class else None,
            "outcome_detail": rec.outcome_detail,
            "verdict": rec.verdict.model_dump(mode="json") if rec.verdict is not None else None,
            "episode_metrics": rec.metrics.model_dump(mode="json"),
        },
    })
    agent = _drop_none({"name": AGENT_NAME, "version": rec.versions.envhub, "model_name": rec.versions.model,
                        "tool_definitions": [t.to_openai() for t in rec.tools] or None})
    return {
        "schema_version": ATIF_VERSION, "session_id": rec.episode_id, "trajectory_id": rec.episode_id,
        "agent": agent, "steps": steps, "final_metrics": final_metrics, "extra": {"envhub": envhub},
    }


def atif_file_name(episode_id: str) -> str:
    """``<episode_id>.json``, with any character a file name cannot hold replaced."""
    safe = "".join(c if c.isalnum() or c in "-_.@+=" else "_" for c in episode_id).lstrip(".") or "episode"
    return f"{safe}.json"


def write_atif(rec: TrajectoryRecord, path: str | Path) -> Path:
    """One episode as an ATIF file at ``path``, atomically."""
    text = json.dumps(to_atif(rec), ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return write_text_atomic(path, text + "\n")


def export_atif(records: Sequence[TrajectoryRecord], out: Path) -> list[Path]:
    """``OUT/<episode_id>.json`` per record, in export order (that order is the manifest's ``files``)."""
    names: dict[str, str] = {}
    files = []
    for rec in records:
        name = atif_file_name(rec.episode_id)
        if name in names and names[name] != rec.episode_id:
            raise ValueError(f"episodes {names[name]!r} and {rec.episode_id!r} map to one file name {name!r}")
        names[name] = rec.episode_id
        files.append(write_atif(rec, out / name))
    return files


def atif_files(out: Path) -> list[Path]:
    """The ATIF files of an export folder, in export order (``manifest.json``'s ``files``, else by name)."""
    manifest = out / "manifest.json"
    if manifest.is_file():
        names = json.loads(manifest.read_text(encoding="utf-8")).get("files", [])
        return [out / n for n in names if n.endswith(".json") and n != "manifest.json"]
    return sorted(p for p in out.glob("*.json") if p.name != "manifest.json")


def read_atif(out: Path) -> list[dict[str, Any]]:
    """An ATIF export read back as token views (``ROUND_TRIP_FIELDS``), in export order; like every
    token format, an infra failure reads back with an all-zero mask (``extra.envhub.trainable`` is
    false). :func:`envhub.adapters.import_atif.read_trajectory` gives the exact record."""
    from envhub.adapters.import_atif import read_trajectory

    rows = []
    for path in atif_files(Path(out)):
        rec = read_trajectory(path).record
        row = rec.model_dump(mode="json", include=set(ROUND_TRIP_FIELDS))
        row["response_mask"] = trainable_mask(rec)
        rows.append(row)
    return rows


__all__ = ["ATIF_VERSION", "ATIF_VERSIONS", "atif_file_name", "atif_files", "derived_messages", "export_atif",
           "read_atif", "to_atif", "turns_token_view", "write_atif"]
