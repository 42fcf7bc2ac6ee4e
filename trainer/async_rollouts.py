"""Asynchronous rollouts (``rollout.mode: async``): rollout workers keep producing whole groups while
the trainer trains, through a bounded buffer (:class:`AsyncRollouts`), and the staleness of what the
trainer takes from it (:func:`mark_stale`, :func:`step_figures`).

**Threads.** A producer thread drives the episode collector
(:class:`~envhub.rollout.collect.EpisodeCollector`, whose worker threads run the episodes) over an
endless stream of groups: group ``j`` is the ``j``-th of the task order, planned as a synchronous run
plans it. A group whose episodes have all finished goes into the buffer, oldest first; the
trainer's thread takes the first ``groups_per_step`` of it for a step (:meth:`AsyncRollouts.take`),
waiting while fewer are there. One condition variable guards the buffer and the counters; the
records crossing it are plain pydantic objects, never torch state.

**Admission** (SkyRL's rule): a group starts only while the groups started stay within
``(max_staleness + t + 1) * groups_per_step``, ``t`` the steps trained since the producer started, and
fewer than ``buffer_groups`` groups are running or waiting in the buffer. A group that finishes in
the order it started is then at most ``max_staleness`` weight versions behind when it is trained; one
overtaken by later groups (a slow episode) can be more, so the bound is enforced again when the batch
is formed: :func:`mark_stale` drops such samples (counted) or leaves them to the importance-sampling
correction.

**Weights.** The in-process engine samples from its own copy of the model, never the module being
trained: the trainer's push (:class:`~envhub.trainer.weight_sync.InProcessSync`, ``staged``) hands the
engine CPU clones of the new weights, which its worker loads into the copy once the requests in flight
have finished (:meth:`~envhub.adapters.engines.TransformersEngine.stage_weights`). Every turn is thus
sampled under the one version it records, and the mismatch correction uses each turn's own logprobs.

**Resume** (:mod:`envhub.trainer.async_resume`): every finished episode is handed to ``keep`` (the run
directory's buffer) before it counts as finished, and :meth:`AsyncRollouts.snapshot` names, under the
buffer's lock, the groups started and not taken (finished or not, with the episodes finished so far)
and the next group of the task order; a producer built with ``pending`` (a snapshot's groups, read
back) puts the finished ones in the buffer and runs the others first, only their unfinished episodes,
under the same episode ids.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from envhub.rollout.collect import EpisodeCollector
from envhub.rollout.episodes import EpisodePlan
from envhub.trainer.checkpoint import TrainingError
from envhub.trainer.samples import AUDIT_FAILED, STALE
from envhub.types import TrajectoryRecord

#: How often a waiting side looks again at a stop or a failure (seconds).
POLL_S = 0.2

#: The keys each async step adds to its line of ``steps.jsonl`` (:func:`step_figures`).
STEP_KEYS = ("async_queue_groups", "async_buffer_wait_s_mean", "async_buffer_wait_s_max",
             "async_version_lag_mean", "async_version_lag_max", "async_versions_spanned_mean",
             "async_trainer_idle_ratio", "async_rollout_idle_ratio", "async_stale_dropped",
             "async_stale_reweighted")
#: what the loop adds to a step's line: always the groups a resume dropped (0 but at the first step
#: after it), and with an engine paused at pushes (SGLang) the requests it sent again
LOOP_KEYS = ("async_resume_dropped_groups", "sglang_requests_reissued")


class RolloutsFailed(TrainingError):
    """The producer thread stopped: an error of its own, not an episode's (those are outcomes)."""


@dataclass
class Taken:
    """A batch as :meth:`AsyncRollouts.take` hands it over, with what the buffer says about it."""

    records: list[TrajectoryRecord]
    wait_s: float  # how long the trainer waited for it
    queue_groups: int  # finished groups left in the buffer
    rollout_idle_s: float  # admission closed with a worker free, and the engine's weight swaps
    interval_s: float  # since the previous take (or the start)
    buffer_waits: list[float] = field(default_factory=list)  # per record: seconds since it finished
    entries: list[str] = field(default_factory=list)  # the buffer entries of its episodes


