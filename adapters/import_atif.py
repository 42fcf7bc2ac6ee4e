"""ATIF in: Agent Trajectory Interchange Format trajectories (Harbor's format, v1.0 to v1.8) read
back into envhub :class:`~envhub.types.TrajectoryRecord` objects (``envhub import atif``).

The format and the export that writes it: :mod:`envhub.adapters.export.atif` (which names the
Harbor release and files it follows). Two kinds of file come in:

* **ours** (``agent.name == "envhub"`` and ``extra.envhub``): the record comes back exactly --
  ids, versions, messages, tools, every turn with its sampled token ids, logprobs, observation
  ids, timings, the token view (prompt = the first agent step's ``prompt_token_ids``; response =
  each step's ``completion_token_ids`` with mask 1 and its observation tokens with mask 0), reward,
  verdict, outcome and metrics. A file whose steps contradict each other (a step's
  ``prompt_token_ids`` is not the prompt plus every earlier token) is refused.
* **foreign** (any other agent): steps become messages and turns (one per ``agent`` step:
  ``message`` -> action text, ``tool_calls``, ``observation`` results -> tool messages; a ``user`` or
  ``system`` step after the first agent step joins the previous turn's reply). Tokens are imported
  only when every agent step has ``completion_token_ids`` with as many ``logprobs`` and each step's
  ``prompt_token_ids`` extends the previous one by its completion (then the difference is the
  observation tokens); otherwise every token field stays empty and the record says why. ATIF
  carries no grade, so a foreign record is ``verifier_error`` ("not graded": an infra outcome,
  never trained on) until regraded; ``env_id`` / ``task_id`` name the env and task where known.
  What envhub has no field for (reasoning content, images and audio, per-step costs and
  timestamps, subagent and continued trajectories) is dropped, and the record's
  ``outcome_detail`` lists what was.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envhub._version import __version__
from envhub.adapters.export.atif import (
    AGENT_NAME,
    ATIF_VERSIONS,
    atif_files,
    derived_messages,
    turns_token_view,
)
from envhub.adapters.export.common import write_jsonl_atomic
from envhub.run_dir import Run
from envhub.types import (
    EpisodeMetrics,
    Message,
    Outcome,
    ToolCall,
    ToolSpec,
    TrajectoryRecord,
    Turn,
    Verdict,
    Versions,
)

#: The env id of a foreign trajectory whose env was not named.
UNKNOWN_ENV = "atif:unknown"
NOT_GRADED = "imported from ATIF without an envhub verdict: not graded (regrade it where the env is known)"


class AtifError(ValueError):
    """A file that is not an ATIF trajectory envhub can read (the message names the file)."""


@dataclass
class Imported:
    record: TrajectoryRecord
    path: Path
    ours: bool
    notes: list[str] = field(default_factory=list)


@dataclass
class ImportResult:
    out: Path
    imported: list[Imported] = field(default_factory=list)
    #: JSON files of a folder that are not ATIF trajectories (e.g. an export's manifest.json)
    skipped: list[Path] = field(default_factory=list)

    def summary(self) -> str:
        ours = sum(i.ours for i in self.imported)
        tokenless = sum(not (i.record.prompt_ids or i.record.response_ids) for i in self.imported)
        parts = [f"imported {len(self.imported)} ATIF trajector{'y' if len(self.imported) == 1 else 'ies'} "
                 f"into {self.out / 'trajectories.jsonl'} ({ours} written by envhub, "
                 f"{len(self.imported) - ours} foreign)"]
        if tokenless:
            parts.append(f"{tokenless} without token ids (their token fields are empty; `envhub audit` skips them)")
        if len(self.imported) > ours:
            parts.append("foreign trajectories are not graded: outcome verifier_error until regraded")
        if self.skipped:
            parts.append(f"skipped {len(self.skipped)} JSON file(s) that are not ATIF trajectories")
        return "; ".join(parts)


# ---- reading one trajectory ---------------------------------------------------------------------

def _text(content: Any, notes: list[str]) -> str:
    """A message or result content as text: a string, or the text parts of ATIF's content parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = [p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text"]
        dropped = len(content) - len(texts)
        if dropped:
            notes.append(f"dropped {dropped} image/audio content part(s)")
        return "".join(texts)
    raise AtifError(f"content must be a string or a list of content parts, not {type(content).__name__}")


