"""What a run report shows, computed from a run directory: the numbers behind every table and plot.

A run directory is recognised by its files: ``trajectories.jsonl`` (plus ``run.json`` and
``report.json``) is a *rollout*, loaded here (:func:`load_rollout`); ``steps.jsonl`` with
``config.json`` is a *training run* (:mod:`envhub.reports.training`). :func:`envhub.reports.html.load_run`
tries each; the run's kind picks the sections and plots the HTML report renders.

Every rate is over *attempted* episodes first (``strict``: infra failures count as failures), with
the rate excluding infra beside it. A success's cost is the whole run's cost divided by the
successes: the failed attempts are what a success cost too.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envhub.rollout.summary import tally
from envhub.run_dir import IDENTITY, REPORT, TRAJECTORIES, Run, RunFileError
from envhub.store import CorruptRecordError
from envhub.types import Outcome, OutcomeClass, TrajectoryRecord


@dataclass(frozen=True)
class TaskInfo:
    family: str
    difficulty: int | None


@dataclass
class Group:
    """Episodes sharing one key (a difficulty, a family, a task)."""

    attempted: int = 0
    successes: int = 0
    infra: int = 0
    outcomes: Counter = field(default_factory=Counter)

    def add(self, outcome: Outcome) -> None:
        self.attempted += 1
        self.successes += outcome is Outcome.SUCCESS
        self.infra += outcome.is_infra
        self.outcomes[outcome.value] += 1

    @property
    def strict_rate(self) -> float:
        return self.successes / self.attempted if self.attempted else 0.0

    @property
    def rate_excluding_infra(self) -> float | None:
        scored = self.attempted - self.infra
        return self.successes / scored if scored else None


@dataclass
class RunData:
    """A loaded run; its kind (a rollout here, :class:`~envhub.reports.training.TrainingData` a
    training run) picks the report's sections and plots (:func:`envhub.reports.html.builder`)."""

    kind: str
    run_dir: Path
    run: dict[str, Any]
    summary: dict[str, Any]
    records: list[TrajectoryRecord]
    tasks: dict[str, TaskInfo]
    profile: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)
    #: wall seconds summed over the episodes the summary counts
    episode_seconds: float = 0.0

    # ---- derived views ----------------------------------------------------------------------

    def task(self, rec: TrajectoryRecord) -> TaskInfo:
        return self.tasks.get(rec.task_id, TaskInfo("?", None))

    def grouped(self, key: Callable[[TrajectoryRecord], Any]) -> dict[Any, Group]:
        groups: dict[Any, Group] = defaultdict(Group)
        for rec in self.records:
            groups[key(rec)].add(rec.outcome)
        return dict(sorted(groups.items(), key=lambda kv: (kv[0] is None, str(kv[0]).zfill(8))))

    def by_difficulty(self) -> dict[Any, Group]:
        return self.grouped(lambda r: self.task(r).difficulty)

    def by_family(self) -> dict[Any, Group]:
        return self.grouped(lambda r: self.task(r).family)

    def by_task(self) -> dict[Any, Group]:
        return self.grouped(lambda r: r.task_id)

    def time_split(self) -> dict[str, float]:
        """Seconds summed over episodes: agent, sandbox, verifier, and the rest of the wall time."""
        split = {"agent": 0.0, "sandbox": 0.0, "verifier": 0.0, "other": 0.0}
        for rec in self.records:
            m = rec.metrics
            parts = [m.agent_seconds, m.sandbox_seconds, m.verifier_seconds]
            for k, v in zip(("agent", "sandbox", "verifier"), parts, strict=True):
                split[k] += v
            split["other"] += max(0.0, m.wall_seconds - sum(parts))
        return split

    def cost(self) -> dict[str, float | None]:
        """Per success: tokens (prompt + response), sampled tokens, tool calls, episode seconds."""
        s = self.summary
        successes = s["by_outcome"][Outcome.SUCCESS.value]
        seconds = self.episode_seconds

        def per(total: float) -> float | None:
            return total / successes if successes else None

        return {"tokens": per(s["tokens"]), "sampled_tokens": per(s["sampled_tokens"]),
                "tool_calls": per(s["tool_calls"]), "seconds": per(seconds), "episode_seconds_total": seconds}

    def headline(self) -> dict[str, Any]:
        """The numbers every report leads with (the seed's list)."""
        s = self.summary
        cls = s["by_class"]
        return {
            "attempted": s["attempted"], "successes": s["by_outcome"][Outcome.SUCCESS.value],
            "policy_failures": cls[OutcomeClass.POLICY_FAILURE.value], "truncations": cls[OutcomeClass.TRUNCATION.value],
            "infra_failures": cls[OutcomeClass.INFRA_FAILURE.value],
            "strict_success_rate": s["strict_success_rate"],
            "success_rate_excluding_infra": s["success_rate_excluding_infra"],
            "mean_reward": s["mean_reward"], **{f"{k}_per_success": v for k, v in self.cost().items()
                                                 if k != "episode_seconds_total"},
        }


