"""A training run's report: its numbers (:class:`TrainingData`, :func:`load_training`) and plots.

A training run directory (``envhub train``; its layout is :class:`envhub.run_dir.TrainingRun`) is
recognised by ``steps.jsonl`` and ``config.json``. What is read, and what each part of the report is
computed from:

- ``config.json``: the trainer config (env, model, algorithm, rollout shape).
- ``steps.jsonl``: one line per GRPO step; the curves over steps. Any statistic may be missing on
  a step (no update, no KL term, the bypass mismatch mode): a missing value is a gap, never a 0.
- ``rollouts/step-N/trajectories*.jsonl``: the training episodes (one file per process), read
  slim (:func:`envhub.rollout.summary.slim`); the seed's numbers for training come from these, counted by
  the same :func:`~envhub.rollout.summary.summarize` as a rollout's. Only steps with a line in
  ``steps.jsonl`` count: a step still being collected is left out and said so.
- ``evals.jsonl`` and ``eval/TAG/``: the validation evals, each a rollout directory. Validation
  numbers come only from these and training numbers only from the two above: they are never mixed.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envhub.reports.data import LOADERS, RunData, RunDirError, load_rollout
from envhub.reports.plots import PLOTS, SMALL_TEXT, new_figure, new_panels, outcome_mix, png
from envhub.rollout.stats import paired
from envhub.rollout.summary import slim, summarize
from envhub.run_dir import TrainingRun
from envhub.store import CorruptRecordError, read_jsonl
from envhub.types import Outcome

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
    """A loaded training run: ``records`` and ``summary`` are its training episodes (slim)."""

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


def _read_object(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise RunDirError(f"{path} is unreadable ({exc})") from None
    if not isinstance(data, dict):
        raise RunDirError(f"{path} is not a JSON object")
    return data


def _read_lines(path: Path, key: str) -> list[dict[str, Any]]:
    """The rows of a JSONL log, the last one of each ``key`` kept (a rewritten row replaces the old)."""
    try:
        rows = list(read_jsonl(path))
    except (CorruptRecordError, OSError) as exc:
        raise RunDirError(f"cannot read {path}: {exc}") from None
    out: dict[Any, dict[str, Any]] = {}
    for n, row in enumerate(rows, 1):
        if key not in row or isinstance(row[key], dict | list):
            raise RunDirError(f"{path}: line {n} has no {key!r}; not a {path.name} row")
        out[row[key]] = row
    return list(out.values())


def _train_records(run: TrainingRun, steps: list[dict[str, Any]], notes: list[str]) -> list[dict[str, Any]]:
    """The logged steps' training episodes, slim, each tagged with its ``step``."""
    records: list[dict[str, Any]] = []
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
        found = []
        for file in files:
            try:
                found += [r for r in read_jsonl(file) if not used or r.get("episode_id") in used]
            except (CorruptRecordError, OSError) as exc:
                raise RunDirError(f"cannot read {file}: {exc}") from None
        for n, rec in enumerate(found, 1):
            if not isinstance(rec.get("task_id"), str) or rec.get("outcome") not in set(Outcome):
                raise RunDirError(f"{folder}: record {n} is not a trajectory record (task_id and outcome)")
            records.append({**slim(rec), "step": step})
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
    return records


