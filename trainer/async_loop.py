"""The asynchronous trainer (``rollout.mode: async``): :class:`~envhub.trainer.loop.Trainer`'s step,
its rollouts taken from the buffer of :class:`~envhub.trainer.async_rollouts.AsyncRollouts` while the
producer goes on sampling. What differs from a synchronous step, stage by stage (the rest is the loop's):

2. **rollouts**: the first ``groups_per_step`` finished groups of the buffer (the producer starts with
   the first step), kept in ``RUN/rollouts/step-N/`` as the step's episodes;
3. **audit** as in sync, then the **staleness bound** instead of dynamic sampling (refused with
   async): a sample more than ``max_staleness`` weight versions behind the trainer is dropped and
   counted, or kept for the decoupled importance-sampling correction (``stale_samples``);
6. **weight push**: staged -- the engine loads a copy of the new weights into its own model once its
   requests in flight are done, while this thread trains on -- then admission opens a step further. An
   SGLang server (:mod:`envhub.trainer.async_sglang`) is paused (its requests in flight aborted) for the
   load and resumed after it; the aborted requests are sent again and sample on the new weights;
7. **record**: the ``async_*`` figures (:data:`~envhub.trainer.async_rollouts.STEP_KEYS`) join the
   step's line of ``steps.jsonl`` (with SGLang also ``sglang_requests_reissued``: requests the pauses
   aborted since the previous step, each sent again).

Torch state is never shared between threads: the trained module, its optimizer and the reference are
touched by this thread only; the engine's worker samples from its own copy (made when the engine is
built, ``rollout.share_weights`` notwithstanding) and swaps weights under the engine's lock; the
checkpoint reads the engine's sampler RNG under that lock too; the producer's policy has its own
tokenizer. The producer stops once the last step's batch is taken (or at :meth:`AsyncTrainer.close`).

**Resume** (issue #40 step 2, :mod:`envhub.trainer.async_resume`): every finished episode is kept in
``RUN/rollouts/buffer/`` as it finishes, each checkpoint names the buffer's groups and the episodes in
flight (``async.json``), and ``--resume`` puts the first back in the buffer (the staleness bound
applies, drops counted) and reissues the second under the same episode ids; the steps after the
checkpoint are trained again on what the buffer then holds, each once.

With ``engine: sglang:URL`` the first batch is preceded by a push of the trainer's weights under its
version (the server's own start version is not trusted). Not yet (issue #40 step 3): several ranks,
partial rollouts.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from envhub.rollout.episodes import EpisodePlan
from envhub.trainer import async_resume, fsdp, sampling
from envhub.trainer import checkpoint as ckpt
from envhub.trainer.async_rollouts import AsyncRollouts, Taken, mark_stale, step_figures
from envhub.trainer.batch import TrainingSample
from envhub.trainer.config import TrainConfig
from envhub.trainer.loop import Trainer
from envhub.trainer.preflight import PreflightError
from envhub.trainer.telemetry import StepTimer
from envhub.types import TrajectoryRecord


class AsyncTrainer(Trainer):
    """A :class:`~envhub.trainer.loop.Trainer` whose steps train on the rollout buffer's groups. Refused
    before any model loads: several ranks (not supported yet). With ``resume``, the producer takes up
    the latest checkpoint's groups (:func:`~envhub.trainer.async_resume.resume_groups`)."""

    def __init__(self, config: TrainConfig, *, resume: bool = False, dist: fsdp.DistInfo | None = None,
                 log: Callable[[str], None] | None = None) -> None:
        if int(os.environ.get("WORLD_SIZE", "1")) > 1 or (dist is not None and dist.distributed):
            raise PreflightError("rollout.mode async runs in one process only yet: run it without torchrun")
        self.producer: AsyncRollouts | None = None
        self._taken: Taken | None = None
        self._stale: dict[str, float] = {}
        self._stopped: dict[str, Any] | None = None  # the producer's snapshot once it stopped
        self._aborted_seen = 0  # the SGLang engine's aborted (and reissued) requests at the last record
        super().__init__(config, resume=resume, dist=dist, log=log)
        try:
            self.buffer = async_resume.BufferLog(self.files)
            r = config.rollout
            self.resumed = async_resume.resume_groups(
                self.files, ckpt.latest_checkpoint(self.run_dir) if resume else None, step=self.state.step,
                cursor=self.state.cursor, version=int(self.state.weight_version), max_staleness=r.max_staleness,
                drop=r.stale_samples == "drop")
            if self.models.engine.name == "sglang":
                # the server samples the trainer's weights under the trainer's version from the first
                # request on (a fresh run's "0", or a resumed checkpoint's), whatever it was started with
                self.models.publish(self.state.weight_version)
        except BaseException:
            self.close()
            raise
        self._dropped_to_report = len(self.resumed.dropped)
        if resume:
            self.replay.lines.clear()  # a step trained again forms its batch anew: its own times are its own
            self.log(async_resume.resume_line(self.resumed))

    def rollouts(self, step: int, plans: list[EpisodePlan] | None = None) -> list[TrajectoryRecord]:
        """The step's batch from the buffer (``plans`` are ignored: the producer plans the groups), kept in
        ``RUN/rollouts/step-N/``. The producer starts at the first call -- from group 0, or after a resume
        with the checkpoint's groups and then its ``next_group`` on -- and stops once the last step's batch
        is taken."""
        if self.producer is None:
            r, order = self.config.rollout, sampling.TaskOrder(
                self.tasks, env_id=self.config.env.id, seed=self.config.seed,
                group_size=self.config.rollout.group_size, dist=self.dist)
            self.producer = AsyncRollouts(
                self.collector, lambda j: order.plans(j, 1), first_group=self.resumed.next_group,
                groups_per_step=r.groups_per_step, max_staleness=r.max_staleness, buffer_groups=r.buffer_groups,
                engine=self.models.engine, pending=self.resumed.groups, keep=self.buffer.keep).start()
        self._taken = self.producer.take()
        if step >= self.config.steps:
            self.stop_rollouts()
        with self.files.step_rollouts(step).store() as store:
            for record in self._taken.records:
                store.append(record.model_dump(mode="json"))
                self.telemetry.on_episode(record)
        return self._taken.records

    def oversample(self, step: int, records: list[TrajectoryRecord],
                   classes: list[str]) -> tuple[list[TrajectoryRecord], list[str], dict[str, Any]]:
        """The staleness bound at the trainer's version now (before this step's update):
        :func:`~envhub.trainer.async_rollouts.mark_stale`; no dynamic sampling."""
        r, algo = self.config.rollout, self.config.algorithm
        classes, self._stale = mark_stale(records, classes, trainer_version=self.state.weight_version,
                                          max_staleness=r.max_staleness, drop=r.stale_samples == "drop",
                                          excluded=algo.exclude_classes)
        informative = sampling.informative_groups(records, classes, algo)
        return records, classes, {"groups_drawn": r.groups_per_step, "sampling_rounds": 0,
                                  "informative_groups": len(informative), "surplus_groups": 0}

    def push_weights(self, update: dict[str, Any]) -> None:
        """The staged push (when the step updated), then admission opens a step further."""
        super().push_weights(update)
        if self.producer is not None:
            self.producer.trained()

    def record(self, step: int, records: list[TrajectoryRecord], samples: list[TrainingSample],
               stats: dict[str, Any], timer: StepTimer) -> dict[str, Any]:
        line = super().record(step, records, samples, stats, timer)
        assert self._taken is not None
        line = {**line, **step_figures(self._taken, self._stale, step_seconds=sum(timer.seconds.values()))}
        aborted = getattr(self.models.engine, "aborted_requests", None)
        if aborted is not None:  # SGLang: requests a push's pause aborted since the last step, each sent again
            line["sglang_requests_reissued"], self._aborted_seen = aborted - self._aborted_seen, aborted
        if self._dropped_to_report:  # the first step after a resume that dropped stale groups
            line["async_resume_dropped_groups"], self._dropped_to_report = self._dropped_to_report, 0
        return line

    def save_checkpoint(self) -> None:
        """The checkpoint, with the producer's state as ``async.json`` (taken between steps: no batch is
        taken and untrained); before the producer starts, the groups it will take up."""
        snapshot = (self.producer.snapshot() if self.producer is not None
                    else self._stopped or self.resumed.snapshot())
        ckpt.save(self.run_dir, self.state, self.models, self.dist, keep=self.config.keep_checkpoints,
                  extra={async_resume.ASYNC_FILE: snapshot})

    def stop_rollouts(self) -> None:
        """Stop the producer, saying what it had sampled that no step trains (idempotent)."""
        producer, self.producer = self.producer, None
        if producer is None:
            return
        left = producer.close()
        self._stopped = producer.snapshot()
        if any(left.values()):
            self.log(f"async: groups sampled but not trained (the run's steps are done): "
                     f"{left['buffered_groups']} finished in the buffer, {left['running_groups']} in flight")

    def close(self) -> None:
        self.stop_rollouts()
        super().close()
        if hasattr(self, "buffer"):
            self.buffer.close()
