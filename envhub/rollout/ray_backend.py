"""Rollouts on a Ray cluster: :class:`RayCollector`, the same interface as
:class:`~envhub.rollout.collect.EpisodeCollector` (``run(plans, stop=, abandon=)`` yields one record per
plan in completion order; ``close``; ``policy_info``), with rollout workers as Ray actors.

Each worker is a threaded actor that owns up to ``slots`` envs -- and so their sandboxes -- on its
node, made there from a picklable :class:`RayEnvSpec`; its policy is made there too, from a
:class:`PolicySpec` (``gold``, ``hf:PATH``, ``sglang:URL``, ...: :func:`envhub.policies.make_policy`).
Inside, a worker runs its episodes on an :class:`~envhub.rollout.collect.EpisodeCollector`, so an episode
ends exactly as it would in process. Records stream back as they finish (``ray.wait``).

Supervision is ours (``ray.util.ActorPool`` never replaces a dead actor). A worker that dies is
restarted by Ray (``max_restarts``) and takes work again once it answers. The episodes it was
running end as ``env_error`` records that say the worker died -- never as a policy outcome -- or,
with ``redispatch=True``, each is run once more, on another worker where there is one; its record
carries ``metrics.extra["ray_redispatched"] = 1`` (a second death ends it as ``env_error``). A
worker that dies ``quarantine_after`` times (or that Ray cannot bring back) is quarantined: killed
and given no more work. When no worker is left, the remaining plans end as ``env_error`` records,
so every plan is accounted for. :meth:`RayCollector.stats` (``report.json``'s ``ray`` section)
counts workers, restarts, deaths, quarantines and re-dispatches.

``import envhub`` never imports ray; this module imports it only inside its functions.
"""

from __future__ import annotations

import contextlib
import importlib
import math
import os
import threading
import time
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from envhub.env import Env
from envhub.policies import Policy, make_policy
from envhub.registry import make
from envhub.rollout.collect import EpisodeCollector, check_concurrency, end_episodes_in_flight
from envhub.rollout.episodes import EpisodePlan, infra_record
from envhub.types import TrajectoryRecord

#: Set in each rollout worker's process to its index (for logs and fault injection in tests).
WORKER_INDEX_ENV = "ENVHUB_RAY_WORKER_INDEX"
#: How long the collector waits on Ray before it looks at ``stop``, ``abandon`` and restarts again.
POLL_S = 0.05
#: A record's ``metrics.extra`` key: 1.0 when its episode was re-dispatched after its worker died.
REDISPATCHED_KEY = "ray_redispatched"
#: The detail of a record whose worker died starts with this.
WORKER_DIED = "ray worker died"
#: The actors' concurrency group for ``setup`` and ``close``, so that they never wait behind episodes.
CONTROL = "control"


class RayBackendError(RuntimeError):
    """The Ray backend could not start: ray is missing, the cluster cannot place the workers, or a
    worker cannot make its policy or import what the env needs. The message says which."""


@dataclass(frozen=True)
class RayEnvSpec:
    """A picklable recipe for the env each worker makes: ``make(env_id, split=split, **kwargs)``.

    ``imports`` are modules each worker imports first: for an env registered when a module is
    imported rather than through an ``envhub.envs`` entry point."""

    env_id: str
    split: str = "train"
    kwargs: dict[str, Any] = field(default_factory=dict)
    imports: tuple[str, ...] = ()

    def make(self) -> Env:
        for module in self.imports:
            importlib.import_module(module)
        return make(self.env_id, split=self.split, **self.kwargs)


@dataclass(frozen=True)
class PolicySpec:
    """A policy by name, made in each worker: ``make_policy(spec, **options)``."""

    spec: str
    options: dict[str, Any] = field(default_factory=dict)

    def make(self) -> Policy:
        return make_policy(self.spec, **self.options)


