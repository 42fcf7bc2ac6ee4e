"""Validation evals of a training run: strict success on the validation split, never the training split.

An eval is a rollout (:func:`envhub.rollout.runner.run_rollouts`) into ``RUN/eval/TAG/``: the same
planned episodes for the same tag, the finished ones kept when an interrupted eval runs again with
the same weights, and the directory's ``report.json`` stamped with the tag, the step and the weight
version. An episode is kept only if every turn of it was sampled with the current weight version:
the final eval of a run resumed with more steps, say, samples every episode again with the new
weights. Each eval's headline numbers are one line of ``RUN/evals.jsonl`` (one per tag: an eval run
again replaces its line, moved to the end; the ``final`` eval of weights a resumed run trained further
is kept as its step's eval). ``RUN/best`` and ``best.json`` follow the best eval (:func:`keep_if_best`).
An eval's ``seconds`` are its sampling time: a finished eval a resumed run comes back to keeps its line
(and its time); one interrupted midway counts only the episodes sampled after the resume, the others
being its ``resumed_episodes``.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from envhub.env import Env
from envhub.policies import Policy
from envhub.progress import elapsed
from envhub.rollout import stats
from envhub.rollout.evidence import with_evidence
from envhub.rollout.runner import run_rollouts
from envhub.run_dir import Run, TrainingRun
from envhub.store import write_json_atomic, write_text_atomic
from envhub.trainer import fsdp
from envhub.trainer.config import TrainConfig
from envhub.types import Outcome, TrajectoryRecord

if TYPE_CHECKING:
    from envhub.trainer.models import PolicyModels

#: The tag of the eval after the last step (the step's own eval when a later resume trains further).
FINAL = "final"

#: The most often an eval's progress line is written (seconds); its last line always is.
PROGRESS_EVERY_S = 30.0


class EvalProgress:
    """``eval TAG: 40/128 episodes, 12 successes, ETA 3m10s`` lines through ``log`` while an eval runs
    (terminal or not), at most one per ``every_s`` plus the last; ``on_episode`` is the rollout's hook."""

    def __init__(self, tag: str, *, total: int, done: int, log: Callable[[str], None],
                 every_s: float = PROGRESS_EVERY_S) -> None:
        self.tag, self.total, self.resumed, self.log, self.every_s = tag, total, done, log, every_s
        self.sampled = self.successes = 0
        self.started = self.last = time.monotonic()

    def on_episode(self, record: TrajectoryRecord) -> None:
        self.sampled += 1
        self.successes += record.outcome.value == "success"
        now, done = time.monotonic(), self.resumed + self.sampled
        if now - self.last < self.every_s and done < self.total:
            return
        self.last = now
        eta = (now - self.started) / self.sampled * max(self.total - done, 0)
        resumed = f" ({self.resumed} kept from before)" if self.resumed else ""
        self.log(f"eval {self.tag}: {done}/{self.total} episodes{resumed}, {self.successes} successes sampled, "
                 f"ETA {elapsed(eta)}")


def evaluate(files: TrainingRun, config: TrainConfig, policy: Policy, env_factory: Callable[[], Env], *,
             tag: str, step: int, weight_version: str,
             log: Callable[[str], None] = lambda line: None) -> dict[str, Any]:
    """The eval ``tag`` of ``policy`` on ``config.env.validation_split`` (envs from ``env_factory``),
    run or resumed, its progress through ``log``; returns its line of ``evals.jsonl``."""
    env, split = config.env, config.env.validation_split
    assert split is not None
    if tag == FINAL:
        keep_as_step(files, tag, weight_version)
    same = [r for r in files.evals() if r.get("weight_version") == weight_version and r.get("split") == split
            and r.get("episodes") == config.eval.episodes and r.get("tag") != tag and not r.get("same_as")]
    if same:  # the same weights on the same planned episodes: that eval is this one
        return _write_line(files, {**same[-1], "tag": tag, "step": step, "same_as": same[-1]["tag"]})
    out = files.eval_run(tag)
    forget_other_weights(out, weight_version)
    kept = sum(1 for _ in out.rows()) if out.trajectories_path.exists() else 0
    earlier = [r for r in files.evals() if r.get("tag") == tag and r.get("weight_version") == weight_version
               and r.get("split") == split and r.get("episodes") == config.eval.episodes]
    replayed = earlier[-1] if earlier and kept >= config.eval.episodes else None
    if replayed is not None:
        log(f"eval {tag}: already done with weight version {weight_version}, in "
            f"{elapsed(float(replayed.get('seconds', 0.0)))} (its {kept} episodes are on disk)")
    else:
        more = f" ({kept} already on disk from before the resume)" if kept else ""
        log(f"eval {tag}: sampling {config.eval.episodes} {split} episodes with weight version {weight_version}{more}")
    progress = EvalProgress(tag, total=config.eval.episodes, done=kept, log=log)
    # env_kwargs only name the envs in run.json: env_factory makes them
    kwargs = dict(env.args) if env.budget is None else {**env.args, "budget": dataclasses.asdict(env.budget)}
    done = run_rollouts(env.id, policy, out_dir=out.path, episodes=config.eval.episodes, seed=config.seed,
                        concurrency=config.rollout.concurrency, split=split, env_kwargs=kwargs,
                        env_factory=env_factory, on_episode=progress.on_episode)
    report = {**done.report, "split": split, "tag": tag, "step": step, "weight_version": weight_version}
    out.write_report(report)
    if replayed is not None:  # (a resumed run's) its line and its own time stay
        return _write_line(files, replayed)
    records = list(out.records())
    successes = sum(r.outcome is Outcome.SUCCESS for r in records)
    result = {"tag": tag, "step": step, "weight_version": weight_version, "split": split,
              "episodes": report["attempted"], "successes": successes,
              "strict_success": report.get("strict_success_rate", 0.0),
              "interval": list(stats.wilson(successes, len(records))), "reward_mean": report.get("mean_reward"),
              "seconds": time.monotonic() - progress.started, "resumed_episodes": kept,
              "by_group": stats.by_group(records)}
    return _write_line(files, result)