def load_training(path: Path) -> TrainingData | None:
    """A training run directory (``steps.jsonl`` + ``config.json``), or None."""
    files = TrainingRun(path)
    if not files.exists():
        return None
    notes: list[str] = []
    config = _read_object(files.config_path)
    steps = _read_lines(files.steps_path, "step")
    bad = next((r["step"] for r in steps if isinstance(r["step"], bool) or not isinstance(r["step"], int)), None)
    if bad is not None:
        raise RunDirError(f"{files.steps_path}: step {bad!r} is not a step number")
    steps.sort(key=lambda r: r["step"])
    evals = _read_lines(files.evals_path, "tag") if files.evals_path.exists() else []
    env = config.get("env") if isinstance(config.get("env"), dict) else {}
    env_id = str(env.get("id", "?"))
    records = _train_records(files, steps, notes)
    step_seconds = sum(stat(r, "time.rollout_s") or 0.0 for r in steps) + \
        sum((stat(r, "time.train_s") or 0.0) + (stat(r, "time.weight_sync_s") or 0.0) for r in steps)
    summary = summarize(records, wall_seconds=step_seconds)
    summary.update(env_id=env_id, policy=str(config.get("model", "?")))
    logged = sum(int(stat(r, f"outcomes.{o.value}") or 0) for r in steps for o in Outcome)
    if records and logged != summary["attempted"]:
        notes.append(f"steps.jsonl counts {logged} outcomes, rollouts/ holds {summary['attempted']} episodes")
    eval_reports: dict[str, dict[str, Any]] = {}
    for e in evals:
        tag = str(e["tag"])
        report = files.eval_run(eval_source(e)).report_path
        if _TAG.match(tag) and report.is_file():
            try:
                eval_reports[tag] = _read_object(report)
            except RunDirError as exc:
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
    run_summary = _read_object(files.summary_path) if files.summary_path.is_file() else None
    sft = _read_object(files.sft_path) if files.sft_path.is_file() else None
    return TrainingData(kind="training", run_dir=path, run=run, summary=summary, records=records, tasks={},
                        notes=notes, config=config, steps=steps, evals=evals, eval_reports=eval_reports,
                        final_tag=final_tag, final_eval=final_eval, sft=sft, run_summary=run_summary,
                        paired=_paired(files, evals, final_tag), best=files.best())


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
        if not _TAG.match(eval_source(tags[tag])) or not run.trajectories_path.is_file():
            return None
        try:
            outcomes.append({r["episode_id"]: r["outcome"] == "success" for r in read_jsonl(run.trajectories_path)})
        except (CorruptRecordError, KeyError):
            return None
    return {"first": start, "second": final_tag, **paired(*outcomes)}


LOADERS.append(load_training)

# ---- plots --------------------------------------------------------------------------------------

#: One colour per outcome, shades of its class's colour: infra outcomes are purple, never left out.
OUTCOME_COLORS = {
    Outcome.SUCCESS: "#2e7d32", Outcome.WRONG_ANSWER: "#c62828", Outcome.FORMAT_ERROR: "#ef9a9a",
    Outcome.BUDGET_EXHAUSTED: "#ef6c00", Outcome.CONTEXT_OVERFLOW: "#ffcc80", Outcome.ENV_ERROR: "#4a148c",
    Outcome.VERIFIER_ERROR: "#8e24aa", Outcome.ENGINE_ERROR: "#ce93d8",
}


def _step_axis(ax) -> None:
    """Whole step numbers on x, plain numbers on y (no offset notation for a flat curve)."""
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.ticklabel_format(axis="y", useOffset=False)


def merged_series(data: TrainingData, keys: dict[str, str]) -> list[tuple[str, list[int], list[float]]]:
    """The recorded series of ``keys`` (label -> key), identical ones merged into one line whose label
    names them all ("reward mean = strict success"): a line drawn on top of another hides it."""
    merged: list[tuple[str, list[int], list[float]]] = []
    for label, key in keys.items():
        xs, ys = data.series(key)
        if not xs:
            continue
        same = next((i for i, (_, mx, my) in enumerate(merged) if (mx, my) == (xs, ys)), None)
        if same is None:
            merged.append((label, xs, ys))
        else:
            merged[same] = (f"{merged[same][0]} = {label}", xs, ys)
    return merged


def _lines(data: TrainingData, ax, keys: dict[str, str], title: str, ylabel: str = "") -> None:
    """One line per recorded key (label -> key); a panel without any says so instead of staying blank."""
    _step_axis(ax)
    drawn = merged_series(data, keys)
    for label, xs, ys in drawn:
        ax.plot(xs, ys, marker="o" if len(xs) <= 30 else None, markersize=3, label=label)
    ax.set_title(title, fontsize=9)
    ax.set_xlabel("step", fontsize=SMALL_TEXT)
    if ylabel:
        ax.set_ylabel(ylabel, fontsize=SMALL_TEXT)
    ax.tick_params(labelsize=SMALL_TEXT)
    if drawn:
        ax.legend(fontsize=SMALL_TEXT)
    else:
        ax.text(0.5, 0.5, "not recorded\n(" + ", ".join(keys.values()) + ")", ha="center", va="center",
                fontsize=SMALL_TEXT, transform=ax.transAxes, color="#757575")