class RolloutWorker:
    """The actor (``ray.remote`` is applied by :class:`RayCollector`): ``slots`` envs on threads of
    one :class:`~envhub.rollout.collect.EpisodeCollector`, made on first use. Ray restarts it with the same
    arguments after a crash; everything it holds is made again lazily."""

    def __init__(self, env: RayEnvSpec, policy: PolicySpec, index: int, slots: int) -> None:
        os.environ[WORKER_INDEX_ENV] = str(index)
        self.env, self.policy, self.index, self.slots = env, policy, index, slots
        self._collector: EpisodeCollector | None = None
        self._lock = threading.Lock()

    def setup(self) -> dict[str, Any]:
        """Import what the env needs and make the policy; this process's pid, node and policy_info."""
        import ray

        collector = self._ensure()
        return {"pid": os.getpid(), "node": ray.get_runtime_context().get_node_id(),
                "policy_info": collector.policy_info}

    def _ensure(self) -> EpisodeCollector:
        with self._lock:
            if self._collector is None:
                for module in self.env.imports:
                    importlib.import_module(module)
                self._collector = EpisodeCollector(self.env.make, self.policy.make(), concurrency=self.slots,
                                                   env_id=self.env.env_id)
            return self._collector

    def run(self, plan: EpisodePlan) -> TrajectoryRecord:
        """One episode's record; an episode's failures are its record, as in process."""
        records = list(self._ensure().run([plan]))
        if len(records) != 1:  # the collector yields one record per plan
            raise RuntimeError(f"the worker's collector returned {len(records)} records for one plan")
        return records[0]

    def close(self, end_in_flight: bool = False) -> None:
        """Close every env made (after the episodes in flight end; with ``end_in_flight``, end them now)."""
        if end_in_flight:
            end_episodes_in_flight()
        if self._collector is not None:
            self._collector.close()


@dataclass
class _Worker:
    index: int
    handle: Any
    state: str = "ready"  # ready | restarting | quarantined
    busy: int = 0
    deaths: int = 0
    restarts: int = 0
    generation: int = 0  # bumped at each death, so the episodes lost in one crash count it once
    pid: int | None = None
    node: str = ""
    probe: Any = None  # setup() of the restarted process, while restarting
    down_since: float = 0.0
    retry_at: float = 0.0
    reason: str = ""

    def where(self) -> str:
        return f"rollout worker {self.index} (pid {self.pid}, node {self.node[:12] or '?'})"


@dataclass
class _Attempt:
    plan: EpisodePlan
    worker: _Worker | None = None  # where it runs, once dispatched
    generation: int = 0
    redispatched: bool = False
    avoid: int | None = None  # the worker an episode was lost on: re-dispatched elsewhere if possible
    history: str = ""


