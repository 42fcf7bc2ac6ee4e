"""The rollout runner: plan episodes, run them concurrently, record trajectories, report.

Episode ids are derived from (env, seed, group, task, sample), so a rerun with the same
arguments plans the same ids and skips every episode already on disk. An exception inside one
episode becomes that episode's ``env_error`` record, with the traceback; it never stops the run.
Output that cannot be written (a full disk) does: the records on disk stay whole, report.json
covers them, and :class:`RolloutOutputError` says so.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import random
import signal
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import envhub
from envhub.env import Env
from envhub.errors import ContextOverflowError, EngineError
from envhub.policies import Policy
from envhub.registry import make
from envhub.report import summarize
from envhub.store import JsonlStore, StoreWriteError, read_jsonl, write_json_atomic
from envhub.types import Observation, Outcome, TrajectoryRecord, Turn, Verdict, Versions


@dataclass(frozen=True)
class EpisodePlan:
    episode_id: str
    group_id: str
    task_id: str
    sample_index: int
    seed: int


def plan_episodes(
    env_id: str, task_ids: Sequence[str], *, episodes: int, group_size: int = 1, seed: int = 0
) -> list[EpisodePlan]:
    """``episodes`` in groups of ``group_size`` samples of one task (GRPO's groups)."""
    if episodes < 1 or group_size < 1:
        raise ValueError("--episodes and --group-size must be positive")
    if episodes % group_size:
        raise ValueError(f"--episodes ({episodes}) must be a multiple of --group-size ({group_size})")
    if not task_ids:
        raise ValueError(f"{env_id} has no tasks in this split")
    rng = random.Random(f"{env_id}/{seed}")
    order: list[str] = []
    while len(order) < episodes // group_size:
        batch = list(task_ids)
        rng.shuffle(batch)
        order.extend(batch)
    plans = []
    for g, task_id in enumerate(order[: episodes // group_size]):
        group_id = hashlib.sha1(f"{env_id}|{seed}|{g}|{task_id}".encode()).hexdigest()[:16]
        for k in range(group_size):
            ep_seed = int(hashlib.sha1(f"{group_id}|{k}".encode()).hexdigest()[:8], 16)
            plans.append(EpisodePlan(f"{group_id}-{k}", group_id, task_id, k, ep_seed))
    return plans


def run_episode(env: Env, policy: Policy, plan: EpisodePlan, policy_info: dict[str, Any]) -> TrajectoryRecord:
    """One episode, start to verdict. Never raises: failures become infra outcomes."""
    t0 = time.monotonic()
    try:
        return _run_episode(env, policy, plan, policy_info, t0)
    except Exception as exc:  # building the record failed (token view, validation, ...): still one record
        return _failed_record(env, plan, policy_info, _crash_detail(exc, "recording the episode failed"),
                              time.monotonic() - t0)


def _crash_detail(exc: BaseException, what: str | None = None) -> str:
    head = f"{what}: {exc!r}" if what else repr(exc)
    return f"{head}\n{''.join(traceback.format_exception(exc))}"


def _run_episode(env: Env, policy: Policy, plan: EpisodePlan, policy_info: dict[str, Any],
                 t0: float) -> TrajectoryRecord:
    agent = None
    obs: Observation | None = None
    outputs: list[Any] = []
    try:
        obs = env.reset(seed=plan.seed, task_id=plan.task_id)
        agent = policy.start(env, obs, seed=plan.seed)
        while not obs.done:
            try:
                ta = time.monotonic()
                out = agent.act(obs)
                agent_s = time.monotonic() - ta
            except EngineError as exc:
                obs = env.abort(Outcome.ENGINE_ERROR, f"{exc}")
                break
            except ContextOverflowError as exc:
                obs = env.abort(Outcome.CONTEXT_OVERFLOW, f"{exc}")
                break
            outputs.append((out, agent_s))
            obs = env.step(out.text)
    except Exception as exc:
        detail = _crash_detail(exc)
        if env.episode is not None and env.episode.task.task_id == plan.task_id and not env.episode.done:
            env.abort(Outcome.ENV_ERROR, detail)
        else:
            return _failed_record(env, plan, policy_info, detail, time.monotonic() - t0)
    return _record(env, plan, policy_info, agent, outputs, time.monotonic() - t0)


def _record(env: Env, plan: EpisodePlan, policy_info: dict[str, Any], agent: Any,
            outputs: list[Any], wall: float) -> TrajectoryRecord:
    episode = env.episode
    assert episode is not None and episode.verdict is not None
    turns: list[Turn] = []
    obs_ids = agent.observation_ids() if agent is not None else []
    for i, turn in enumerate(episode.turns):
        if i < len(outputs):
            out, agent_s = outputs[i]
            turn = turn.model_copy(update={
                "token_ids": out.token_ids, "logprobs": out.logprobs, "finish_reason": out.finish_reason,
                "weight_version": out.weight_version, "timings": {**turn.timings, "agent_s": agent_s},
                "observation_ids": obs_ids[i] if i < len(obs_ids) else [],
            })
        turns.append(turn)
    view = agent.token_view() if agent is not None else None
    metrics = episode.metrics.model_copy(update={"wall_seconds": wall})
    metrics.agent_seconds = sum(t.timings.get("agent_s", 0.0) for t in turns)
    if view is not None:
        metrics.prompt_tokens = len(view.prompt_ids)
        metrics.response_tokens = len(view.response_ids)
        metrics.sampled_tokens = sum(view.response_mask)
    verdict = episode.verdict
    return TrajectoryRecord(
        episode_id=plan.episode_id, task_id=plan.task_id, env_id=env.env_id, group_id=plan.group_id,
        sample_index=plan.sample_index, split=episode.task.split, policy=policy_info.get("policy", ""),
        versions=_versions(env, policy_info, [t.weight_version for t in turns]),
        sampling_params=policy_info.get("sampling_params", {}),
        messages=episode.messages, tools=episode.tools, turns=turns,
        prompt_ids=view.prompt_ids if view else [], response_ids=view.response_ids if view else [],
        response_mask=view.response_mask if view else [],
        response_logprobs=view.response_logprobs if view else [],
        num_turns=len(turns), reward=verdict.reward, verdict=verdict, outcome=verdict.outcome,
        outcome_detail=verdict.detail, metrics=metrics,
    )


def _failed_record(env: Env, plan: EpisodePlan, policy_info: dict[str, Any], detail: str,
                   wall: float) -> TrajectoryRecord:
    """An ``env_error`` record for an episode that produced none of its own; built from plain values."""
    try:
        versions = _versions(env, policy_info, [])
    except Exception:
        versions = Versions(envhub=envhub.__version__)
    record = TrajectoryRecord(
        episode_id=plan.episode_id, task_id=plan.task_id, env_id=env.env_id,
        group_id=plan.group_id, sample_index=plan.sample_index, policy=str(policy_info.get("policy", "")),
        versions=versions, outcome=Outcome.ENV_ERROR,
        verdict=Verdict(reward=0.0, outcome=Outcome.ENV_ERROR, detail=detail), outcome_detail=detail,
    )
    record.metrics.wall_seconds = wall
    return record


def _versions(env: Env, policy_info: dict[str, Any], weight_versions: list[str | None]) -> Versions:
    try:
        task_set = env.tasks.version
    except Exception:
        task_set = ""
    return Versions(
        envhub=envhub.__version__, env=f"{env.env_id}@{env.version}", task_set=task_set,
        sandbox_image=getattr(env.episode, "sandbox_image", None), model=policy_info.get("model"),
        tokenizer=policy_info.get("tokenizer"), chat_template_hash=policy_info.get("chat_template_hash"),
        weight_versions=weight_versions,
    )


@dataclass
class RolloutResult:
    report: dict[str, Any]
    trajectories: Path
    skipped: int


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
    policy: Policy,
    *,
    out_dir: str | Path,
    episodes: int,
    group_size: int = 1,
    seed: int = 0,
    concurrency: int = 4,
    split: str = "train",
    env_kwargs: dict[str, Any] | None = None,
    env_factory: Callable[[], Env] | None = None,
    on_episode: Callable[[TrajectoryRecord], None] | None = None,
) -> RolloutResult:
    """Run (or resume) a rollout into ``out_dir``; returns the report over all planned episodes.

    Bad arguments raise ValueError before any episode runs. When the output cannot be written
    (say the disk fills), no further episode starts, the records already written stay whole,
    report.json covers them (marked ``incomplete``) and :class:`RolloutOutputError` is raised.
    """
    if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
        raise ValueError(f"--concurrency must be a positive integer, got {concurrency!r}")
    out = Path(out_dir)
    _check_writable(out)
    factory = env_factory or (lambda: make(env_id, split=split, **(env_kwargs or {})))
    probe = factory()
    try:
        plans = plan_episodes(env_id, probe.tasks.task_ids(probe.split), episodes=episodes,
                              group_size=group_size, seed=seed)
    finally:
        probe.close()
    policy_info = {"policy": policy.name, **policy.describe()}
    path = out / "trajectories.jsonl"
    try:
        _claim_run_dir(out, {"env_id": env_id, "split": split, "policy": policy_info, "group_size": group_size,
                             "env_kwargs": {k: v for k, v in (env_kwargs or {}).items() if k != "sandbox"}})
        reserve = _hold_reserve(out)
    except OSError as exc:
        raise RolloutOutputError(f"cannot write to {exc.filename or out}: {exc.strerror or exc}; "
                                 "no episode was run") from None
    local = threading.local()
    envs: list[Env] = []
    envs_lock = threading.Lock()

    def worker_env() -> Env:
        if not hasattr(local, "env"):
            local.env = factory()
            with envs_lock:
                envs.append(local.env)
        return local.env

    def job(plan: EpisodePlan) -> TrajectoryRecord:
        try:
            env = worker_env()
        except Exception as exc:
            return _failed_record(probe, plan, policy_info, _crash_detail(exc, "env construction failed"), 0.0)
        return run_episode(env, policy, plan, policy_info)  # never raises

    def keep(plan: EpisodePlan, record: TrajectoryRecord) -> None:
        """Tell ``on_episode``, then store the record. Whatever fails here fails this episode only:
        it is stored as an ``env_error`` record with the traceback, and the run goes on."""
        try:
            if on_episode is not None:
                on_episode(record)
            data = record.model_dump(mode="json")
        except Exception as exc:
            what = "the on_episode callback or serializing the record failed"
            record = _failed_record(probe, plan, policy_info, _crash_detail(exc, what), record.metrics.wall_seconds)
            data = record.model_dump(mode="json")
        store.append(data)

    t0 = time.monotonic()
    failed: StoreWriteError | None = None
    unwritten = 0  # episodes that finished after writing failed
    try:
        with JsonlStore(path) as store:
            todo = [p for p in plans if p.episode_id not in store.keys]
            with ThreadPoolExecutor(max_workers=concurrency) as pool, _ctrl_c_requests_stop() as stop:
                futures = {pool.submit(job, p): p for p in todo}
                pending = set(futures)
                while pending:
                    done, pending = wait(pending, timeout=0.2, return_when=FIRST_COMPLETED)
                    for fut in done:
                        if failed is None:
                            try:
                                keep(futures[fut], fut.result())
                                continue
                            except StoreWriteError as exc:  # the queue is dropped; in-flight episodes end
                                failed = exc
                                pool.shutdown(wait=False, cancel_futures=True)
                        unwritten += 1
                    if failed is not None:  # a cancelled future is never "done" for wait()
                        pending = {f for f in pending if not f.cancelled()}
                    if stop.is_set():  # Ctrl-C: what finished is on disk; the queue is dropped
                        pool.shutdown(wait=False, cancel_futures=True)
                        from envhub.sandboxes import cleanup

                        cleanup.close_all_bounded()  # episodes in flight end now; they are not kept
                        raise KeyboardInterrupt
    finally:  # the workers are done here (the pool's exit waits for the episodes in flight)
        for env in envs:
            env.close()
        _release_reserve(reserve)
    wanted = {p.episode_id for p in plans}
    records = [r for r in read_jsonl(path) if r["episode_id"] in wanted]
    report = summarize(records, wall_seconds=time.monotonic() - t0)
    report.update({"env_id": env_id, "policy": policy.name, "planned": len(plans),
                   "skipped_already_done": len(plans) - len(todo), "seed": seed, "group_size": group_size})
    if failed is not None:
        report["incomplete"] = {"error": f"writing {path} failed: {failed.strerror}",
                                "not_written": unwritten, "not_run": len(plans) - len(records) - unwritten}
    try:
        write_json_atomic(out / "report.json", report)
        report_note = "report.json covers them"
    except OSError as exc:
        if failed is None:
            raise RolloutOutputError(f"all {len(records)} episodes are in {path}, but {out / 'report.json'} "
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


@contextlib.contextmanager
def _ctrl_c_requests_stop() -> Iterator[threading.Event]:
    """While the run waits for episodes, Ctrl-C sets the event instead of raising
    ``KeyboardInterrupt`` wherever the main thread happens to be: raised inside
    ``concurrent.futures``' lock handling, it can leave a lock held and deadlock the run. A second
    Ctrl-C raises at once. Off the main thread (no signals there) the event is never set."""
    stop = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield stop
        return

    def on_sigint(signum: int, frame: Any) -> None:
        if stop.is_set():
            raise KeyboardInterrupt
        stop.set()

    previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        yield stop
    finally:
        signal.signal(signal.SIGINT, previous)


def _claim_run_dir(out: Path, identity: dict[str, Any]) -> None:
    """``out/run.json`` names what the directory's episodes are; resuming with anything else
    (another policy, model, sampling, env, split or group size) would mix two runs under one
    report. (A run.json from before group sizes were recorded takes this run's.)"""
    identity = json.loads(json.dumps(identity, sort_keys=True, default=str))
    path = out / "run.json"
    if path.exists():
        try:
            before = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ValueError(f"{path} is unreadable ({exc}); use another --out") from None
        if isinstance(before, dict) and "group_size" not in before:
            before["group_size"] = identity.get("group_size")
        if before != identity:
            differ = sorted(k for k in {*before, *identity} if before.get(k) != identity.get(k))
            raise ValueError(f"{out} holds episodes of another run (different {', '.join(differ)}: "
                             f"{before.get(differ[0])!r} there, {identity.get(differ[0])!r} now); "
                             "resume with the same settings or use another --out")
        return
    write_json_atomic(path, identity)


def _check_writable(out: Path) -> None:
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / ".envhub-write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as exc:
        raise PermissionError(f"cannot write to output directory {out}: {exc.strerror or exc}") from None
