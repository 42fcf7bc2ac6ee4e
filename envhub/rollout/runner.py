"""The rollout runner: plan episodes, run them on an :class:`~envhub.rollout.collect.EpisodeCollector`,
store their records in a run directory (:class:`~envhub.run_dir.Run`), report. The collector
is in process by default; another with the same interface (:class:`RolloutCollector`, e.g.
:class:`envhub.rollout.ray_backend.RayCollector`) can be passed instead.

Episode ids are derived from (env, seed, group, task, sample), so a rerun with the same
arguments plans the same ids and skips every episode already on disk. An exception inside one
episode becomes that episode's ``env_error`` record, with the traceback; it never stops the run.
Output that cannot be written (a full disk) does: the records on disk stay whole, report.json
covers them, and :class:`RolloutOutputError` says so. Ctrl-C stops the run: what finished is on
disk, the episodes in flight end at once and are not kept.

``EpisodePlan``, ``plan_episodes`` and ``run_episode`` live in :mod:`envhub.rollout.episodes`; they are
importable from here too.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from envhub.episode import EpisodeEnv
from envhub.policies import Policy
from envhub.registry import make
from envhub.rollout.collect import (
    EpisodeCollector,
    check_concurrency,
    interruptible_run,
)
from envhub.rollout.episodes import (
    EpisodePlan,
    crash_detail,
    describe_policy,
    infra_record,
    plan_episodes,
    run_episode,
)
from envhub.rollout.summary import summarize
from envhub.run_dir import Run
from envhub.store import StoreWriteError
from envhub.types import TrajectoryRecord


@dataclass
class RolloutResult:
    report: dict[str, Any]
    trajectories: Path
    skipped: int


class RolloutCollector(Protocol):
    """What runs the episodes of :func:`run_rollouts`: :class:`~envhub.rollout.collect.EpisodeCollector`'s
    interface. ``run`` yields one record per plan in completion order and never raises for an
    episode's failure; ``close`` is idempotent. A collector may also have ``report_fields() ->
    dict``, whose items :func:`run_rollouts` adds to report.json."""

    policy_info: dict[str, Any]

    def run(self, plans: Sequence[EpisodePlan], *, stop: threading.Event | None = None,
            abandon: threading.Event | None = None) -> Iterator[TrajectoryRecord]: ...

    def close(self) -> None: ...


class RolloutOutputError(RuntimeError):
    """The run could not write its output (a full disk, a file-size limit, an I/O error). The
    message says what failed, what is on disk (always whole records) and whether report.json
    covers it; rerunning the same command resumes once the cause is fixed."""


#: Space held in ``--out`` while records are written; given up for report.json, so that a run
#: that fills the disk still leaves a report of the episodes it kept.
REPORT_RESERVE_BYTES = 16 * 1024
RESERVE_NAME = ".envhub-reserve"


def run_rollouts(
    env_id: str,
    policy: Policy | None,
    *,
    out_dir: str | Path,
    episodes: int,
    group_size: int = 1,
    seed: int = 0,
    concurrency: int = 4,
    split: str = "train",
    env_kwargs: dict[str, Any] | None = None,
    env_factory: Callable[[], EpisodeEnv] | None = None,
    on_episode: Callable[[TrajectoryRecord], None] | None = None,
    collector: RolloutCollector | None = None,
    on_interrupt: Callable[[], object] | None = None,
) -> RolloutResult:
    """Run (or resume) a rollout into ``out_dir``; returns the report over all planned episodes.

    Bad arguments raise ValueError before any episode runs. When the output cannot be written
    (say the disk fills), no further episode starts, the records already written stay whole,
    report.json covers them (marked ``incomplete``) and :class:`RolloutOutputError` is raised.

    ``collector`` runs the episodes instead of an in-process
    :class:`~envhub.rollout.collect.EpisodeCollector` (``policy`` may then be None: the collector's
    ``policy_info`` describes it); it is closed when the run ends, however it ends. The planned
    episodes come from ``env_factory`` (or ``env_id``, ``split``, ``env_kwargs``) here as always.

    Ctrl-C (or a signal the command maps to it: :func:`envhub.sandboxes.cleanup.signals_interrupt`)
    stops the run: no further episode starts, ``on_interrupt()`` is called at once -- every record
    kept is on disk by then -- the episodes in flight end and are not kept, and
    :class:`~envhub.sandboxes.cleanup.SignalInterrupt` (a ``KeyboardInterrupt``) is raised.
    """
    if collector is None:
        return _run_rollouts(env_id, policy, out_dir, episodes, group_size, seed, concurrency, split,
                             env_kwargs, env_factory, on_episode, None, on_interrupt)
    with contextlib.closing(collector):
        return _run_rollouts(env_id, policy, out_dir, episodes, group_size, seed, concurrency, split,
                             env_kwargs, env_factory, on_episode, collector, on_interrupt)


def _run_rollouts(env_id: str, policy: Policy | None, out_dir: str | Path, episodes: int, group_size: int,
                  seed: int, concurrency: int, split: str, env_kwargs: dict[str, Any] | None,
                  env_factory: Callable[[], EpisodeEnv] | None, on_episode: Callable[[TrajectoryRecord], None] | None,
                  given: RolloutCollector | None, on_interrupt: Callable[[], object] | None) -> RolloutResult:
    check_concurrency(concurrency)
    if given is None and policy is None:
        raise ValueError("run_rollouts needs a policy, or a collector that brings its own")
    run = Run(out_dir)
    out = run.path
    run.ensure_writable()
    factory = env_factory or (lambda: make(env_id, split=split, **(env_kwargs or {})))
    probe = factory()
    try:
        plans = plan_episodes(env_id, probe.tasks.task_ids(probe.split), episodes=episodes,
                              group_size=group_size, seed=seed)
        judges = probe.judge_pins() if hasattr(probe, "judge_pins") else {}
    finally:
        probe.close()
    policy_info = given.policy_info if given is not None else describe_policy(policy)  # type: ignore[arg-type]
    path = run.trajectories_path
    try:
        identity = {"env_id": env_id, "split": split, "policy": policy_info, "group_size": group_size,
                    "env_kwargs": {k: v for k, v in (env_kwargs or {}).items() if k != "sandbox"}}
        run.claim({**identity, "judges": judges} if judges else identity)
        reserve = _hold_reserve(out)
    except OSError as exc:
        raise RolloutOutputError(f"cannot write to {exc.filename or out}: {exc.strerror or exc}; "
                                 "no episode was run") from None

    planned = {p.episode_id: p for p in plans}

    def keep(record: TrajectoryRecord) -> None:
        """Tell ``on_episode``, then store the record. Whatever fails here fails this episode only:
        it is stored as an ``env_error`` record with the traceback, and the run goes on."""
        try:
            if on_episode is not None:
                on_episode(record)
            data = record.model_dump(mode="json")
        except Exception as exc:
            what = "the on_episode callback or serializing the record failed"
            data = infra_record(planned[record.episode_id], policy_info, crash_detail(exc, what), env_id=record.env_id,
                                versions=record.versions.model_copy(update={"weight_versions": []}),
                                wall=record.metrics.wall_seconds).model_dump(mode="json")
        store.append(data)

    t0 = time.monotonic()
    failed: StoreWriteError | None = None
    unwritten = 0  # episodes that finished after writing failed
    no_more = threading.Event()  # set when writing failed: the queue is dropped, episodes in flight end
    try:
        collector = given if given is not None else EpisodeCollector(
            factory, policy, concurrency=concurrency, policy_info=policy_info, env_id=env_id)  # type: ignore[arg-type]
        # the interrupt's block is outermost: the stop lasts until the collector has closed
        with interruptible_run(on_interrupt) as interrupt, run.store() as store, contextlib.closing(collector):
            todo = [p for p in plans if p.episode_id not in store.keys]
            for record in collector.run(todo, stop=no_more, abandon=interrupt.requested):
                if failed is None:
                    try:
                        keep(record)
                        continue
                    except StoreWriteError as exc:
                        failed = exc
                        no_more.set()
                unwritten += 1
            # Ctrl-C: what finished is on disk; the queue is dropped, episodes in flight end now
            interrupt.stop_if_requested()
    finally:  # the collector has waited for the episodes in flight and closed its envs
        _release_reserve(reserve)
    records = [r for r in run.records() if r.episode_id in planned]
    report = summarize(records, wall_seconds=time.monotonic() - t0)
    report.update({"env_id": env_id, "policy": policy_info.get("policy", ""), "planned": len(plans),
                   "skipped_already_done": len(plans) - len(todo), "seed": seed, "group_size": group_size})
    report_fields = getattr(collector, "report_fields", None)
    if report_fields is not None:
        report.update(report_fields())
    if failed is not None:
        report["incomplete"] = {"error": f"writing {path} failed: {failed.strerror}",
                                "not_written": unwritten, "not_run": len(plans) - len(records) - unwritten}
    try:
        run.write_report(report)
        report_note = "report.json covers them"
    except OSError as exc:
        if failed is None:
            raise RolloutOutputError(f"all {len(records)} episodes are in {path}, but {run.report_path} "
                                     f"could not be written: {exc.strerror or exc}") from None
        report_note = f"report.json could not be written either ({exc.strerror or exc})"
    if failed is not None:
        raise RolloutOutputError(
            f"writing {path} failed: {failed.strerror}. {len(records)} of {len(plans)} episodes are on disk, "
            f"each whole ({unwritten} finished but could not be written, {report['incomplete']['not_run']} "
            f"were not run); {report_note}. Free space and rerun the same command to resume.")
    return RolloutResult(report=report, trajectories=path, skipped=len(plans) - len(todo))


def _hold_reserve(out: Path) -> Path:
    """Claim :data:`REPORT_RESERVE_BYTES` of real disk blocks in ``out`` (random bytes, so that no
    compressing file system makes them free); OSError when even that does not fit."""
    path = out / RESERVE_NAME
    try:
        with open(path, "wb") as fh:
            fh.write(os.urandom(REPORT_RESERVE_BYTES))
            fh.flush()
            os.fsync(fh.fileno())
    except OSError:
        path.unlink(missing_ok=True)
        raise
    return path


def _release_reserve(path: Path) -> None:
    with contextlib.suppress(OSError):
        path.unlink(missing_ok=True)


__all__ = ["EpisodePlan", "RolloutCollector", "RolloutOutputError", "RolloutResult", "plan_episodes", "run_episode",
           "run_rollouts"]