class RayCollector:
    """Planned episodes on Ray actors; see the module docstring.

    ``concurrency`` episodes run at once, over ``workers`` actors (default: as many as the
    cluster's CPUs allow at ``cpus_per_worker`` each, at most ``concurrency``) with
    ``ceil(concurrency / workers)`` threads each. Connects to ``address`` (or ``RAY_ADDRESS``)
    unless Ray is initialized already; with neither it starts a local cluster, shut down at
    :meth:`close`. The workers are started here, so a policy that cannot be made fails here, as
    :class:`RayBackendError`.
    """

    def __init__(self, env: RayEnvSpec, policy: PolicySpec | str, *, concurrency: int = 4,
                 workers: int | None = None, cpus_per_worker: float = 1.0, redispatch: bool = False,
                 quarantine_after: int = 3, address: str | None = None, start_timeout_s: float = 120.0,
                 restart_timeout_s: float = 120.0, close_timeout_s: float = 30.0) -> None:
        check_concurrency(concurrency)
        if workers is not None:
            check_concurrency(workers, "workers")
        check_concurrency(quarantine_after, "quarantine_after")
        try:
            import ray
        except ImportError as exc:
            raise RayBackendError(f"--backend ray needs ray: pip install 'envhub[ray]' ({exc})") from None
        self.env_spec = env
        self.env_id = env.env_id
        self.policy_spec = PolicySpec(policy) if isinstance(policy, str) else policy
        self.concurrency, self.redispatch, self.quarantine_after = concurrency, redispatch, quarantine_after
        self.restart_timeout_s, self.close_timeout_s = restart_timeout_s, close_timeout_s
        self.redispatched = 0
        self._closed = False
        self._end_in_flight = False
        self._owns_ray = False
        if not ray.is_initialized():
            local = address is None and not os.environ.get("RAY_ADDRESS")
            ray.init(address=address, include_dashboard=False, log_to_driver=False,
                     object_store_memory=256 * 1024**2 if local else None)
            self._owns_ray = True
        try:
            count = workers or max(1, min(concurrency, int(ray.cluster_resources().get("CPU", 1) // cpus_per_worker)))
            self.slots = math.ceil(concurrency / count)
            actor = ray.remote(concurrency_groups={CONTROL: 1})(RolloutWorker).options(
                num_cpus=cpus_per_worker, max_restarts=quarantine_after, max_task_retries=0,
                max_concurrency=self.slots, scheduling_strategy="SPREAD")
            self.workers = [_Worker(i, actor.remote(env, self.policy_spec, i, self.slots)) for i in range(count)]
            self.policy_info = self._start(start_timeout_s)
        except BaseException:
            self.close()
            raise

    def _start(self, timeout_s: float) -> dict[str, Any]:
        import ray

        refs = [_control(w.handle.setup).remote() for w in self.workers]
        try:
            infos = ray.get(refs, timeout=timeout_s)
        except ray.exceptions.GetTimeoutError:
            cpus = ray.cluster_resources().get("CPU", 0)
            raise RayBackendError(f"{len(self.workers)} Ray rollout workers were not up within {timeout_s:.0f} s "
                                  f"(the cluster has {cpus:g} CPUs)") from None
        except ray.exceptions.RayTaskError as exc:
            cause = exc.cause
            raise RayBackendError(f"a Ray rollout worker could not start: {type(cause).__name__}: {cause}") from None
        except ray.exceptions.RayActorError as exc:
            raise RayBackendError(f"a Ray rollout worker died while starting: {exc}") from None
        for worker, info in zip(self.workers, infos, strict=True):
            worker.pid, worker.node = info["pid"], info["node"]
        return dict(infos[0]["policy_info"])

    # ---- running plans -----------------------------------------------------------------------

    def run(self, plans: Sequence[EpisodePlan], *, stop: threading.Event | None = None,
            abandon: threading.Event | None = None) -> Iterator[TrajectoryRecord]:
        """One record per plan, in completion order (as :meth:`EpisodeCollector.run`). ``stop``: no
        further episode starts, those in flight are yielded, then it ends. ``abandon`` (or closing
        the iterator): it ends at once; the episodes in flight are dropped and end at :meth:`close`."""
        if self._closed:
            raise RuntimeError("this Ray collector is closed")
        return self._iterate(deque(plans), stop, abandon)

    def _iterate(self, todo: deque[EpisodePlan], stop: threading.Event | None,
                 abandon: threading.Event | None) -> Iterator[TrajectoryRecord]:
        import ray

        queue: deque[_Attempt] = deque(_Attempt(p) for p in todo)
        inflight: dict[Any, _Attempt] = {}
        try:
            while queue or inflight:
                if abandon is not None and abandon.is_set():
                    self._end_in_flight = True
                    return
                if stop is not None and stop.is_set():
                    queue.clear()
                self._dispatch(queue, inflight)
                ready: list[TrajectoryRecord] = []
                if queue and not any(w.state != "quarantined" for w in self.workers):
                    ready.extend(self._no_worker_left(a) for a in queue)
                    queue.clear()
                refs = [*inflight, *(w.probe for w in self.workers if w.probe is not None)]
                if not refs:
                    if queue:  # only workers waiting to be probed again
                        time.sleep(POLL_S)
                        self._probe_restarting()
                    yield from ready
                    continue
                done, _ = ray.wait(refs, num_returns=1, timeout=POLL_S)
                if done:
                    rest = [r for r in refs if r not in done]
                    more, _ = ray.wait(rest, num_returns=len(rest), timeout=0) if rest else ([], [])
                    done = [*done, *more]
                for ref in done:
                    attempt = inflight.pop(ref, None)
                    if attempt is None:
                        self._probed(ref)
                    else:
                        ready.extend(self._finished(ref, attempt, queue))
                self._probe_restarting()
                self._dispatch(queue, inflight)  # refill the workers before the consumer runs
                yield from ready
        except GeneratorExit:
            self._end_in_flight = True
            raise
        finally:  # dropped episodes hold no slot here: Ray queues calls beyond a worker's threads
            for attempt in inflight.values():
                attempt.worker.busy -= 1  # type: ignore[union-attr]

    def _dispatch(self, queue: deque[_Attempt], inflight: dict[Any, _Attempt]) -> None:
        """Start queued episodes on free worker threads, in queue order (one that must avoid the
        only free worker waits, the others go by)."""
        waiting: list[_Attempt] = []
        while queue and self._has_free_slot():
            attempt = queue.popleft()
            worker = self._free_worker(attempt.avoid)
            if worker is None:
                waiting.append(attempt)
                continue
            attempt.worker, attempt.generation = worker, worker.generation
            worker.busy += 1
            inflight[worker.handle.run.remote(attempt.plan)] = attempt
        queue.extendleft(reversed(waiting))

    def _has_free_slot(self) -> bool:
        return any(w.state == "ready" and w.busy < self.slots for w in self.workers)

    def _free_worker(self, avoid: int | None) -> _Worker | None:
        ready = [w for w in self.workers if w.state == "ready" and w.busy < self.slots]
        others = [w for w in ready if w.index != avoid]
        alive_others = [w for w in self.workers if w.state != "quarantined" and w.index != avoid]
        pick = others or (ready if not alive_others else [])
        return min(pick, key=lambda w: w.busy) if pick else None

    def _finished(self, ref: Any, attempt: _Attempt, queue: deque[_Attempt]) -> list[TrajectoryRecord]:
        import ray

        worker = attempt.worker
        assert worker is not None
        worker.busy -= 1
        try:
            record: TrajectoryRecord = ray.get(ref)
        except ray.exceptions.RayActorError as exc:
            return self._lost(attempt, exc, queue)
        except Exception as exc:  # the worker raised or its record could not travel: that episode only
            return [self._infra(attempt, f"the Ray rollout worker could not return the episode: {exc!r}")]
        if attempt.redispatched:
            record.metrics.extra[REDISPATCHED_KEY] = 1.0
        return [record]

    def _lost(self, attempt: _Attempt, exc: Exception, queue: deque[_Attempt]) -> list[TrajectoryRecord]:
        """The worker of ``attempt`` died while running it: count the death once per crash, then
        re-dispatch the episode once or end it as ``env_error``."""
        worker = attempt.worker
        assert worker is not None
        where = worker.where()
        if attempt.generation == worker.generation:
            worker.deaths += 1
            worker.generation += 1
            if worker.deaths >= self.quarantine_after:
                self._quarantine(worker, f"died {worker.deaths} times")
            elif worker.state != "quarantined":
                worker.state, worker.down_since = "restarting", time.monotonic()
                worker.probe = _control(worker.handle.setup).remote()
        what = f"{where} died while running this episode ({type(exc).__name__})"
        if self.redispatch and not attempt.redispatched:
            self.redispatched += 1
            queue.appendleft(_Attempt(attempt.plan, redispatched=True, avoid=worker.index,
                                      history=f"{what}; re-dispatched once"))
            return []
        history = f"{attempt.history}; then " if attempt.history else ""
        return [self._infra(attempt, f"{WORKER_DIED}: {history}{what}\n{exc}")]

    def _probed(self, ref: Any) -> None:
        import ray

        worker = next(w for w in self.workers if w.probe is not None and w.probe == ref)
        worker.probe = None
        try:
            info = ray.get(ref)
        except ray.exceptions.ActorDiedError as exc:
            self._quarantine(worker, f"Ray could not restart it: {exc}")
            return
        except ray.exceptions.RayActorError:  # not up yet: ask again shortly
            worker.retry_at = time.monotonic() + 0.5
            return
        except Exception as exc:  # it came back but cannot set up (policy, imports)
            self._quarantine(worker, f"it could not set up again after a restart: {exc!r}")
            return
        worker.pid, worker.node = info["pid"], info["node"]
        worker.state = "ready"
        worker.restarts += 1

    def _probe_restarting(self) -> None:
        now = time.monotonic()
        for worker in self.workers:
            if worker.state != "restarting" or worker.probe is not None or now < worker.retry_at:
                continue
            if now - worker.down_since > self.restart_timeout_s:
                self._quarantine(worker, f"not back within {self.restart_timeout_s:.0f} s of dying")
            else:
                worker.probe = _control(worker.handle.setup).remote()

    def _quarantine(self, worker: _Worker, reason: str) -> None:
        import ray

        worker.state, worker.reason, worker.probe = "quarantined", reason, None
        with contextlib.suppress(Exception):
            ray.kill(worker.handle, no_restart=True)

    def _no_worker_left(self, attempt: _Attempt) -> TrajectoryRecord:
        reasons = "; ".join(f"worker {w.index}: {w.reason}" for w in self.workers)
        history = f" ({attempt.history})" if attempt.history else ""
        return self._infra(attempt, f"{WORKER_DIED}: no Ray rollout worker left to run this episode{history}: "
                                    f"all {len(self.workers)} are quarantined ({reasons})")

    def _infra(self, attempt: _Attempt, detail: str) -> TrajectoryRecord:
        record = infra_record(attempt.plan, self.policy_info, detail, env_id=self.env_id)
        if attempt.redispatched:
            record.metrics.extra[REDISPATCHED_KEY] = 1.0
        return record

    # ---- reporting and closing ---------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        """``report.json``'s ``ray`` section: workers, slots each, restarts, deaths, quarantined
        workers (index, deaths, reason), workers not back yet, and episodes re-dispatched."""
        return {
            "workers": len(self.workers), "slots_per_worker": self.slots,
            "restarts": sum(w.restarts for w in self.workers), "deaths": sum(w.deaths for w in self.workers),
            "quarantined": [{"worker": w.index, "deaths": w.deaths, "reason": w.reason}
                            for w in self.workers if w.state == "quarantined"],
            "restarting": [w.index for w in self.workers if w.state == "restarting"],
            "redispatched": self.redispatched,
        }

    def worker_pids(self) -> dict[int, int | None]:
        """Each worker's process id as last seen (a restarted worker's once it answered)."""
        return {w.index: w.pid for w in self.workers}

    def report_fields(self) -> dict[str, Any]:
        """What :func:`envhub.rollout.runner.run_rollouts` adds to ``report.json``."""
        return {"backend": "ray", "ray": self.stats()}

    def close(self) -> None:
        """Close every worker's envs (after the episodes in flight; at once after an abandoned run),
        waiting at most ``close_timeout_s``, then end the workers (and a cluster started here).
        Idempotent."""
        if self._closed:
            return
        self._closed = True
        import ray

        workers = getattr(self, "workers", [])
        live = [w for w in workers if w.state != "quarantined"]
        refs = []
        for worker in live:
            with contextlib.suppress(Exception):
                refs.append(_control(worker.handle.close).remote(self._end_in_flight))
        if refs:
            with contextlib.suppress(Exception):
                ray.wait(refs, num_returns=len(refs), timeout=self.close_timeout_s)
        for worker in workers:
            with contextlib.suppress(Exception):
                ray.kill(worker.handle, no_restart=True)
        if self._owns_ray:
            ray.shutdown()

    def __enter__(self) -> RayCollector:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _control(method: Any) -> Any:
    """An actor method called in the :data:`CONTROL` group."""
    return method.options(concurrency_group=CONTROL)


__all__ = ["WORKER_INDEX_ENV", "PolicySpec", "RayBackendError", "RayCollector", "RayEnvSpec", "RolloutWorker"]
