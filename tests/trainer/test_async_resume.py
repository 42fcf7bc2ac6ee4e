"""Exact resume of an asynchronous run (``rollout.mode: async``, issue #40 step 2): a checkpoint holds the
buffer's finished groups with their versions and the episodes in flight with their ids, and ``--resume``
keeps the first (under the staleness bound at the resumed version, drops counted) and reissues the
second under the same ids.

The whole runs below are the real ``envhub train`` in a subprocess, killed with SIGKILL at several
points -- at a step boundary, mid-generation, with a full buffer in the checkpoint, mid-update and
mid-checkpoint -- then resumed to the end, and held against an uninterrupted run with the same seed.
They rule out the three bug classes other async trainers' users keep reporting:

* **a dropped group pins the saved data cursor, so everything after it is trained again** (TRL #7274):
  no episode is in two steps' batches, no group in two, and the data cursor equals the uninterrupted
  run's;
* **buffered rollouts silently lost at a checkpoint** (OpenRLHF #1322): every group of the task order
  the run reached is trained, still pending in the final checkpoint, or listed as dropped at a resume
  (and counted in a step's line) -- none is missing;
* **steps counted twice after resume** (veRL): ``steps.jsonl`` has each step once, the step count of the
  final checkpoint equals the uninterrupted run's.

Every trained sample after the resume lags at most ``max_staleness`` weight versions.
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml
from test_async import _groups, letter_collector  # noqa: F401 (a fixture)
from trainer_fixtures import TRAIN_SCRIPT, letter_config, steps_of

from envhub.rollout.collect import EpisodeCollector
from envhub.run_dir import TrainingRun
from envhub.trainer import fsdp
from envhub.trainer.async_resume import ASYNC_FILE, BufferLog, resume_groups
from envhub.trainer.async_rollouts import AsyncRollouts, Group, turn_versions
from envhub.trainer.sampling import TaskOrder
from envhub.types import TrajectoryRecord

STEPS, MAX_STALENESS = 6, 1
#: FirstLetter where the group of task ``train-1`` sampled before step 1 is recorded is held until then:
#: later groups overtake it, so the groups trained are not a prefix of the task order (a resume from
#: the data cursor alone would train some twice and lose others)
ENV_ID = "test/HeldLetter-v0"
RUN_TIMEOUT_S = 300  # a run takes about 10 s here


def _config(tmp_path: Path, model: Path, name: str) -> Path:
    path = tmp_path / f"{name}.yaml"
    held = {"held_task": "train-3", "steps_file": str(tmp_path / name / "steps.jsonl"), "until_version": 2,
            "max_hold_s": 10}
    path.write_text(yaml.safe_dump(letter_config(
        tmp_path / name, model, env={"id": ENV_ID, "args": held},
        rollout={"mode": "async", "max_staleness": MAX_STALENESS, "concurrency": 8},
        steps=STEPS, checkpoint_every=2, keep_checkpoints=STEPS)))
    return path


def _popen(config: Path, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(TRAIN_SCRIPT), str(config), *args], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})


def _train(config: Path, *args: str) -> str:
    done = subprocess.run([sys.executable, str(TRAIN_SCRIPT), str(config), *args], capture_output=True, text=True,
                          timeout=RUN_TIMEOUT_S, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stderr


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def _latest_async(run: Path) -> dict | None:
    pointer = run / "checkpoints" / "latest"
    if not pointer.exists():
        return None
    path = run / "checkpoints" / pointer.read_text().strip() / ASYNC_FILE
    return json.loads(path.read_text()) if path.exists() else None


# ---- kill points: each looks at the run directory (polled every 2 ms) ---------------------------------

def _at_step_boundary(run: Path) -> bool:
    return len(_lines(run / "steps.jsonl")) >= 3  # step 3 recorded, the checkpoint is step 2's


class _MidGeneration:
    """Once step 2's checkpoint is out, two more episodes finished: the producer is sampling."""

    def __init__(self) -> None:
        self.seen: set[str] | None = None

    def __call__(self, run: Path) -> bool:
        if _latest_async(run) is None:
            return False
        # keys, not a count: the buffer is compacted after each checkpoint (entries go, none come back)
        keys = {json.loads(line)["entry"] for line in _lines(run / "rollouts" / "buffer" / "entries.jsonl")}
        self.seen = keys if self.seen is None else self.seen
        return len(keys - self.seen) >= 2