@dataclass
class Group:
    """Group ``index`` of the task order: its planned episodes, those finished so far, and where each
    finished one is kept (``entries``: episode id -> the key ``keep`` returned)."""

    index: int
    episode_ids: list[str]
    finished: dict[str, TrajectoryRecord] = field(default_factory=dict)
    entries: dict[str, str] = field(default_factory=dict)

    @property
    def done(self) -> bool:
        return len(self.finished) == len(self.episode_ids)

    def records(self) -> list[TrajectoryRecord]:
        return sorted(self.finished.values(), key=lambda r: r.sample_index)

    def dump(self) -> dict[str, Any]:
        return {"index": self.index, "episodes": list(self.episode_ids), "finished": dict(self.entries)}


class AsyncRollouts:
    """Groups ``first_group``, ``first_group + 1``, ... (``plan_group(j)``: the episodes of group ``j``)
    run on ``collector`` under the admission rule of the module docstring. :meth:`start` starts the
    producer, :meth:`take` hands the trainer a batch, :meth:`trained` says a step is done,
    :meth:`close` stops it. ``engine``: its ``swap_wait_s`` counts as rollout idle time. ``pending``:
    groups of a checkpoint (see the module docstring); ``keep(record)``: called on the producer's thread
    with each finished episode before it counts as finished, returns the key it is kept under."""

    def __init__(self, collector: EpisodeCollector, plan_group: Callable[[int], list[EpisodePlan]], *,
                 first_group: int, groups_per_step: int, max_staleness: int, buffer_groups: int | None = None,
                 engine: Any = None, pending: Sequence[Group] = (),
                 keep: Callable[[TrajectoryRecord], str] | None = None) -> None:
        self.collector, self.plan_group, self.engine = collector, plan_group, engine
        self.batch, self.max_staleness = groups_per_step, max_staleness
        self.capacity = buffer_groups or (max_staleness + 1) * groups_per_step
        self._next = first_group
        self._cond = threading.Condition()
        self._started = self._taken = self._trained = 0  # groups started and taken, steps trained
        self.keep = keep
        self._running: dict[str, Group] = {}  # by group id
        self._ready: deque[Group] = deque(g for g in pending if g.done)  # finished groups, oldest first
        self._queue: deque[Group] = deque(g for g in pending if not g.done)  # to run before group _next
        self._started = len(self._ready)
        self._error: BaseException | None = None
        self._idle_s, self._gate_since = 0.0, None  # admission closed: seconds so far, and since when
        self._since = time.monotonic()
        self._swap_s = self._engine_swap_s()
        self._closed = threading.Event()
        self._left: dict[str, int] | None = None
        self._thread = threading.Thread(target=self._produce, name="envhub-async-rollouts", daemon=True)

    def start(self) -> AsyncRollouts:
        self._thread.start()
        return self

    # ---- the producer's side (its thread, and the collector's worker threads) ------------------

    def _produce(self) -> None:
        try:
            for record in self.collector.run(self._admitted(), abandon=self._closed):
                entry = self.keep(record) if self.keep is not None else record.episode_id
                with self._cond:
                    group = self._running[record.group_id]
                    group.finished[record.episode_id], group.entries[record.episode_id] = record, entry
                    if group.done:
                        del self._running[record.group_id]
                        self._ready.append(group)
                        self._cond.notify_all()
        except BaseException as exc:  # handed to the trainer's thread, which raises it from take()
            with self._cond:
                self._error = exc
                self._cond.notify_all()

    def _admitted(self) -> Iterator[EpisodePlan]:
        """The episodes to run, group by group, each group once admission allows it (pulled by the
        collector's worker threads, one at a time)."""
        while self._wait_for_admission():
            with self._cond:  # planned and registered at once: a snapshot never misses a started group
                if self._queue:
                    group = self._queue[0]
                    plans = [p for p in self.plan_group(group.index) if p.episode_id not in group.finished]
                    self._queue.popleft()
                else:
                    plans = self.plan_group(self._next)
                    group = Group(self._next, [p.episode_id for p in plans])
                    self._next += 1
                self._started += 1
                self._running[plans[0].group_id] = group
            yield from plans

    def _admissible(self) -> bool:
        return (self._started < (self.max_staleness + self._trained + 1) * self.batch
                and self._started - self._taken < self.capacity)

    def _wait_for_admission(self) -> bool:
        """Until a group may start (False: the producer is closing); the wait is rollout idle time."""
        with self._cond:
            if not self._admissible():
                self._gate_since = time.monotonic()
                while not self._admissible() and not self._closed.is_set():
                    self._cond.wait(POLL_S)
                self._idle_s += time.monotonic() - self._gate_since
                self._gate_since = None
            return not self._closed.is_set()

    def _engine_swap_s(self) -> float:
        return float(getattr(self.engine, "swap_wait_s", 0.0))

    # ---- the trainer's side ----------------------------------------------------------------------

    def take(self) -> Taken:
        """The first ``groups_per_step`` finished groups of the buffer (oldest first, each in sample
        order), once there are that many. :class:`RolloutsFailed` when the producer has stopped."""
        t0 = time.monotonic()
        with self._cond:
            while len(self._ready) < self.batch:
                if self._error is not None:
                    raise RolloutsFailed(f"the rollout producer failed: {self._error!r}") from self._error
                if self._closed.is_set() or not self._thread.is_alive():
                    raise RolloutsFailed("the rollout producer is not running")
                self._cond.wait(POLL_S)
            whole = [self._ready.popleft() for _ in range(self.batch)]
            groups = [g.records() for g in whole]
            self._taken += self.batch
            now, wall = time.monotonic(), time.time()
            idle = self._idle_s
            if self._gate_since is not None:  # closed right now: count it up to here
                idle, self._gate_since = idle + now - self._gate_since, now
            swap = self._engine_swap_s()
            taken = Taken([r for g in groups for r in g], wait_s=now - t0, queue_groups=len(self._ready),
                          rollout_idle_s=idle + swap - self._swap_s, interval_s=now - self._since,
                          entries=[e for g in whole for e in g.entries.values()])
            self._idle_s, self._since, self._swap_s = 0.0, now, swap
            self._cond.notify_all()
        taken.buffer_waits = [wall - r.metrics.finished_at for r in taken.records
                              if r.metrics.finished_at is not None]
        return taken

    def counts(self) -> dict[str, int]:
        """Groups ``started``, ``taken`` by the trainer and ``ready`` in the buffer; steps ``trained``."""
        with self._cond:
            return {"started": self._started, "taken": self._taken, "ready": len(self._ready),
                    "trained": self._trained}

    def snapshot(self) -> dict[str, Any]:
        """What a checkpoint keeps of the producer (``async.json``): ``next_group``, the next group of
        the task order to plan, and ``groups``, every group started (or to run first) and not taken, by
        index, as :meth:`Group.dump` -- finished in the buffer, running, or queued. After :meth:`close`,
        the state it stopped in (episodes abandoned in flight count as unfinished)."""
        with self._cond:
            groups = sorted([*self._ready, *self._running.values(), *self._queue], key=lambda g: g.index)
            return {"next_group": self._next, "groups": [g.dump() for g in groups]}

    def trained(self) -> None:
        """The trainer is done with a step (its weights pushed): admission opens a step further."""
        with self._cond:
            self._trained += 1
            self._cond.notify_all()

    def close(self) -> dict[str, int]:
        """Stop admitting; what was not trained is dropped -- the finished groups of the buffer, and the
        episodes in flight (they end in the collector's threads; its ``close`` waits for them). Returns
        those counts (``buffered_groups``, ``running_groups``); idempotent. :meth:`snapshot` still
        names them (a resume with more steps takes them up)."""
        self._closed.set()
        with self._cond:
            self._cond.notify_all()
        if self._thread.ident is not None:
            self._thread.join(timeout=30)
        with self._cond:
            if self._left is None:
                self._left = {"buffered_groups": len(self._ready),
                              "running_groups": self._started - self._taken - len(self._ready)}
            return self._left


