"""Checkpoints of the whole training state, written so that a crash mid-save keeps the previous one.

``RUN/checkpoints/step-000004/`` holds:

* ``model.pt`` -- the full (unsharded) model state dict; with LoRA only the adapter's tensors (the base
  comes from the model dir: :mod:`envhub.trainer.lora`);
* ``optimizer.pt`` -- the full optimizer state; ``scheduler.pt`` -- the LR scheduler's;
* ``reference.pt`` -- with ``kl_coef > 0``, once GRPO has started: the KL reference (the policy after
  SFT; with LoRA its adapter), so that a resumed run uses the reference the uninterrupted one did;
* ``rng-rank{R}.pt`` -- per rank: python's, numpy's and torch's RNG states and the engine sampler's;
* ``state.json`` -- the step, the weight version, whether the SFT stage is done, the data cursor and
  the curriculum the run draws from (so a resume samples exactly the tasks the run would have);
* ``async.json`` -- with ``rollout.mode: async``: the rollout buffer's groups and the episodes in flight
  (:mod:`envhub.trainer.async_resume`), handed to :func:`save` as ``extra``.

A checkpoint directory is built under a temporary name, fsynced and renamed into place; only then
does ``RUN/checkpoints/latest`` (one line, replaced atomically) point at it. A kill at any moment
leaves ``latest`` naming a complete checkpoint or no checkpoint at all; leftovers of an unfinished
save are removed by the next save.

Samples are never trained twice or skipped: a step's episodes come from the data cursor (the step
number) and are kept on disk as they finish (``RUN/rollouts/step-N/``), so a resumed run picks up
the pending samples of the interrupted step and trains each step exactly once.

:func:`save` and :func:`restore` do it for the trainer's models (:class:`~envhub.trainer.models.PolicyModels`),
every rank taking its part; the functions below them are the steps. Before any of it, :func:`claim`
makes the directory this run's (``RUN/config.json``), and :func:`resume` picks a run up at its
latest checkpoint, with the :class:`Replay` of the steps it trains again.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from envhub.judges import claim_pin
from envhub.run_dir import TrainingRun
from envhub.store import write_json_atomic, write_text_atomic
from envhub.trainer import fsdp
from envhub.trainer.config import TrainConfig, parse_config
from envhub.types import TrajectoryRecord

if TYPE_CHECKING:
    from envhub.trainer.models import PolicyModels


class TrainingError(RuntimeError):
    """The run cannot go on (an audit failure with ``audit_failure: stop``, a run directory that
    holds another run); the message says why."""


#: Settings a resumed run may change (a section's field as ``section.field``): how long it runs, what it
#: reports, where and how fast or in how much memory it computes the same update; any other difference
#: means another run.
RESUMABLE_CHANGES = {"steps", "eval", "metrics_port", "tensorboard", "loggers", "audit_failure", "checkpoint_every",
                     "keep_checkpoints", "weight_sync_timeout_s", "threads", "device",
                     "optim.activation_checkpointing", "optim.activation_memory_fraction", "optim.fused_optimizer"}


def run_differences(saved: dict[str, Any], now: dict[str, Any]) -> list[str]:
    """What makes the dumped config ``now`` another run than ``saved`` (RUN/config.json), one
    ``"section.field: a there, b here"`` per differing setting; empty when it may resume."""
    before, after = _settings(saved), _settings(now)
    differ = sorted(k for k in {*before, *after} if before.get(k) != after.get(k) and k not in RESUMABLE_CHANGES
                    and k.split(".")[0] not in RESUMABLE_CHANGES)
    return [f"{k}: {before.get(k)!r} there, {after.get(k)!r} here" for k in differ]


def _settings(config: dict[str, Any]) -> dict[str, Any]:
    """A dumped config as ``section.field`` keys, so a difference is named down to the field."""
    flat: dict[str, Any] = {}
    for key, value in config.items():
        if isinstance(value, dict):
            flat.update({f"{key}.{field}": inner for field, inner in value.items()})
        else:
            flat[key] = value
    return flat


@dataclass
class TrainState:
    step: int = 0
    weight_version: str = "0"
    sft_done: bool = False
    #: groups drawn so far from the task order (``groups_per_step`` a step, more with dynamic sampling)
    cursor: int = 0
    curriculum: list[str] = field(default_factory=list)
    #: consecutive steps up to ``step`` that trained nothing (every group zero-variance)
    untrained_streak: int = 0

    def advance(self, step: int, groups_drawn: int, *, trained: bool) -> None:
        """``step`` is done: the data cursor is past its groups."""
        self.step, self.cursor = step, self.cursor + groups_drawn
        self.untrained_streak = 0 if trained else self.untrained_streak + 1


def claim(files: TrainingRun, config: TrainConfig, dist: fsdp.DistInfo, *, resume: bool) -> None:
    """Every rank: ``RUN/config.json`` names the run (rank 0 writes it); another config in the same
    directory is refused, and so is starting over a run that has checkpoints without ``resume``."""
    path, mine = files.config_path, config.dump()
    if path.exists():
        before = json.loads(path.read_text(encoding="utf-8"))
        with contextlib.suppress(ValueError):  # a config saved before a setting existed: its default
            before = parse_config(before).dump()
        differ = run_differences(before, mine)
        if differ:
            raise TrainingError(f"{files.path} holds another run (different {'; '.join(differ[:4])}); "
                                "use another run_dir")
        if not resume and latest_checkpoint(files.path) is not None:
            raise TrainingError(f"{files.path} already has checkpoints: pass --resume to continue it, "
                                "or use another run_dir")
    if dist.is_main:
        write_json_atomic(path, mine)
    fsdp.barrier(dist)


def claim_judges(files: TrainingRun, env_factory: Callable[[], Any], dist: fsdp.DistInfo) -> None:
    """Rank 0: ``RUN/judge.json`` pins the env's LLM judges (:func:`envhub.judges.claim_pin`);
    a run resumed under another judge is refused, naming both pins' differing fields."""
    if dist.is_main:
        env = env_factory()
        try:
            claim_pin(files.path, env.judge_pins())
        except ValueError as exc:
            raise TrainingError(str(exc)) from None
        finally:
            env.close()
    fsdp.barrier(dist)


