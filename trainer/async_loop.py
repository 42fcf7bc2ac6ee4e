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

**Several ranks** (``torchrun``, issue #40 step 3): one buffer and one admission per run, not per
rank. Rank 0 alone runs the producer -- its engine samples every group, its admission counts the
run's groups, it alone appends to ``RUN/rollouts/buffer/`` and writes ``async.json`` -- and at each step
takes the batch of whole groups and scatters it (``scatter_object_list``): the ``k``-th group of the
batch goes to rank ``k % world_size``, as a synchronous step splits its groups. Each rank keeps its
share in ``RUN/rollouts/step-N/trajectories.rankR.jsonl`` and trains on it (FSDP2 sums the gradients
over ranks, every rank on the same step's batch), the staleness figures and the informative groups
are summed over ranks, and the weights are pushed once a step by every rank (rank 0's engine is the
one sampling; the other ranks' engines sit idle). A failure of rank 0's producer, or of its resume,
reaches every rank as an error instead of a hang.

With ``engine: sglang:URL`` the first batch is preceded by a push of the trainer's weights under its
version (the server's own start version is not trusted). Not yet (issue #40 step 3): partial rollouts.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from torch import distributed as torch_dist

from envhub.rollout.episodes import EpisodePlan
from envhub.trainer import async_resume, fsdp, sampling
from envhub.trainer import checkpoint as ckpt
from envhub.trainer.async_rollouts import (
    AsyncRollouts,
    RolloutsFailed,
    Taken,
    lag_spans,
    mark_stale,
    stale_figures,
    step_figures,
)
from envhub.trainer.batch import TrainingSample
from envhub.trainer.checkpoint import TrainingError
from envhub.trainer.config import TrainConfig
from envhub.trainer.loop import Trainer
from envhub.trainer.telemetry import StepTimer
from envhub.types import TrajectoryRecord


class AsyncTrainer(Trainer):
    """A :class:`~envhub.trainer.loop.Trainer` whose steps train on the rollout buffer's groups. With
    ``resume``, the producer takes up the latest checkpoint's groups
    (:func:`~envhub.trainer.async_resume.resume_groups`). Under several ranks, rank 0 owns the producer,
    the buffer and its files (see the module docstring); the other ranks hold none of them."""

    def __init__(self, config: TrainConfig, *, resume: bool = False, dist: fsdp.DistInfo | None = None,
                 log: Callable[[str], None] | None = None) -> None:
        self.producer: AsyncRollouts | None = None
        self.buffer: async_resume.BufferLog | None = None  # rank 0's
        self.resumed: async_resume.Resumed | None = None  # rank 0's
        self._taken: Taken | None = None
        self._taken_entries: list[tuple[int, list[str]]] = []  # rank 0's: (step, its batch's buffer entries)
        self._stale: dict[str, float] = {}
        self._stopped: dict[str, Any] | None = None  # the producer's snapshot once it stopped
        self._aborted_seen = 0  # the SGLang engine's aborted (and reissued) requests at the last record
        super().__init__(config, resume=resume, dist=dist, log=log)
        failed: BaseException | None = None
        try:
            if self.dist.is_main:  # one buffer per run: only rank 0 reads or writes its files
                self.buffer = async_resume.BufferLog(self.files)
                r = config.rollout
                self.resumed = async_resume.resume_groups(
                    self.files, ckpt.latest_checkpoint(self.run_dir) if resume else None, step=self.state.step,
                    cursor=self.state.cursor, version=int(self.state.weight_version),
                    max_staleness=r.max_staleness, drop=r.stale_samples == "drop")
        except BaseException as exc:
            failed = exc
        try:
            self._agree(failed, "could not take up the rollout buffer")
            if self.models.engine.name == "sglang":
                # the server samples the trainer's weights under the trainer's version from the first
                # request on (a fresh run's "0", or a resumed checkpoint's), whatever it was started with
                self.models.publish(self.state.weight_version)
        except BaseException:
            self.close()
            raise
        self._dropped_to_report = len(self.resumed.dropped) if self.resumed is not None else 0
        if resume:
            self.replay.lines.clear()  # a step trained again forms its batch anew: its own times are its own
            if self.resumed is not None:
                self.log(async_resume.resume_line(self.resumed))

    def _agree(self, failed: BaseException | None, what: str) -> None:
        """Raise ``failed`` (rank 0's error) here, and on every other rank a TrainingError saying it (a
        collective when distributed): no rank waits on a rank 0 that stopped."""
        if self.dist.distributed:
            said = [repr(failed) if failed is not None else None]
            torch_dist.broadcast_object_list(said, src=0)
            if failed is None and said[0] is not None:
                raise TrainingError(f"rank 0 {what}: {said[0]}")
        if failed is not None:
            raise failed

    def rollouts(self, step: int, plans: list[EpisodePlan] | None = None) -> list[TrajectoryRecord]:
        """This rank's share of the step's batch from the buffer (``plans`` are ignored: the producer
        plans the groups; one process: the whole batch), kept in ``RUN/rollouts/step-N/`` (under several
        ranks, each rank's share in its ``trajectories.rankR.jsonl``). The producer starts at the first
        call -- from group 0, or after a resume with the checkpoint's groups and then its ``next_group``
        on -- and stops once the last step's batch is taken."""
        records = self._take(step)
        rank = self.dist.rank if self.dist.world_size > 1 else None  # as a synchronous step names it
        with self.files.step_rollouts(step, rank=rank).store() as store:
            for record in records:
                store.append(record.model_dump(mode="json"))
                self.telemetry.on_episode(record)
        return records

    def _take(self, step: int) -> list[TrajectoryRecord]:
        """Rank 0 takes the batch from its producer (started at the first call); under several ranks it
        scatters the batch's groups (:func:`split_groups`) and each rank gets its share, or rank 0's
        producer's failure."""
        failed: BaseException | None = None
        if self.dist.is_main:
            try:
                if self.producer is None:
                    self.producer = self._start_producer()
                self._taken = self.producer.take()
                self._taken_entries.append((step, self._taken.entries))
                if step >= self.config.steps:
                    self.stop_rollouts()
            except BaseException as exc:
                failed = exc
        if not self.dist.distributed:
            if failed is not None:
                raise failed
            assert self._taken is not None
            return self._taken.records
        shares: list[Any] | None = None
        if self.dist.is_main:
            if failed is not None:
                shares = [("failed", repr(failed))] * self.dist.world_size
            else:
                assert self._taken is not None
                shares = [("ok", dataclasses.replace(self._taken, records=part))
                          for part in split_groups(self._taken.records, self.dist.world_size)]
        received: list[Any] = [None]
        torch_dist.scatter_object_list(received, shares, src=0)
        if failed is not None:
            raise failed
        kind, payload = received[0]
        if kind == "failed":
            raise RolloutsFailed(f"rank 0's rollout producer failed: {payload}")
        if not self.dist.is_main:
            self._taken = payload  # rank 0's figures of the batch, with this rank's records
        records: list[TrajectoryRecord] = payload.records
        return records

    def _start_producer(self) -> AsyncRollouts:
        """Rank 0's producer over every group of the run (its task order plans as one process: group
        ``j`` is whole, whichever rank trains it)."""
        assert self.resumed is not None and self.buffer is not None
        r = self.config.rollout
        order = sampling.TaskOrder(self.tasks, env_id=self.config.env.id, seed=self.config.seed,
                                   group_size=r.group_size, dist=fsdp.DistInfo(0, 1, 0, self.dist.device, None))
        return AsyncRollouts(
            self.collector, lambda j: order.plans(j, 1), first_group=self.resumed.next_group,
            groups_per_step=r.groups_per_step, max_staleness=r.max_staleness, buffer_groups=r.buffer_groups,
            engine=self.models.engine, pending=self.resumed.groups, keep=self.buffer.keep).start()

    def oversample(self, step: int, records: list[TrajectoryRecord], classes: list[str],
                   progress: Any = None) -> tuple[list[TrajectoryRecord], list[str], dict[str, Any]]:
        """The staleness bound at the trainer's version now (before this step's update):
        :func:`~envhub.trainer.async_rollouts.mark_stale` on this rank's share, its figures and the
        informative groups over the whole batch (every rank's); no dynamic sampling."""
        r, algo = self.config.rollout, self.config.algorithm
        drop, version = r.stale_samples == "drop", self.state.weight_version
        classes, self._stale = mark_stale(records, classes, trainer_version=version,
                                          max_staleness=r.max_staleness, drop=drop, excluded=algo.exclude_classes)
        informative = len(sampling.informative_groups(records, classes, algo))
        if self.dist.distributed:
            pairs = fsdp.all_gather_lists([p for p in lag_spans(records, version) if p is not None], self.dist)
            summed = fsdp.all_reduce_sum({"informative": informative, "stale": self._stale["async_stale_dropped"]
                                          + self._stale["async_stale_reweighted"]}, self.dist)
            self._stale = stale_figures([tuple(p) for p in pairs], int(summed["stale"]), drop=drop)
            informative = int(summed["informative"])
        return records, classes, {"groups_drawn": r.groups_per_step, "sampling_rounds": 0,
                                  "informative_groups": informative, "surplus_groups": 0}

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
        # the first step after a resume that dropped stale groups says how many; every other step 0
        line["async_resume_dropped_groups"], self._dropped_to_report = self._dropped_to_report, 0
        return line

    def save_checkpoint(self) -> None:
        """The checkpoint, with the producer's state as ``async.json`` (taken between steps: no batch is
        taken and untrained); before the producer starts, the groups it will take up. Rank 0's: the other
        ranks hold no producer (and rank 0 alone writes the checkpoint's files)."""
        extra = None
        if self.dist.is_main:
            assert self.resumed is not None
            snapshot = (self.producer.snapshot() if self.producer is not None
                        else self._stopped or self.resumed.snapshot())
            extra = {async_resume.ASYNC_FILE: snapshot}
        ckpt.save(self.run_dir, self.state, self.models, self.dist, keep=self.config.keep_checkpoints, extra=extra)
        if self.buffer is not None:
            async_resume.compact_buffer(self.files, self.buffer, self._taken_entries)

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
        if getattr(self, "buffer", None) is not None:
            self.buffer.close()


def split_groups(records: list[TrajectoryRecord], world_size: int) -> list[list[TrajectoryRecord]]:
    """A batch's records (whole groups, each group's records together) as ``world_size`` shares: the
    ``k``-th group of the batch to share ``k % world_size``, as a synchronous step splits its groups
    (whole groups: advantages are per group)."""
    groups: dict[str, list[TrajectoryRecord]] = {}
    for record in records:
        groups.setdefault(record.group_id, []).append(record)
    shares: list[list[TrajectoryRecord]] = [[] for _ in range(world_size)]
    for k, group in enumerate(groups.values()):
        shares[k % world_size] += group
    return shares