def _check_shape(data: Any) -> None:
    if not isinstance(data, dict):
        raise AtifError("not a JSON object")
    version = data.get("schema_version")
    if version not in ATIF_VERSIONS:
        raise AtifError(f"schema_version {version!r} is not one of {', '.join(ATIF_VERSIONS)}")
    agent = data.get("agent")
    if not isinstance(agent, dict) or not isinstance(agent.get("name"), str):
        raise AtifError("no agent object with a name")
    steps = data.get("steps")
    if not isinstance(steps, list) or not steps:
        raise AtifError("no steps")
    for i, step in enumerate(steps):
        if not isinstance(step, dict) or step.get("step_id") != i + 1:
            raise AtifError(f"steps[{i}]: step_id must be {i + 1} (sequential from 1)")
        if step.get("source") not in ("system", "user", "agent"):
            raise AtifError(f"steps[{i}]: source {step.get('source')!r} is not system, user or agent")


def _tool_specs(defs: Sequence[Any] | None) -> list[ToolSpec]:
    out = []
    for d in defs or []:
        fn = d.get("function", d) if isinstance(d, dict) else None
        if isinstance(fn, dict) and isinstance(fn.get("name"), str):
            out.append(ToolSpec(name=fn["name"], description=fn.get("description") or "",
                                **({"parameters": fn["parameters"]} if isinstance(fn.get("parameters"), dict) else {})))
    return out


def _step_message(step: dict[str, Any], notes: list[str]) -> Message:
    extra = step.get("extra") or {}
    text = _text(step.get("message"), notes)
    for result in (step.get("observation") or {}).get("results", []):  # a system step's event
        text += ("\n" if text else "") + _text(result.get("content"), notes)
    return Message(role=extra.get("role", step["source"]), content=text, name=extra.get("name"),
                   tool_call_id=extra.get("tool_call_id"))


def _turn(step: dict[str, Any], index: int, ours: bool, notes: list[str]) -> Turn:
    extra = step.get("extra") or {}
    metrics = step.get("metrics") or {}
    sampling = metrics.get("extra") or {}
    calls, names = [], {}
    for c in step.get("tool_calls") or []:
        absent = (c.get("extra") or {}).get("envhub_id_absent", False)
        calls.append(ToolCall(name=c["function_name"], arguments=c.get("arguments") or {},
                              id=None if absent else c["tool_call_id"]))
        names[c["tool_call_id"]] = c["function_name"]
    observation = []
    for r in (step.get("observation") or {}).get("results", []):
        rx = r.get("extra") or {}
        if ours:
            tcs = rx.get("tool_calls")
            observation.append(Message(role=rx.get("role", "tool"), content=_text(r.get("content"), notes),
                                       name=rx.get("name"), tool_call_id=rx.get("tool_call_id"),
                                       tool_calls=[ToolCall.model_validate(t) for t in tcs] if tcs is not None else None))
        else:
            source = r.get("source_call_id")
            observation.append(Message(role="tool" if source else "user", content=_text(r.get("content"), notes),
                                       name=names.get(source), tool_call_id=source))
            if r.get("subagent_trajectory_ref"):
                notes.append("dropped subagent trajectory references")
    if not ours and step.get("reasoning_content"):
        notes.append("dropped reasoning_content")
    return Turn(index=extra.get("turn_index", index), action_text=_text(step.get("message"), notes),
                token_ids=list(metrics.get("completion_token_ids") or []), logprobs=list(metrics.get("logprobs") or []),
                finish_reason=sampling.get("finish_reason"), weight_version=sampling.get("weight_version"),
                tool_calls=calls, parse_error=extra.get("parse_error"), observation=observation,
                observation_ids=list(extra.get("observation_token_ids") or []),
                timings={k: float(v) for k, v in (extra.get("timings") or {}).items()})