class Replay:
    """What a resumed run trains again: the steps after its checkpoint, or every step of a run
    stopped before its first (``lines``: their lines of ``steps.jsonl``, which rank 0 took out of
    the file) and, of this process's steps, the episodes that came back from disk (``reused``)
    instead of being sampled."""

    def __init__(self, lines: dict[int, dict[str, Any]] | None = None) -> None:
        self.lines = lines or {}
        self.reused: set[str] = set()

    def take_reused(self, records: list[TrajectoryRecord]) -> list[TrajectoryRecord]:
        """The records of a step that came back from disk (then forgotten: the next step has its
        own)."""
        reused = [r for r in records if r.episode_id in self.reused]
        self.reused.clear()
        return reused

    def stamp(self, line: dict[str, Any]) -> dict[str, Any]:
        """The line of a step: of a step trained again, with the first run's rollout time and
        throughput (its episodes came back from disk), marked ``replayed``."""
        original = self.lines.pop(line["step"], None)
        if original is None:
            return line
        return {**line, "time": {**line["time"], "rollout_s": original["time"]["rollout_s"]},
                "tokens_per_second": original["tokens_per_second"], "replayed": True}


def resume(files: TrainingRun, models: PolicyModels, dist: fsdp.DistInfo,
           log: Callable[[str], None]) -> tuple[TrainState, Replay]:
    """Every rank: the run's state at its latest checkpoint, restored into ``models``
    (:func:`restore`) and the engine, and the :class:`Replay` of the steps after it; without a
    checkpoint (a run stopped before its first), step 0 and the Replay of every step it did, said
    in one line."""
    path = latest_checkpoint(files.path)
    if path is None:
        state = TrainState()
        log(f"resume: no checkpoint yet in {files.path}: starting from step 0 (episodes and evals "
            "already on disk are reused)")
    else:
        state, weights = restore(path, models, dist)
        models.publish(state.weight_version, weights)
        log(f"resumed from {path.name} (step {state.step}, weight version {state.weight_version})")
    replayed = files.keep_steps_upto(state.step) if dist.is_main and files.steps_path.exists() else []
    return state, Replay({r["step"]: r for r in replayed})


def save(run_dir: Path, state: TrainState, models: PolicyModels, dist: fsdp.DistInfo, *, keep: int,
         extra: dict[str, Any] | None = None) -> None:
    """Every rank: the checkpoint of ``state.step`` (rank 0 writes the weights and publishes it, with
    each ``extra`` object as the JSON file it names)."""
    staging = begin_save(run_dir, state.step) if dist.is_main else staging_dir(run_dir, state.step)
    fsdp.barrier(dist)
    with getattr(models.engine, "paused", contextlib.nullcontext)():  # its worker may be sampling (async)
        save_rank_part(staging, dist.rank, models.engine.sampler_rng)
    model = models.checkpoint_weights(fsdp.full_state_dict(models.model, dist))
    optimizer = fsdp.optimizer_state(models.model, models.optimizer, dist)
    fsdp.barrier(dist)
    if dist.is_main:
        finish_save(run_dir, staging, state=state, model=model, optimizer=optimizer,
                    scheduler=models.scheduler.state_dict(), keep=keep, reference=models.reference_state(),
                    extra=extra)
    fsdp.barrier(dist)