def reward_over_steps(data: TrainingData) -> bytes:
    """Train (steps.jsonl) on the left, validation (evals.jsonl) on the right: two panels, never one line."""
    fig, (train, val) = new_panels(1, 2, 9.6, 3.4)
    _lines(data, train, {"reward mean": "reward_mean", "strict success": "strict_success",
                         "success excl. infra": "success_excluding_infra"}, "train episodes (steps.jsonl)")
    train.set_ylim(-0.05, 1.05)
    xs = [float(e.get("step", 0) or 0) for e in data.evals if stat(e, "strict_success") is not None]
    ys = [float(e["strict_success"]) for e in data.evals if stat(e, "strict_success") is not None]
    _step_axis(val)
    shown = [e for e in data.evals if stat(e, "strict_success") is not None]
    bars = [[y - float((e.get("interval") or (y, y))[0]) for e, y in zip(shown, ys, strict=True)],
            [float((e.get("interval") or (y, y))[1]) - y for e, y in zip(shown, ys, strict=True)]]
    val.errorbar(xs, ys, yerr=bars, marker="s", color="#6a1b9a", capsize=3, label="strict success, 95 % interval")
    best = [(x, y) for e, x, y in zip(shown, xs, ys, strict=True) if data.best and e["tag"] == data.best.get("tag")]
    if best:
        val.plot(*best[0], marker="*", markersize=12, color="#f9a825", linestyle="", label="best/")
        val.legend(fontsize=SMALL_TEXT, loc="lower right")
    for e, x, y in zip([e for e in data.evals if stat(e, "strict_success") is not None], xs, ys, strict=True):
        val.annotate(str(e["tag"]), (x, y), fontsize=SMALL_TEXT, xytext=(3, 3), textcoords="offset points")
    val.set_ylim(-0.05, 1.05)
    val.set_title(f"validation: {data.validation_split} split (evals.jsonl)", fontsize=9)
    val.set_xlabel("step", fontsize=SMALL_TEXT)
    val.tick_params(labelsize=SMALL_TEXT)
    if not xs:
        val.text(0.5, 0.5, "no validation evals", ha="center", va="center", transform=val.transAxes)
    return png(fig)