# ---- the staleness of a batch -------------------------------------------------------------------

def turn_versions(record: TrajectoryRecord) -> tuple[int, int] | None:
    """The weight versions of the record's first and last sampled turn (None: it has none)."""
    versions = [int(v) for v in record.versions.weight_versions if v is not None]
    return (versions[0], versions[-1]) if versions else None


def lag_spans(records: Sequence[TrajectoryRecord], trainer_version: str) -> list[tuple[int, int] | None]:
    """Per record, its version lag (``trainer_version`` minus its first turn's version) and the versions
    it spanned (last turn's minus first's); None for a record without a sampled turn."""
    return [None if (seen := turn_versions(r)) is None else (int(trainer_version) - seen[0], seen[1] - seen[0])
            for r in records]


def mark_stale(records: Sequence[TrajectoryRecord], classes: Sequence[str], *, trainer_version: str,
               max_staleness: int, drop: bool,
               excluded: Sequence[str]) -> tuple[list[str], dict[str, float]]:
    """Per sample, its version lag and the versions it spanned (:func:`lag_spans`). A sample lagging
    more than ``max_staleness`` that would otherwise be trained (class not in ``excluded``, audit
    passed) is stale: with ``drop`` its class becomes :data:`~envhub.trainer.samples.STALE` (never
    trained), otherwise it is kept for the importance-sampling correction. Returns the classes and the
    figures (:func:`stale_figures`)."""
    out, stale = list(classes), 0
    skip = {*excluded, AUDIT_FAILED}
    pairs = lag_spans(records, trainer_version)
    for i, pair in enumerate(pairs):
        if pair is not None and pair[0] > max_staleness and out[i] not in skip:
            stale += 1
            out[i] = STALE if drop else out[i]
    return out, stale_figures([p for p in pairs if p is not None], stale, drop=drop)


