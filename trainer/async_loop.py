"""The asynchronous trainer (``rollout.mode: async``): :class:`~envhub.trainer.loop.Trainer`'s step,
its rollouts taken from the buffer of :class:`~envhub.trainer.async_rollouts.AsyncRollouts` while the
producer goes on sampling. What differs from a synchronous step, stage by stage (the rest is the loop's):

2. **rollouts**: the first ``groups_per_step`` finished groups of the buffer (the producer starts with
   the first step), kept in ``RUN/rollouts/step-N/`` as the step's episodes;
3. **audit** as in sync, then the **staleness bound** instead of dynamic sampling (refused with
   async): a sample more than ``max_staleness`` weight versions behind the trainer is dropped and
   counted, or kept for the decoupled importance-sampling correction (``stale_samples``);
6. **weight push**: staged -- the engine loads a copy of the new weights into its own model once its
   requests in flight are done, while this thread trains on -- then admission opens a step further;
7. **record**: the ``async_*`` figures (:data:`~envhub.trainer.async_rollouts.STEP_KEYS`) join the
   step's line of ``steps.jsonl``.

Torch state is never shared between threads: the trained module, its optimizer and the reference are
touched by this thread only; the engine's worker samples from its own copy (made when the engine is
built, ``rollout.share_weights`` notwithstanding) and swaps weights under the engine's lock; the
checkpoint reads the engine's sampler RNG under that lock too; the producer's policy has its own
tokenizer. The producer stops once the last step's batch is taken (or at :meth:`AsyncTrainer.close`).

Not yet (issue #40 steps 2 and 3): ``--resume`` (refused: the buffer and the episodes in flight are not
in the checkpoint), several ranks, an SGLang engine, partial rollouts.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from envhub.rollout.episodes import EpisodePlan
from envhub.trainer import fsdp, sampling
from envhub.trainer.async_rollouts import AsyncRollouts, Taken, mark_stale, step_figures
from envhub.trainer.batch import TrainingSample
from envhub.trainer.checkpoint import TrainingError
from envhub.trainer.config import TrainConfig
from envhub.trainer.loop import Trainer
from envhub.trainer.preflight import PreflightError
from envhub.trainer.telemetry import StepTimer
from envhub.types import TrajectoryRecord


class AsyncTrainer(Trainer):
    """A :class:`~envhub.trainer.loop.Trainer` whose steps train on the rollout buffer's groups. Refused
    before any model loads: ``resume`` and several ranks (not supported yet)."""

    def __init__(self, config: TrainConfig, *, resume: bool = False, dist: fsdp.DistInfo | None = None,
                 log: Callable[[str], None] | None = None) -> None:
        if resume:
            raise TrainingError("--resume of an asynchronous run (rollout.mode: async) is not supported yet: "
                                "its buffered and in-flight groups are not in the checkpoint; start a new run_dir")
        if int(os.environ.get("WORLD_SIZE", "1")) > 1 or (dist is not None and dist.distributed):
            raise PreflightError("rollout.mode async runs in one process only yet: run it without torchrun")
        self.producer: AsyncRollouts | None = None
        self._taken: Taken | None = None
        self._stale: dict[str, float] = {}
        super().__init__(config, resume=False, dist=dist, log=log)

    def rollouts(self, step: int, plans: list[EpisodePlan] | None = None) -> list[TrajectoryRecord]:
        """The step's batch from the buffer (``plans`` are ignored: the producer plans the groups, from
        the data cursor on), kept in ``RUN/rollouts/step-N/``. The producer starts at the first call
        and stops once the last step's batch is taken."""
        if self.producer is None:
            r, order = self.config.rollout, sampling.TaskOrder(
                self.tasks, env_id=self.config.env.id, seed=self.config.seed,
                group_size=self.config.rollout.group_size, dist=self.dist)
            self.producer = AsyncRollouts(
                self.collector, lambda j: order.plans(j, 1), first_group=self.state.cursor,
                groups_per_step=r.groups_per_step, max_staleness=r.max_staleness, buffer_groups=r.buffer_groups,
                engine=self.models.engine).start()
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
        return {**line, **step_figures(self._taken, self._stale, step_seconds=sum(timer.seconds.values()))}

    def stop_rollouts(self) -> None:
        """Stop the producer, saying what it had sampled that no step trains (idempotent)."""
        producer, self.producer = self.producer, None
        if producer is None:
            return
        left = producer.close()
        if any(left.values()):
            self.log(f"async: groups sampled but not trained (the run's steps are done): "
                     f"{left['buffered_groups']} finished in the buffer, {left['running_groups']} in flight")

    def close(self) -> None:
        self.stop_rollouts()
        super().close()