def restore(path: Path, models: PolicyModels, dist: fsdp.DistInfo) -> tuple[TrainState, dict[str, torch.Tensor]]:
    """Every rank: the checkpoint at ``path`` loaded into ``models`` (weights, optimizer, schedule, KL
    reference, this rank's RNG states); returns its state and the full model state dict (for the engine)."""
    loaded = load_checkpoint(path, dist.rank)
    weights = models.full_weights(loaded.model)
    fsdp.load_full_state_dict(models.model, weights, dist)
    if loaded.reference is not None:
        models.load_reference(loaded.reference)
    fsdp.load_optimizer_state(models.model, models.optimizer, loaded.optimizer, dist)
    models.scheduler.load_state_dict(loaded.scheduler)
    if loaded.rng is not None:
        restore_rng(loaded.rng, models.engine.sampler_rng)
    return loaded.state, weights


def checkpoint_root(run_dir: Path) -> Path:
    return TrainingRun(run_dir).checkpoints_dir


def latest_checkpoint(run_dir: Path) -> Path | None:
    pointer = checkpoint_root(run_dir) / "latest"
    if not pointer.is_file():
        return None
    path = checkpoint_root(run_dir) / pointer.read_text(encoding="utf-8").strip()
    if not (path / "state.json").is_file():
        raise RuntimeError(f"{pointer} names {path.name}, which is not a complete checkpoint; "
                           "delete the pointer to start over or restore the directory")
    return path


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _save_tensor_file(obj: Any, path: Path) -> None:
    with open(path, "wb") as fh:
        torch.save(obj, fh)
        fh.flush()
        os.fsync(fh.fileno())


def seed_everything(seed: int) -> None:
    """Seed python's, numpy's and torch's RNGs (the states a checkpoint keeps)."""
    random.seed(seed)
    np.random.seed(seed % (1 << 32))
    torch.manual_seed(seed)


def rng_state(engine_rng: torch.Generator | None) -> dict[str, Any]:
    return {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state(),
            "engine": engine_rng.get_state() if engine_rng is not None else None}


def restore_rng(state: dict[str, Any], engine_rng: torch.Generator | None) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if engine_rng is not None and state.get("engine") is not None:
        engine_rng.set_state(state["engine"])


def staging_dir(run_dir: Path, step: int) -> Path:
    """Where every rank writes its part of the checkpoint of ``step`` before it is published."""
    return checkpoint_root(run_dir) / f".{TrainingRun.step_name(step)}.partial"


def begin_save(run_dir: Path, step: int) -> Path:
    """Rank 0: a fresh staging directory (leftovers of an interrupted save are removed)."""
    root = checkpoint_root(run_dir)
    root.mkdir(parents=True, exist_ok=True)
    for stale in root.glob(".step-*.partial"):
        shutil.rmtree(stale, ignore_errors=True)
    path = staging_dir(run_dir, step)
    path.mkdir()
    return path


def save_rank_part(staging: Path, rank: int, engine_rng: torch.Generator | None) -> None:
    _save_tensor_file(rng_state(engine_rng), staging / f"rng-rank{rank}.pt")


def finish_save(run_dir: Path, staging: Path, *, state: TrainState, model: dict[str, torch.Tensor],
                optimizer: dict[str, Any], scheduler: dict[str, Any], keep: int,
                reference: dict[str, torch.Tensor] | None = None, extra: dict[str, Any] | None = None) -> Path:
    """Rank 0, after every rank's part is in ``staging``: publish the checkpoint (with each ``extra``
    object as the JSON file it names), then prune old ones."""
    _save_tensor_file(model, staging / "model.pt")
    if reference is not None:
        _save_tensor_file(reference, staging / "reference.pt")
    _save_tensor_file(optimizer, staging / "optimizer.pt")
    _save_tensor_file(scheduler, staging / "scheduler.pt")
    for name, obj in (extra or {}).items():
        write_json_atomic(staging / name, obj)
    write_json_atomic(staging / "state.json", asdict(state))
    _fsync_dir(staging)
    root = checkpoint_root(run_dir)
    final = TrainingRun(run_dir).checkpoint_dir(state.step)
    if final.exists():  # a checkpoint of this step from before a resume: the new one replaces it
        shutil.rmtree(final)
    os.rename(staging, final)
    _fsync_dir(root)
    write_text_atomic(root / "latest", final.name + "\n")
    for old in sorted(root.glob("step-*"))[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return final


@dataclass
class Checkpoint:
    path: Path
    state: TrainState
    model: dict[str, torch.Tensor]
    optimizer: dict[str, Any]
    scheduler: dict[str, Any]
    rng: dict[str, Any] | None
    reference: dict[str, torch.Tensor] | None = None


def load_checkpoint(path: Path, rank: int) -> Checkpoint:
    state = TrainState(**json.loads((path / "state.json").read_text(encoding="utf-8")))

    def load(name: str) -> Any:
        return torch.load(path / name, map_location="cpu", weights_only=False)

    rng_file = path / f"rng-rank{rank}.pt"
    return Checkpoint(path, state, load("model.pt"), load("optimizer.pt"), load("scheduler.pt"),
                      torch.load(rng_file, weights_only=False) if rng_file.exists() else None,
                      load("reference.pt") if (path / "reference.pt").exists() else None)
