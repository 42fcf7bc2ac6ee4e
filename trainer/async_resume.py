"""Exact resume of an asynchronous run (``rollout.mode: async``, issue #40 step 2): what a checkpoint
keeps of the rollout buffer and the episodes in flight, and how ``--resume`` takes them up.

**The run directory is the buffer.** Every episode the producer finishes is appended (fsynced) to
``RUN/rollouts/buffer/entries.jsonl`` before it counts as finished, under a key of its own
(``EPISODE_ID@TOKEN``, the token one per process: an episode reissued after a resume is another
entry). A checkpoint names entries of it, never copies them.

**The checkpoint** (``CHECKPOINT/async.json``, :meth:`~envhub.trainer.async_rollouts.AsyncRollouts.snapshot`,
taken after the step's update, when no batch is taken and untrained): ``next_group``, the next group
of the task order the producer would plan, and ``groups``, every group started and not taken --
finished (in the buffer) or not (in flight) -- with its planned episode ids and, for each finished
episode, its entry. The data cursor (``state.json``) counts the groups the steps took, as in sync.

**The buffer stays small** (:func:`compact_buffer`): after each checkpoint, the entries no checkpoint
on disk names and no later step can take are removed (the trained ones are in ``rollouts/step-N/``),
so the file holds about ``keep_checkpoints`` steps' episodes and the groups in flight, not the run's.

**Resume** (:func:`resume_groups`): the groups of the latest checkpoint come back with the records of
their finished episodes read from the buffer. A finished group every sample of which lags more than
``max_staleness`` behind the resumed weight version is dropped, with ``stale_samples: drop`` --
listed in ``RUN/rollouts/buffer/dropped.jsonl`` and counted in the first step's line
(``async_resume_dropped_groups``); any other stale sample meets the bound when its batch is formed,
as in a run never stopped. The rest go to the producer: the finished ones into the buffer, the others
run first, only their unfinished episodes, under the same episode ids; then groups ``next_group`` on.
What steps after the checkpoint had sampled or trained before the kill is discarded: their lines of
``steps.jsonl`` (as in sync) and their ``rollouts/step-N/`` (those groups are in the checkpoint, or
after ``next_group``). Without a checkpoint, a resume starts at group 0 with an empty buffer.
"""

from __future__ import annotations

import json
import shutil
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envhub.run_dir import TrainingRun
from envhub.store import JsonlStore, read_jsonl
from envhub.trainer.async_rollouts import Group, turn_versions
from envhub.types import TrajectoryRecord

#: The checkpoint's file of the producer's state.
ASYNC_FILE = "async.json"


def buffer_dir(files: TrainingRun) -> Path:
    return files.rollouts_dir / "buffer"


class BufferLog:
    """``RUN/rollouts/buffer/entries.jsonl``, open for this process's producer; :meth:`keep` is its
    ``keep`` (thread-safe: the store serializes appends)."""

    def __init__(self, files: TrainingRun) -> None:
        self.token = uuid.uuid4().hex[:12]
        self.store = JsonlStore(buffer_dir(files) / "entries.jsonl", key="entry").open()

    def keep(self, record: TrajectoryRecord) -> str:
        """Append ``record`` (fsynced); returns its entry key."""
        entry = f"{record.episode_id}@{self.token}"
        self.store.append({"entry": entry, "record": record.model_dump(mode="json")})
        return entry

    def close(self) -> None:
        self.store.close()


@dataclass
class Resumed:
    """What :func:`resume_groups` hands the producer, and what it dropped."""

    next_group: int
    groups: list[Group] = field(default_factory=list)
    dropped: list[dict[str, Any]] = field(default_factory=list)  # {"group", "samples", "lag_min"}

    def snapshot(self) -> dict[str, Any]:
        """As :meth:`~envhub.trainer.async_rollouts.AsyncRollouts.snapshot`, before a producer runs."""
        return {"next_group": self.next_group, "groups": [g.dump() for g in self.groups]}


def read_snapshot(checkpoint: Path | None, *, cursor: int) -> dict[str, Any]:
    """A checkpoint's ``async.json``; one without (none, or saved before the producer ever ran): the
    producer starts at the data cursor with an empty buffer."""
    path = checkpoint / ASYNC_FILE if checkpoint is not None else None
    if path is None or not path.is_file():
        return {"next_group": cursor, "groups": []}
    loaded: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return loaded