def _tokens(agent_steps: Sequence[dict[str, Any]], turns: list[Turn], ours: bool) -> tuple[list[int] | None, str | None]:
    """(prompt_ids or None when the steps carry none, why the tokens are unusable or None).

    Fills each turn's ``observation_ids`` from the next step's ``prompt_token_ids`` where the file
    does not give them, and checks that every step's ``prompt_token_ids`` is the prompt plus every
    earlier token. A foreign trajectory also needs ``completion_token_ids`` with as many
    ``logprobs`` on every agent step; ours are taken as written (the export wrote what was recorded).
    """
    metrics = [s.get("metrics") or {} for s in agent_steps]
    prompts = [m.get("prompt_token_ids") for m in metrics]
    if not any(m.get("completion_token_ids") or p for m, p in zip(metrics, prompts, strict=True)):
        return None, "no token ids"
    if not ours:
        for k, (m, turn) in enumerate(zip(metrics, turns, strict=True)):
            if m.get("completion_token_ids") is None or m.get("logprobs") is None:
                return None, f"agent step {k + 1} has no completion_token_ids or no logprobs"
            if len(turn.token_ids) != len(turn.logprobs):
                return None, (f"agent step {k + 1}: {len(turn.token_ids)} completion tokens "
                              f"but {len(turn.logprobs)} logprobs")
    if prompts[0] is None:
        return None, "the first agent step has no prompt_token_ids"
    context = list(prompts[0])
    for k, turn in enumerate(turns):
        if prompts[k] is not None and list(prompts[k]) != context:
            return None, f"agent step {k + 1}: prompt_token_ids are not the prompt plus every earlier token"
        context += turn.token_ids
        if not turn.observation_ids and k + 1 < len(turns) and "observation_token_ids" not in (
                agent_steps[k].get("extra") or {}):
            following = prompts[k + 1]
            if following is None or list(following[:len(context)]) != context:
                return None, f"agent step {k + 2}: prompt_token_ids do not extend step {k + 1}'s context"
            turn.observation_ids = list(following[len(context):])
        context += turn.observation_ids
    return list(prompts[0]), None


def from_atif(data: Any, *, source: str = "<atif>", env_id: str | None = None, task_id: str | None = None) -> Imported:
    """The record of one ATIF trajectory (a parsed JSON object). ``env_id`` / ``task_id`` name a
    foreign trajectory's env and task (ours carry their own)."""
    try:
        _check_shape(data)
    except AtifError as exc:
        raise AtifError(f"{source}: not an ATIF trajectory ({exc})") from None
    envhub = (data.get("extra") or {}).get("envhub")
    ours = data["agent"]["name"] == AGENT_NAME and isinstance(envhub, dict)
    envhub = envhub if ours else {}
    notes: list[str] = []
    steps = data["steps"]
    first_agent = next((i for i, s in enumerate(steps) if s["source"] == "agent"), len(steps))
    opening = [_step_message(s, notes) for s in steps[:first_agent]]
    turns: list[Turn] = []
    agent_steps = []
    for s in steps[first_agent:]:
        if s["source"] == "agent":
            agent_steps.append(s)
            turns.append(_turn(s, len(turns), ours, notes))
        else:  # a user or system step between agent steps: part of the env's reply to the last turn
            turns[-1].observation.append(_step_message(s, notes))
    prompt_ids, no_tokens = (None, "no token ids") if not agent_steps else _tokens(agent_steps, turns, ours)
    if no_tokens is not None and no_tokens != "no token ids":
        if ours:
            raise AtifError(f"{source}: {no_tokens}")
        notes.append(f"token ids not imported: {no_tokens}")
    if no_tokens is not None:
        for turn in turns:
            turn.token_ids, turn.logprobs, turn.observation_ids = [], [], []
        prompt_ids = list(envhub.get("prompt_ids") or [])
    prompt_ids = prompt_ids if prompt_ids is not None else []
    view = envhub.get("token_view") or turns_token_view(prompt_ids, turns)
    final = data.get("final_metrics") or {}
    fx = final.get("extra") or {}
    agent = data["agent"]
    if ours:
        versions = Versions.model_validate(envhub["versions"])
        messages = ([Message.model_validate(m) for m in envhub["messages"]] if "messages" in envhub
                    else derived_messages(opening, turns))
        record = TrajectoryRecord(
            schema_version=envhub["schema_version"], episode_id=envhub["episode_id"], task_id=envhub["task_id"],
            env_id=envhub["env_id"], group_id=envhub["group_id"], sample_index=envhub["sample_index"],
            split=envhub["split"], policy=envhub["policy"], versions=versions,
            sampling_params=envhub["sampling_params"], messages=messages, tools=_tool_specs(agent.get("tool_definitions")),
            turns=turns, **view, num_turns=envhub["num_turns"], reward=fx["reward"],
            verdict=Verdict.model_validate(fx["verdict"]) if fx.get("verdict") is not None else None,
            outcome=Outcome(fx["outcome"]), outcome_class=fx.get("outcome_class"), outcome_detail=fx["outcome_detail"],
            metrics=EpisodeMetrics.model_validate(fx["episode_metrics"]))
        return Imported(record=record, path=Path(source), ours=True)
    if data.get("continued_trajectory_ref"):
        notes.append(f"continued in {data['continued_trajectory_ref']} (not merged)")
    if data.get("subagent_trajectories"):
        notes.append(f"dropped {len(data['subagent_trajectories'])} embedded subagent trajectories")
    if no_tokens is not None:
        notes.insert(0, "no token ids: token fields left empty (the audit skips this trajectory)")
    episode_id = data.get("trajectory_id") or data.get("session_id") or Path(source).stem
    env = env_id or UNKNOWN_ENV
    detail = "; ".join([NOT_GRADED, *dict.fromkeys(notes)])
    record = TrajectoryRecord(
        episode_id=episode_id, task_id=task_id or episode_id, env_id=env, group_id=episode_id, sample_index=0,
        policy=f"atif:{agent['name']}@{agent.get('version', '')}",
        versions=Versions(envhub=__version__, env=env, model=agent.get("model_name")),
        messages=derived_messages(opening, turns), tools=_tool_specs(agent.get("tool_definitions")), turns=turns,
        **view, num_turns=len(turns), reward=0.0, outcome=Outcome.VERIFIER_ERROR, outcome_detail=detail,
        metrics=EpisodeMetrics(tool_calls=sum(len(t.tool_calls) for t in turns), prompt_tokens=len(prompt_ids),
                               response_tokens=len(view["response_ids"]), sampled_tokens=sum(view["response_mask"])))
    return Imported(record=record, path=Path(source), ours=False, notes=list(dict.fromkeys(notes)))