def keep_as_step(files: TrainingRun, tag: str, weight_version: str) -> None:
    """The eval ``tag`` of other weights than ``weight_version`` (the final eval of a run since resumed with
    more steps) is kept under its step's name (``eval/step-N/``, its line, ``best.json``), so the history
    keeps every eval the run made; nothing is done when that step has an eval of its own."""
    line = next((r for r in files.evals() if r.get("tag") == tag), None)
    if line is None or line.get("weight_version") == weight_version:
        return
    name = TrainingRun.step_name(int(line.get("step", 0)))
    if any(r.get("tag") == name for r in files.evals()):
        return
    src, dst = files.eval_run(tag).path, files.eval_run(name).path
    if src.exists() and not dst.exists():
        src.rename(dst)  # first: a crash before the lines below leaves them to the next call
    renamed = [{**r, **({"tag": name} if r.get("tag") == tag else {}),
                **({"same_as": name} if r.get("same_as") == tag else {})} for r in files.evals()]
    write_text_atomic(files.evals_path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in renamed))
    best = files.best()
    if best is not None and best.get("tag") == tag and best.get("weight_version") == line.get("weight_version"):
        write_json_atomic(files.best_path, {**best, "tag": name})


def improves_best(files: TrainingRun, result: dict[str, Any]) -> bool:
    """Whether the eval ``result`` beats ``best.json`` (strict success, on the same split and episode
    count; a tie keeps the earlier, less trained weights). An eval that is already the best is not again."""
    best = files.best()
    if best is None or (best.get("split"), best.get("episodes")) != (result["split"], result["episodes"]):
        return True
    if best.get("weight_version") == result["weight_version"]:
        return False
    return float(result["strict_success"]) > float(best["strict_success"])


def keep_if_best(files: TrainingRun, result: dict[str, Any] | None, models: PolicyModels,
                 dist: fsdp.DistInfo, *, initial: Path | None, log: Callable[[str], None]) -> None:
    """Every rank (the weights are gathered): when the eval ``result`` is the best so far
    (:func:`improves_best`, judged on rank 0), its weights go to ``RUN/best`` and ``best.json`` says
    which eval; ``initial``: the model dir, when the weights are still the initial ones (named, not
    copied)."""
    better = dist.is_main and result is not None and improves_best(files, result)
    if fsdp.all_reduce_sum({"better": float(better)}, dist)["better"]:
        state = None if initial is not None else fsdp.full_state_dict(models.model, dist)
        if result is not None and dist.is_main:
            if state is not None:
                models.write_model_dir(state, files.best_dir)
            weights = str(initial or files.best_dir)
            write_json_atomic(files.best_path, best_record(result, weights))
            log(f"best: eval {result['tag']} (weight version {result['weight_version']}) in {weights}")
    fsdp.barrier(dist)


def best_record(result: dict[str, Any], weights: str) -> dict[str, Any]:
    """``best.json`` for the eval ``result`` whose weights are in ``weights`` (a model dir)."""
    keep = ("tag", "step", "weight_version", "split", "episodes", "successes", "strict_success", "interval")
    return {**{k: result.get(k) for k in keep}, "weights": weights}


def successes_by_episode(files: TrainingRun, tag: str) -> dict[str, bool]:
    """Episode id -> success of the eval ``tag`` (the eval it is the same as, for a reused one)."""
    line = next((r for r in files.evals() if r.get("tag") == tag), None)
    source = (line or {}).get("same_as") or tag
    run = files.eval_run(source)
    if not run.trajectories_path.exists():
        return {}
    return {r.episode_id: r.outcome is Outcome.SUCCESS for r in run.records()}


def paired_evals(files: TrainingRun, first: str, second: str) -> dict[str, Any]:
    """The eval ``second`` against ``first`` on the same planned episodes (:func:`envhub.rollout.stats.paired`),
    with the exact McNemar p-value and the evidence graded in words (:func:`envhub.rollout.evidence.with_evidence`)."""
    return with_evidence({"first": first, "second": second,
                          **stats.paired(successes_by_episode(files, first), successes_by_episode(files, second))})


def _write_line(files: TrainingRun, result: dict[str, Any]) -> dict[str, Any]:
    rows = [r for r in files.evals() if r.get("tag") != result["tag"]]
    write_text_atomic(files.evals_path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in [*rows, result]))
    return result


def sampled_with(record: TrajectoryRecord, weight_version: str) -> bool:
    """Whether every turn of ``record`` was sampled with ``weight_version`` (a record without turns: no)."""
    versions = record.versions.weight_versions
    return bool(versions) and all(v is not None and str(v) == weight_version for v in versions)


def forget_other_weights(out: Run, weight_version: str) -> int:
    """Drop the records of ``out`` not sampled with ``weight_version`` (they are run again); returns how many.
    The kept lines are written back as they were read."""
    if not out.trajectories_path.exists():
        return 0
    rows = list(out.rows())
    kept = [r for r in rows if sampled_with(TrajectoryRecord.model_validate(r), weight_version)]
    if len(kept) < len(rows):
        write_text_atomic(out.trajectories_path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in kept))
    return len(rows) - len(kept)