def resume_groups(files: TrainingRun, checkpoint: Path | None, *, step: int, cursor: int, version: int,
                  max_staleness: int, drop: bool) -> Resumed:
    """The producer's groups at ``checkpoint`` (of ``step``, data cursor ``cursor``, weight version
    ``version``), as the module docstring says; removes ``rollouts/step-N/`` after ``step``. Raises
    RuntimeError when an entry the checkpoint names is not in the buffer (the run directory was
    changed)."""
    snapshot = read_snapshot(checkpoint, cursor=cursor)
    for folder in files.rollouts_dir.glob("step-*"):
        if folder.is_dir() and int(folder.name.split("-")[1]) > step:
            shutil.rmtree(folder)
    wanted = {e for g in snapshot["groups"] for e in g["finished"].values()}
    records = _entries(buffer_dir(files) / "entries.jsonl", wanted)
    missing = wanted - records.keys()
    if missing:
        raise RuntimeError(f"{buffer_dir(files)}/entries.jsonl lacks {len(missing)} episodes the checkpoint "
                           f"{checkpoint} names (e.g. {sorted(missing)[0]}); the run directory was changed")
    out = Resumed(int(snapshot["next_group"]))
    for saved in snapshot["groups"]:
        group = Group(int(saved["index"]), list(saved["episodes"]),
                      {e: records[k] for e, k in saved["finished"].items()}, dict(saved["finished"]))
        lags = [version - seen[0] for r in group.finished.values() if (seen := turn_versions(r))]
        if drop and group.done and lags and min(lags) > max_staleness:
            out.dropped.append({"group": group.index, "samples": len(group.finished), "lag_min": min(lags),
                                "step": step})
        else:
            out.groups.append(group)
    if out.dropped:
        with JsonlStore(buffer_dir(files) / "dropped.jsonl", key="group") as log:
            for row in out.dropped:
                log.append(row)
    return out


def compact_buffer(files: TrainingRun, buffer: BufferLog, taken: list[tuple[int, list[str]]]) -> int:
    """After a checkpoint is published (and old ones pruned): remove from the buffer every entry no
    checkpoint on disk can take up again -- one that no checkpoint's ``async.json`` names and that was
    either written by an earlier process (its groups were trained, or are planned again after the
    checkpoint) or taken by a step no later than the oldest checkpoint (``taken``: (step, entries) of
    this process's steps; those at or before it are removed from the list). Trained episodes stay in
    ``rollouts/step-N/``. Returns how many entries went."""
    checkpoints = [c for c in files.checkpoints_dir.glob("step-*") if (c / "state.json").is_file()]
    if not checkpoints:
        return 0
    oldest = min(int(json.loads((c / "state.json").read_text(encoding="utf-8"))["step"]) for c in checkpoints)
    named = {e for c in checkpoints for g in read_snapshot(c, cursor=0)["groups"] for e in g["finished"].values()}
    done = {e for step, entries in taken if step <= oldest for e in entries}
    taken[:] = [(step, entries) for step, entries in taken if step > oldest]

    def drop(entry: str) -> bool:
        return entry not in named and (not entry.endswith(f"@{buffer.token}") or entry in done)

    return buffer.store.rewrite(drop)


def _entries(path: Path, wanted: set[str]) -> dict[str, TrajectoryRecord]:
    if not wanted or not path.exists():
        return {}
    return {row["entry"]: TrajectoryRecord.model_validate(row["record"])
            for row in read_jsonl(path) if row["entry"] in wanted}


def resume_line(resumed: Resumed) -> str:
    """The log line of what a resume took up."""
    finished = sum(1 for g in resumed.groups if g.done)
    episodes = sum(len(g.episode_ids) - len(g.finished) for g in resumed.groups)
    dropped = (f"; {len(resumed.dropped)} finished groups dropped, every sample past max_staleness at the "
               f"resumed version ({sum(d['samples'] for d in resumed.dropped)} samples, listed in "
               "rollouts/buffer/dropped.jsonl)") if resumed.dropped else ""
    return (f"async resume: {finished} finished groups back in the buffer, {len(resumed.groups) - finished} "
            f"groups to finish ({episodes} episodes reissued under their ids), then group {resumed.next_group} "
            f"on{dropped}")