def _read_json(run: Run, name: str, notes: list[str]) -> dict[str, Any] | None:
    try:
        return run.read_json(name)
    except RunFileError as exc:
        notes.append(f"{exc}; left out")
        return None


def load_rollout(path: Path, identity: dict[str, Any] | None = None) -> RunData | None:
    """A rollout directory (``envhub rollout --out``, ``envhub profile --out``, a training run's
    ``eval/TAG``), or None. ``identity`` stands in for ``run.json`` where the caller knows it;
    RunFileError when a record cannot be read."""
    rollout = Run(path)
    traj = rollout.trajectories_path
    if not traj.exists():
        return None
    notes: list[str] = []
    try:
        records = list(rollout.records())
    except (CorruptRecordError, OSError) as exc:
        raise RunFileError(f"cannot read {traj}: {exc}") from None
    run = identity if identity is not None else _read_json(rollout, IDENTITY, notes) or {}
    saved = _read_json(rollout, REPORT, notes) or {}
    counts = tally(records)
    summary = counts.summary(wall_seconds=float(saved.get("wall_seconds", 0.0) or 0.0))
    for key in ("planned", "incomplete", "seed", "group_size", "skipped_already_done"):
        if key in saved:
            summary[key] = saved[key]
    if saved and saved.get("attempted") != summary["attempted"]:
        notes.append(f"{REPORT} counts {saved.get('attempted')} episodes, {TRAJECTORIES} holds "
                     f"{summary['attempted']}: this report is computed from {TRAJECTORIES}")
    env_id = run.get("env_id") or (records[0].env_id if records else "")
    summary["env_id"] = env_id
    tasks = _task_infos(env_id, run, {r.task_id for r in records}, notes)
    return RunData(kind="rollout", run_dir=path, run=run, summary=summary, records=records, tasks=tasks,
                   profile=_read_json(rollout, "profile.json", notes), notes=notes,
                   episode_seconds=counts.episode_seconds)


def _task_infos(env_id: str, run: dict[str, Any], task_ids: set[str], notes: list[str]) -> dict[str, TaskInfo]:
    """Family (with the task's ``kind`` when it has one) and difficulty, from the env's task set."""
    from envhub.registry import make

    if not task_ids:
        return {}
    try:
        env = make(env_id, split=run.get("split", "train"), **(run.get("env_kwargs") or {}))
    except Exception as exc:  # a remote or uninstalled env: the report still renders, without them
        notes.append(f"task families and difficulties unknown: cannot load {env_id!r} ({exc})")
        return {}
    out: dict[str, TaskInfo] = {}
    missing = 0
    try:
        for task_id in sorted(task_ids):
            try:
                task = env.tasks.get(task_id)
            except Exception:
                missing += 1
                continue
            kind = task.metadata.get("kind")
            family = f"{task.family}/{kind}" if isinstance(kind, str) and kind else task.family
            out[task_id] = TaskInfo(family, task.difficulty)
    finally:
        env.close()
    if missing:
        notes.append(f"{missing} task ids are not in {env_id}'s task set now; shown as family '?'")
    return out