def outcomes_over_steps(data: TrainingData) -> bytes:
    fig, ax = new_figure(9.6, 3.8)
    _step_axis(ax)
    xs = [int(r["step"]) for r in data.steps]
    bottom = [0.0] * len(xs)
    for outcome in Outcome:
        counts = [stat(r, f"outcomes.{outcome.value}") or 0.0 for r in data.steps]
        total = int(sum(counts))
        ax.bar(xs, counts, bottom=bottom, width=0.9 if len(xs) < 200 else 1.0, color=OUTCOME_COLORS[outcome],
               label=f"{outcome.value} ({outcome.outcome_class.value}) {total}")
        bottom = [b + c for b, c in zip(bottom, counts, strict=True)]
    ax.set_xlabel("step")
    ax.set_ylabel("episodes")
    ax.set_title("outcome mix per step (every outcome listed; infra in purple)")
    ax.legend(fontsize=SMALL_TEXT, ncols=2, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return png(fig)


def groups_over_steps(data: TrainingData) -> bytes:
    fig, ax = new_figure(6.4, 3.2)
    _lines(data, ax, {"zero-variance group fraction": "zero_variance_fraction"}, "GRPO groups", "fraction")
    xs = [int(r["step"]) for r in data.steps if stat(r, "kept") is not None and stat(r, "attempted")]
    ys = [float(r["kept"]) / float(r["attempted"]) for r in data.steps
          if stat(r, "kept") is not None and stat(r, "attempted")]
    if xs:
        ax.plot(xs, ys, marker="x" if len(xs) <= 30 else None, markersize=4, linestyle="--", label="kept / attempted")
        ax.legend(fontsize=SMALL_TEXT)
    ax.set_ylim(-0.05, 1.05)
    return png(fig)


def cost_over_steps(data: TrainingData) -> bytes:
    """Tokens per success only where a step had one (the trainer's value for 0 successes is no cost)."""
    fig, (tps, speed) = new_panels(1, 2, 9.6, 3.2)
    xs = [int(r["step"]) for r in data.steps if (stat(r, "outcomes.success") or 0) > 0
          and stat(r, "tokens_per_success") is not None]
    ys = [float(r["tokens_per_success"]) for r in data.steps if (stat(r, "outcomes.success") or 0) > 0
          and stat(r, "tokens_per_success") is not None]
    _step_axis(tps)
    tps.plot(xs, ys, marker="o" if len(xs) <= 30 else None, markersize=3, color="#ef6c00")
    tps.set_title("sampled tokens per success (steps with a success)", fontsize=9)
    tps.set_xlabel("step", fontsize=SMALL_TEXT)
    tps.tick_params(labelsize=SMALL_TEXT)
    if not xs:
        tps.text(0.5, 0.5, "no step had a success", ha="center", va="center", fontsize=SMALL_TEXT,
                 transform=tps.transAxes, color="#757575")
    _lines(data, speed, {"tokens / s (rollout)": "tokens_per_second"}, "sampling speed")
    return png(fig)


HEALTH = {
    "KL to the reference": {"kl": "kl"},
    "clip fraction": {"clip fraction": "clip_fraction"},
    "ratio and IS weights": {"ratio max": "ratio_max", "IS weight mean": "is_weight_mean",
                             "IS weight max": "is_weight_max", "IS capped fraction": "is_capped_fraction"},
    "entropy": {"entropy": "entropy"},
    "grad norm": {"grad norm": "grad_norm"},
    "trainer-engine logprob gap": {"mean |engine - trainer|": "trainer_engine_gap",
                                   "mismatch |.| mean": "mismatch_abs_mean"},
}


def health_panels(data: TrainingData) -> tuple[dict[str, dict[str, str]], list[str]]:
    """The health panels with something recorded, and the titles of the others."""
    shown = {title: keys for title, keys in HEALTH.items() if merged_series(data, keys)}
    return shown, [title for title in HEALTH if title not in shown]


def health_over_steps(data: TrainingData) -> bytes | None:
    """Only the panels with something recorded (a run without a reference has no KL); the figure's
    title names the rest. None when nothing was recorded at all."""
    shown, missing = health_panels(data)
    if not shown:
        return None
    cols = min(3, len(shown))
    rows = -(-len(shown) // cols)
    fig, axes = new_panels(rows, cols, 3.5 * cols, 2.7 * rows)
    for ax, (title, keys) in zip(axes[:len(shown)], shown.items(), strict=True):
        _lines(data, ax, keys, title)
    for ax in axes[len(shown):]:
        ax.set_visible(False)
    if missing:
        fig.suptitle("not recorded in this run: " + ", ".join(missing), fontsize=SMALL_TEXT, color="#757575")
    return png(fig)


TIME_PARTS = {"rollout": "time.rollout_s", "train": "time.train_s", "weight sync": "time.weight_sync_s"}


def time_over_steps(data: TrainingData) -> bytes:
    """Wall seconds stacked (rollout, train, weight sync); verifier seconds, summed over the step's
    episodes and spent inside the rollout, drawn as a line over them rather than stacked twice."""
    fig, ax = new_figure(9.6, 3.4)
    _step_axis(ax)
    xs = [int(r["step"]) for r in data.steps]
    bottom = [0.0] * len(xs)
    for (name, key), color in zip(TIME_PARTS.items(), ("#1565c0", "#2e7d32", "#ef6c00"), strict=True):
        values = [stat(r, key) or 0.0 for r in data.steps]
        ax.bar(xs, values, bottom=bottom, color=color, width=0.9 if len(xs) < 200 else 1.0,
               label=f"{name} {sum(values):.1f}s")
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    vx, vy = data.series("time.verify_s")
    if vx:
        ax.plot(vx, vy, color="#6a1b9a", marker="o" if len(vx) <= 30 else None, markersize=3,
                label=f"verify (inside rollout, summed over episodes) {sum(vy):.2f}s")
    ax.set_xlabel("step")
    ax.set_ylabel("seconds")
    ax.set_title("time per step")
    ax.legend(fontsize=SMALL_TEXT)
    return png(fig)


def lag_over_steps(data: TrainingData) -> bytes | None:
    xs, ys = data.series("weight_version_lag")
    if not xs:
        return None
    fig, ax = new_figure(6.4, 3.0)
    _step_axis(ax)
    ax.plot(xs, ys, marker="o", markersize=3 if len(xs) <= 60 else 0, drawstyle="steps-mid", color="#00838f")
    ax.set_ylim(-0.5, max([1.0, *ys]) + 0.5)
    ax.set_xlabel("step")
    ax.set_ylabel("weight versions")
    ax.set_title("weight-version lag of the step's samples (max)")
    return png(fig)


def final_eval_outcomes(data: TrainingData) -> bytes | None:
    return outcome_mix(data.final_eval) if data.final_eval is not None and data.final_eval.records else None


PLOTS["training"] = {
    "reward_over_steps": reward_over_steps,
    "outcomes_over_steps": outcomes_over_steps,
    "groups_over_steps": groups_over_steps,
    "cost_over_steps": cost_over_steps,
    "health_over_steps": health_over_steps,
    "time_over_steps": time_over_steps,
    "lag_over_steps": lag_over_steps,
    "final_eval_outcomes": final_eval_outcomes,
}