def _full_buffer(run: Path) -> bool:
    """The latest checkpoint holds as many groups as admission allows ((max_staleness + 1) x
    groups_per_step started and not taken), at least a batch of them finished."""
    saved = _latest_async(run)
    return (saved is not None and len(saved["groups"]) >= (MAX_STALENESS + 1) * 2
            and sum(len(g["finished"]) == len(g["episodes"]) for g in saved["groups"]) >= 2)


def _mid_update(run: Path) -> bool:
    """A batch taken (its step's rollouts on disk) and not yet recorded, after a checkpoint."""
    done = len(_lines(run / "steps.jsonl"))
    return done >= 2 and len(_lines(run / "rollouts" / f"step-{done + 1:06d}" / "trajectories.jsonl")) == 8


def _mid_checkpoint(run: Path) -> bool:
    """A checkpoint being written after the first one is out."""
    root = run / "checkpoints"
    return (root / "latest").exists() and any(p.name.endswith(".partial") for p in root.iterdir())


def _kill_when(config: Path, run: Path, point) -> None:
    proc = _popen(config)
    try:
        deadline = time.monotonic() + RUN_TIMEOUT_S
        while not point(run):
            assert proc.poll() is None, f"the run ended before the kill point: {proc.stderr.read()[-2000:]}"
            assert time.monotonic() < deadline
            time.sleep(0.002)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL


# ---- what a finished run trained --------------------------------------------------------------------

def _records(run: Path, step: int) -> list[TrajectoryRecord]:
    path = run / "rollouts" / f"step-{step:06d}" / "trajectories.jsonl"
    return [TrajectoryRecord.model_validate_json(line) for line in _lines(path)]


def _ledger(run: Path) -> dict:
    """Steps, data cursor and groups of a finished run, checked for the three bug classes."""
    lines = steps_of(run)
    state = json.loads((run / "checkpoints" / f"step-{STEPS:06d}" / "state.json").read_text())
    final = json.loads((run / "checkpoints" / f"step-{STEPS:06d}" / ASYNC_FILE).read_text())
    trained_groups, episodes, trained_episodes = [], [], []
    at = dict(zip([ln["step"] for ln in lines], [0] + [int(ln["weight_version"]) for ln in lines], strict=False))
    for line in lines:
        records = _records(run, line["step"])
        assert len(records) == 8 and len({r.group_id for r in records}) == 2, line["step"]
        trained_groups += sorted({r.group_id for r in records})
        episodes += [r.episode_id for r in records]
        trained_episodes += line["trained_episodes"]
        lags = {r.episode_id: at[line["step"]] - turn_versions(r)[0] for r in records if turn_versions(r)}
        assert all(lags[e] <= MAX_STALENESS for e in line["trained_episodes"]), line["step"]  # the bound
    dropped = [json.loads(x)["group"] for x in _lines(run / "rollouts" / "buffer" / "dropped.jsonl")]
    return {"steps": [ln["step"] for ln in lines], "state": state, "final": final, "lines": lines,
            "trained_groups": trained_groups, "episodes": episodes, "trained_episodes": trained_episodes,
            "dropped": dropped}


def _group_index(ledger: dict) -> dict[str, int]:
    """Group id -> index of the task order, for every group up to the final checkpoint's ``next_group``."""
    order = TaskOrder([f"train-{i}" for i in range(4)], env_id=ENV_ID, seed=0, group_size=4,
                      dist=fsdp.DistInfo(0, 1, 0, torch.device("cpu"), None))
    return {order.plans(j, 1)[0].group_id: j for j in range(ledger["final"]["next_group"])}