def read_trajectory(path: str | Path, *, env_id: str | None = None, task_id: str | None = None) -> Imported:
    """The record of the ATIF file at ``path`` (see :func:`from_atif`)."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise AtifError(f"{path}: cannot read it as JSON ({exc})") from None
    return from_atif(data, source=str(path), env_id=env_id, task_id=task_id)


# ---- a file or a folder into a run directory ----------------------------------------------------

def _candidates(src: Path) -> list[Path]:
    if src.is_file():
        return [src]
    if not src.is_dir():
        raise FileNotFoundError(f"{src}: no such file or folder")
    if (src / "manifest.json").is_file():  # an `envhub export --format atif` folder: its own order
        return atif_files(src)
    return sorted(p for p in src.rglob("*.json") if p.is_file())


def import_atif(src: str | Path, out: str | Path, *, env_id: str | None = None, task_id: str | None = None
                ) -> ImportResult:
    """Read the ATIF file ``src`` (or every ATIF file under the folder ``src``) into
    ``out/trajectories.jsonl``, a run directory that ``envhub audit`` and ``envhub export`` read.

    A folder's other JSON files are skipped and counted; a single file that is not ATIF, a folder
    with no ATIF file, or an ``out`` that already holds trajectories is an error (nothing is
    written). Episode ids repeated across files get ``#2``, ``#3`` ... appended.
    """
    src, run = Path(src), Run(Path(out))
    if run.exists():
        raise FileExistsError(f"{run.trajectories_path} already exists: import into a new run directory")
    result = ImportResult(out=run.path)
    paths = _candidates(src)
    seen: dict[str, int] = {}
    for path in paths:
        try:
            item = read_trajectory(path, env_id=env_id, task_id=task_id)
        except AtifError:
            if src.is_file():
                raise
            result.skipped.append(path)
            continue
        rec = item.record
        seen[rec.episode_id] = seen.get(rec.episode_id, 0) + 1
        if seen[rec.episode_id] > 1:
            new_id = f"{rec.episode_id}#{seen[rec.episode_id]}"
            item.record = rec.model_copy(update={"episode_id": new_id, **({} if item.ours else {"group_id": new_id})})
        result.imported.append(item)
    if not result.imported:
        raise AtifError(f"{src}: no ATIF trajectory found")
    run.ensure_writable()
    write_jsonl_atomic(run.trajectories_path, (i.record.model_dump(mode="json") for i in result.imported))
    return result


__all__ = ["UNKNOWN_ENV", "AtifError", "ImportResult", "Imported", "from_atif", "import_atif", "read_trajectory"]