def stale_figures(pairs: Sequence[tuple[int, int]], stale: int, *, drop: bool) -> dict[str, float]:
    """The staleness figures of a batch: lag and span (``pairs``, :func:`lag_spans`) over every sample
    with a sampled turn, before any drop; the ``stale`` samples counted as dropped or reweighted."""
    lags, spans = [p[0] for p in pairs], [p[1] for p in pairs]
    return {"async_version_lag_mean": _mean(lags), "async_version_lag_max": max(lags, default=0),
            "async_versions_spanned_mean": _mean(spans),
            "async_stale_dropped": stale if drop else 0, "async_stale_reweighted": 0 if drop else stale}


def step_figures(taken: Taken, stale: dict[str, float], *, step_seconds: float) -> dict[str, float]:
    """The :data:`STEP_KEYS` of a step: the buffer's figures of its batch, its staleness figures
    (:func:`mark_stale`), the trainer idle ratio (seconds waiting for the batch over the step's seconds)
    and the rollout idle ratio (seconds admission kept a free worker waiting, plus the engine's weight
    swaps, over the seconds since the previous batch; at most 1)."""
    return {"async_queue_groups": taken.queue_groups,
            "async_buffer_wait_s_mean": _mean(taken.buffer_waits),
            "async_buffer_wait_s_max": max(taken.buffer_waits, default=0.0),
            **stale,
            "async_trainer_idle_ratio": min(1.0, taken.wait_s / max(step_seconds, 1e-9)),
            "async_rollout_idle_ratio": min(1.0, taken.rollout_idle_s / max(taken.interval_s, 1e-9))}


def _mean(values: Sequence[float]) -> float:
    return statistics.fmean(values) if values else 0.0