def _check_exact(resumed: dict, whole: dict) -> None:
    # veRL: steps counted twice after resume
    assert resumed["steps"] == whole["steps"] == list(range(1, STEPS + 1))
    assert resumed["state"]["step"] == whole["state"]["step"] == STEPS
    # TRL #7274: a dropped group pins the data cursor, and what follows is trained again
    assert resumed["state"]["cursor"] == whole["state"]["cursor"] == STEPS * 2
    assert len(resumed["episodes"]) == len(set(resumed["episodes"]))
    assert len(resumed["trained_episodes"]) == len(set(resumed["trained_episodes"]))
    assert len(resumed["trained_groups"]) == len(set(resumed["trained_groups"]))
    # OpenRLHF #1322: buffered rollouts lost at a checkpoint -- every group reached is accounted for
    index = _group_index(resumed)
    trained = [index[g] for g in resumed["trained_groups"]]
    pending = [g["index"] for g in resumed["final"]["groups"]]
    accounted = trained + pending + resumed["dropped"]
    assert sorted(accounted) == list(range(resumed["final"]["next_group"])), (trained, pending, resumed["dropped"])
    assert sum(ln.get("async_resume_dropped_groups", 0) for ln in resumed["lines"]) == len(resumed["dropped"])


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory, scratch_model):
    tmp = tmp_path_factory.mktemp("whole")
    config = _config(tmp, scratch_model, "run")
    _train(config)
    return _ledger(tmp / "run")


@pytest.mark.slow
@pytest.mark.parametrize("point", [_at_step_boundary, _MidGeneration(), _full_buffer, _mid_update, _mid_checkpoint],
                         ids=["step-boundary", "mid-generation", "full-buffer", "mid-update", "mid-checkpoint"])
def test_a_killed_async_run_resumes_exactly(tmp_path, scratch_model, uninterrupted, point):
    config, run = _config(tmp_path, scratch_model, "run"), tmp_path / "run"
    _kill_when(config, run, point)
    said = _train(config, "--resume")
    assert "async resume: " in said, said
    resumed = _ledger(run)
    _check_exact(resumed, uninterrupted)


# ---- the producer takes up a checkpoint's groups -----------------------------------------------------

def _buffer_keys(run: Path) -> list[str]:
    return [json.loads(line)["entry"] for line in _lines(run / "rollouts" / "buffer" / "entries.jsonl")]


def _named(checkpoint: Path) -> set[str]:
    saved = json.loads((checkpoint / ASYNC_FILE).read_text())
    return {e for g in saved["groups"] for e in g["finished"].values()}


@pytest.mark.slow
def test_the_buffer_keeps_only_what_a_checkpoint_can_take_up(tmp_path, scratch_model):
    """A checkpoint every step, one kept: after each, the buffer drops what no checkpoint names (the
    trained episodes are in ``rollouts/step-N/``), so it holds the final checkpoint's groups, not the
    run's -- and a resume, which reads it, takes them up and trains on exactly."""
    config, run = _config(tmp_path, scratch_model, "run"), tmp_path / "run"
    settings = yaml.safe_load(config.read_text())
    config.write_text(yaml.safe_dump({**settings, "checkpoint_every": 1, "keep_checkpoints": 1}))
    _train(config)
    final = run / "checkpoints" / f"step-{STEPS:06d}"
    keys = _buffer_keys(run)
    assert len(keys) == len(set(keys)) and set(keys) == _named(final)
    trained = sum(len(_records(run, step)) for step in range(1, STEPS + 1))
    assert trained == STEPS * 8 and len(keys) < trained
    config.write_text(yaml.safe_dump({**settings, "checkpoint_every": 1, "keep_checkpoints": 1, "steps": STEPS + 2}))
    said = _train(config, "--resume")
    assert "async resume: " in said, said
    assert [line["step"] for line in steps_of(run)] == list(range(1, STEPS + 3))
    assert set(_buffer_keys(run)) == _named(run / "checkpoints" / f"step-{STEPS + 2:06d}")


def _sampled(collector, plan, buffer):
    """A producer of groups of one per step that trained one step and has a finished group in its
    buffer, stopped; returns its snapshot and the group it handed over."""
    producer = AsyncRollouts(collector, plan, first_group=0, groups_per_step=1, max_staleness=1,
                             keep=buffer.keep).start()
    try:
        taken = producer.take()
        producer.trained()
        deadline = time.monotonic() + 60
        while producer.counts()["ready"] < 1 and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        producer.close()
    return producer.snapshot(), taken.records[0].group_id


