"""A training run's report: its numbers (:class:`TrainingData`, :func:`load_training`); its plots are
:mod:`envhub.reports.training_plots`, its sections :mod:`envhub.reports.training_html`.

A training run directory (``envhub train``; its layout is :class:`envhub.run_dir.TrainingRun`) is
recognised by ``steps.jsonl`` and ``config.json``. What is read, and what each part of the report is
computed from:

- ``config.json``: the trainer config (env, model, algorithm, rollout shape).
- ``steps.jsonl``: one line per GRPO step; the curves over steps. Any statistic may be missing on
  a step (no update, no KL term, the bypass mismatch mode): a missing value is a gap, never a 0.
- ``rollouts/step-N/trajectories*.jsonl``: the training episodes (one file per process), counted
  one step at a time (:func:`~envhub.rollout.summary.tally`, as a rollout's are) and not kept; the
  seed's numbers for training come from these. Only steps with a line in ``steps.jsonl`` count: a
  step still being collected is left out and said so.
- an async run (``rollout.mode: async``; :mod:`envhub.trainer.async_metrics`): its steps' async
  keys, and the version lag of each of the steps' episodes above (the step's weight version before
  its update minus the episode's first-turn version), trained or not.
- ``evals.jsonl`` and ``eval/TAG/``: the validation evals, each a rollout directory. Validation
  numbers come only from these and training numbers only from the two above: they are never mixed.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envhub.reports.data import RunData, load_rollout
from envhub.rollout.evidence import with_evidence
from envhub.rollout.stats import paired
from envhub.rollout.summary import tally
from envhub.run_dir import Run, RunFileError, TrainingRun, read_json_object
from envhub.store import CorruptRecordError, read_jsonl
from envhub.trainer.async_metrics import first_turn_version, is_async_run
from envhub.types import Outcome, TrajectoryRecord

#: An eval tag names a directory under ``eval/``: one plain path component, nothing else is read.
_TAG = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def stat(row: dict[str, Any], key: str) -> float | None:
    """``row[key]`` (``a.b`` reaches into ``row["a"]["b"]``) as a finite float, or None when absent."""
    value: Any = row
    for part in key.split("."):
        if not isinstance(value, dict):
            return None
        value = value.get(part)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


@dataclass
class TrainingData(RunData):
    """A loaded training run: ``summary`` counts its training episodes; their records are not kept
    (``records`` is empty: a long run's would not fit in memory)."""

    config: dict[str, Any] = field(default_factory=dict)
    steps: list[dict[str, Any]] = field(default_factory=list)
    evals: list[dict[str, Any]] = field(default_factory=list)
    #: tag -> ``eval/TAG/report.json`` (the eval's outcome counts), for the tags that have one
    eval_reports: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: the last eval: tag ``final`` when the run finished, else the latest one
    final_tag: str | None = None
    final_eval: RunData | None = None
    #: ``sft.json`` (examples, seconds, the per-step loss and entropy) and ``summary.json``, when written
    sft: dict[str, Any] | None = None
    run_summary: dict[str, Any] | None = None
    #: ``best.json``: the eval whose weights ``best/`` holds (the highest validation strict success)
    best: dict[str, Any] | None = None
    #: the eval GRPO started from (after-sft, else before) against the final one, on the same episodes
    paired: dict[str, Any] | None = None
    #: (version lag, trained) of each episode of a logged step whose turns recorded their weight versions
    sample_lags: list[tuple[int, bool]] = field(default_factory=list)

    @property
    def is_async(self) -> bool:
        return is_async_run(self.config, self.steps)

    def staleness(self) -> tuple[str, list[tuple[float, bool]]]:
        """What the staleness distribution counts, and its (value, trained) pairs: ``samples``, each
        episode's version lag (:attr:`sample_lags`); without any on disk, ``steps``, each step's
        ``async_version_lag_mean`` (trained stands for every step)."""
        if self.sample_lags:
            return "samples", [(float(lag), trained) for lag, trained in self.sample_lags]
        return "steps", [(lag, True) for lag in self.series("async_version_lag_mean")[1]]

    def series(self, key: str) -> tuple[list[int], list[float]]:
        """(steps, values) of the steps that recorded ``key`` (see :func:`stat`)."""
        xs, ys = [], []
        for row in self.steps:
            v = stat(row, key)
            if v is not None:
                xs.append(int(row["step"]))
                ys.append(v)
        return xs, ys

    def has(self, key: str) -> bool:
        return any(stat(row, key) is not None for row in self.steps)

    @property
    def validation_split(self) -> str:
        return str((self.config.get("env") or {}).get("validation_split") or "?")


def _read_lines(path: Path, key: str) -> list[dict[str, Any]]:
    """The rows of a JSONL log, the last one of each ``key`` kept (a rewritten row replaces the old)."""
    try:
        rows = list(read_jsonl(path))
    except (CorruptRecordError, OSError) as exc:
        raise RunFileError(f"cannot read {path}: {exc}") from None
    out: dict[Any, dict[str, Any]] = {}
    for n, row in enumerate(rows, 1):
        if key not in row or isinstance(row[key], dict | list):
            raise RunFileError(f"{path}: line {n} has no {key!r}; not a {path.name} row")
        out[row[key]] = row
    return list(out.values())


def _train_episodes(run: TrainingRun, steps: list[dict[str, Any]], notes: list[str]) -> Iterator[TrajectoryRecord]:
    """The logged steps' training episodes, one step's at a time."""
    logged = {int(row["step"]) for row in steps}
    missing = []
    for row in steps:
        step = int(row["step"])
        folder = run.step_dir(step)
        files = sorted(folder.glob("trajectories*.jsonl"))
        if not files:
            missing.append(step)
            continue
        used = set(row.get("trained_episodes") or []) | set(row.get("untrained_episodes") or [])
        found: list[TrajectoryRecord] = []
        for file in files:
            try:
                records = Run(folder, trajectories=file).records()
                found += [r for r in records if not used or r.episode_id in used]
            except (CorruptRecordError, OSError) as exc:
                raise RunFileError(f"cannot read {file}: {exc}") from None
        yield from found
        if stat(row, "attempted") is not None and len(found) != int(row["attempted"]):
            notes.append(f"step {step}: steps.jsonl counts {row['attempted']} episodes, rollouts/ holds "
                         f"{len(found)}")
    if missing:
        shown = ", ".join(str(s) for s in missing[:10]) + (f" and {len(missing) - 10} more" if len(missing) > 10 else "")
        notes.append(f"steps {shown}: no rollouts/step-N/trajectories*.jsonl; their episodes are not in the "
                     "training numbers (the curves over steps still are)")
    pending = sorted(p.name for p in run.rollouts_dir.glob("step-*")
                     if p.name[5:].isdigit() and int(p.name[5:]) not in logged)
    if pending:
        notes.append(f"rollouts of {', '.join(pending)} are on disk without a steps.jsonl line (a step in "
                     "progress): left out of the training numbers")


def load_training(path: Path) -> TrainingData | None:
    """A training run directory (``steps.jsonl`` + ``config.json``), or None."""
    files = TrainingRun(path)
    if not files.exists():
        return None
    notes: list[str] = []
    config = read_json_object(files.config_path)
    steps = _read_lines(files.steps_path, "step")
    bad = next((r["step"] for r in steps if isinstance(r["step"], bool) or not isinstance(r["step"], int)), None)
    if bad is not None:
        raise RunFileError(f"{files.steps_path}: step {bad!r} is not a step number")
    steps.sort(key=lambda r: r["step"])
    evals = _read_lines(files.evals_path, "tag") if files.evals_path.exists() else []
    env = config.get("env") if isinstance(config.get("env"), dict) else {}
    env_id = str(env.get("id", "?"))
    sample_lags: list[tuple[int, bool]] = []
    episodes = tally(_with_lags(_train_episodes(files, steps, notes), steps, sample_lags))
    step_seconds = sum(stat(r, "time.rollout_s") or 0.0 for r in steps) + \
        sum((stat(r, "time.train_s") or 0.0) + (stat(r, "time.weight_sync_s") or 0.0) for r in steps)
    summary = episodes.summary(wall_seconds=step_seconds)
    summary.update(env_id=env_id, policy=str(config.get("model", "?")))
    logged = sum(int(stat(r, f"outcomes.{o.value}") or 0) for r in steps for o in Outcome)
    if summary["attempted"] and logged != summary["attempted"]:
        notes.append(f"steps.jsonl counts {logged} outcomes, rollouts/ holds {summary['attempted']} episodes")
    eval_reports: dict[str, dict[str, Any]] = {}
    for e in evals:
        tag = str(e["tag"])
        report = files.eval_run(eval_source(e)).report_path
        if _TAG.match(tag) and report.is_file():
            try:
                eval_reports[tag] = read_json_object(report)
            except RunFileError as exc:
                notes.append(f"{exc}; its outcome counts are left out")
    final_tag = "final" if any(str(e["tag"]) == "final" for e in evals) else (str(evals[-1]["tag"]) if evals else None)
    if final_tag is not None and final_tag != "final":
        notes.append(f"no final eval yet (the run has not finished): the latest eval, {final_tag}, stands in")
    final_eval = None
    final_line = next((e for e in evals if str(e["tag"]) == final_tag), None)
    if final_line is not None and _TAG.match(eval_source(final_line)):
        split = final_line.get("split") or env.get("validation_split")
        final_eval = load_rollout(files.eval_run(eval_source(final_line)).path, identity={
            "env_id": env_id, "split": split, "env_kwargs": env.get("args") or {}, "policy": config.get("model")})
        if final_eval is None:
            notes.append(f"eval/{final_tag}/trajectories.jsonl is missing: no final-eval episodes to show")
        else:
            notes += [f"eval/{final_tag}: {n}" for n in final_eval.notes]
    run = {"env_id": env_id, "split": env.get("split", "train"), "policy": config.get("model"),
           "env_kwargs": env.get("args") or {}}
    run_summary = read_json_object(files.summary_path) if files.summary_path.is_file() else None
    sft = read_json_object(files.sft_path) if files.sft_path.is_file() else None
    return TrainingData(kind="training", run_dir=path, run=run, summary=summary, records=[], tasks={},
                        notes=notes, episode_seconds=episodes.episode_seconds, config=config, steps=steps,
                        evals=evals, eval_reports=eval_reports,
                        final_tag=final_tag, final_eval=final_eval, sft=sft, run_summary=run_summary,
                        paired=_paired(files, evals, final_tag), best=files.best(), sample_lags=sample_lags)


def _trained_at(row: dict[str, Any]) -> int | None:
    """The weight version a step trained with: the one after the step, less its update."""
    try:
        return int(row["weight_version"]) - (1 if row.get("updated") else 0)
    except (KeyError, TypeError, ValueError):
        return None


def _with_lags(records: Iterator[TrajectoryRecord], steps: list[dict[str, Any]],
               lags: list[tuple[int, bool]]) -> Iterator[TrajectoryRecord]:
    """``records`` as they are, appending to ``lags`` (version lag, trained) of each one a step took
    (trained or not; once per episode id)."""
    taken: dict[str, tuple[int, bool]] = {}
    for row in steps:
        version = _trained_at(row)
        if version is not None:
            taken.update((str(e), (version, False)) for e in row.get("untrained_episodes") or [])
            taken.update((str(e), (version, True)) for e in row.get("trained_episodes") or [])
    for record in records:
        at, first = taken.pop(record.episode_id, None), first_turn_version(record)
        if at is not None and first is not None:
            lags.append((at[0] - first, at[1]))
        yield record


def eval_source(line: dict[str, Any]) -> str:
    """The tag whose ``eval/TAG/`` holds an eval's episodes (an eval of the same weights points at it)."""
    return str(line.get("same_as") or line["tag"])


def _paired(files: TrainingRun, evals: list[dict[str, Any]], final_tag: str | None) -> dict[str, Any] | None:
    tags = {str(e["tag"]): e for e in evals}
    start = "after-sft" if "after-sft" in tags else "before" if "before" in tags else None
    if start is None or final_tag is None or final_tag == start:
        return None
    outcomes = []
    for tag in (start, final_tag):
        run = files.eval_run(eval_source(tags[tag]))
        if not _TAG.match(eval_source(tags[tag])) or not run.exists():
            return None
        try:
            outcomes.append({r.episode_id: r.outcome is Outcome.SUCCESS for r in run.records()})
        except CorruptRecordError:
            return None
    return with_evidence({"first": start, "second": final_tag, **paired(*outcomes)})