def _write_checkpoint(path: Path, saved: dict) -> Path:
    path.mkdir()
    (path / ASYNC_FILE).write_text(json.dumps(saved))
    return path


def test_the_producer_reissues_unfinished_episodes_under_their_ids_and_keeps_the_finished(
        tmp_path, letter_collector: EpisodeCollector, one_torch_thread):  # noqa: F811
    files, plan = TrainingRun(tmp_path / "run"), _groups(group_size=2)
    buffer = BufferLog(files)
    saved, taken = _sampled(letter_collector, plan, buffer)
    index = {plan(j)[0].group_id: j for j in range(saved["next_group"])}
    assert sorted([g["index"] for g in saved["groups"]] + [index[taken]]) == list(range(saved["next_group"]))
    # a checkpoint whose one group had one episode of two finished
    one = next(g for g in saved["groups"] if len(g["finished"]) == len(g["episodes"]))
    kept = dict(list(one["finished"].items())[:1])
    checkpoint = _write_checkpoint(tmp_path / "ckpt", {**saved, "groups": [{**one, "finished": kept}]})
    resumed = resume_groups(files, checkpoint, step=1, cursor=1, version=0, max_staleness=1, drop=True)
    (group,) = resumed.groups
    assert isinstance(group, Group) and not group.done and list(group.finished) == list(kept)
    # max_staleness 0, a group a step: the reissued group is the only one admitted before a step trains
    second = AsyncRollouts(letter_collector, plan, first_group=resumed.next_group, groups_per_step=1,
                           max_staleness=0, pending=resumed.groups, keep=buffer.keep).start()
    try:
        again = second.take()
        assert second.counts()["started"] == 1
    finally:
        second.close()
        buffer.close()
    assert [r.episode_id for r in again.records] == [p.episode_id for p in plan(one["index"])]  # the same ids
    (reused,) = [r for r in again.records if r.episode_id in kept]
    assert reused.metrics.finished_at == group.finished[reused.episode_id].metrics.finished_at  # not resampled
    entries = [json.loads(x)["entry"] for x in _lines(tmp_path / "run" / "rollouts" / "buffer" / "entries.jsonl")]
    assert len(entries) == len(set(entries))  # the reissued episode is an entry of its own
    assert second.snapshot() == {"next_group": resumed.next_group, "groups": []}


def test_a_wholly_stale_finished_group_is_dropped_at_resume_and_listed(tmp_path, letter_collector,  # noqa: F811
                                                                        one_torch_thread):
    files, plan = TrainingRun(tmp_path / "run"), _groups(group_size=2)
    buffer = BufferLog(files)
    try:
        saved, _ = _sampled(letter_collector, plan, buffer)
    finally:
        buffer.close()
    finished = [g["index"] for g in saved["groups"] if len(g["finished"]) == len(g["episodes"])]
    assert finished
    checkpoint = _write_checkpoint(tmp_path / "ckpt", saved)
    kept = resume_groups(files, checkpoint, step=1, cursor=1, version=1, max_staleness=1, drop=True)
    assert not kept.dropped  # sampled at version 0: lag 1 at version 1
    late = resume_groups(files, checkpoint, step=1, cursor=1, version=2, max_staleness=1, drop=True)
    assert [d["group"] for d in late.dropped] == finished and all(d["lag_min"] == 2 for d in late.dropped)
    assert [g.index for g in late.groups] == [g["index"] for g in saved["groups"] if g["index"] not in finished]
    listed = [json.loads(x)["group"] for x in _lines(tmp_path / "run" / "rollouts" / "buffer" / "dropped.jsonl")]
    assert listed == finished
    reweighted = resume_groups(files, checkpoint, step=1, cursor=1, version=2, max_staleness=1, drop=False)
    assert not reweighted.dropped and len(reweighted.groups) == len(saved["groups"])
