"""What a training run tells the outside while it runs: each step's record (:func:`step_record`, one
line of ``RUN/steps.jsonl``; every rank), and, rank 0 only, a line per stage of a step as it ends
(:class:`StepProgress`), a progress line per step, Prometheus series
(``metrics_port``), the experiment trackers (``loggers``, :mod:`envhub.trainer.trackers`) and, at the
end, the run's :func:`headline`.

Prometheus series (bounded labels: ``env``, ``outcome``, ``outcome_class``, ``phase``; never an
episode id or a prompt): the rollout series of :class:`envhub.rollout.metrics.RolloutMetrics` for the
training episodes, plus ``envhub_train_step``, ``envhub_train_reward_mean``,
``envhub_train_strict_success_ratio``, ``envhub_train_zero_variance_fraction``,
``envhub_train_weight_version``, ``envhub_train_sample_staleness`` (weight versions between the
newest weights and the oldest sample trained on) and ``envhub_train_step_seconds{phase}``
(rollout, verify, train, weight_sync); an async run's step records add the gauges of
:mod:`envhub.trainer.async_metrics`. The trackers get every numeric entry of a step's record.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from envhub.progress import elapsed
from envhub.trainer import fsdp
from envhub.trainer.async_metrics import AsyncGauges
from envhub.trainer.trackers import Trackers, eval_scalars, tracker_names
from envhub.types import Outcome, TrajectoryRecord

if TYPE_CHECKING:
    from envhub.trainer.config import TrainConfig

PHASES = ("rollout_s", "verify_s", "train_s", "weight_sync_s")
#: The most often a step's rollouts print their episode count (seconds); each stage's end always prints.
ROLLOUT_LINE_EVERY_S = 30.0


class StepProgress:
    """The lines of one GRPO step as it goes, through ``log`` (plain lines, terminal or not):
    ``[step 3/10] rollouts: ...`` when its episodes are in, then ``selection``, ``update`` and
    ``weight push`` as each ends, with the seconds each took; while the episodes are sampled, their
    count at most every ``every_s``. The step's summary line follows (:meth:`Telemetry.progress_line`)."""

    def __init__(self, step: int, total: int, episodes: int, log: Callable[[str], None],
                 every_s: float = ROLLOUT_LINE_EVERY_S) -> None:
        self.prefix, self.planned, self.log, self.every_s = f"[step {step}/{total}]", episodes, log, every_s
        self.sampled = self.successes = 0
        self.started = self._since = self._last = time.monotonic()

    def plan_more(self, episodes: int) -> None:
        """More episodes for this step (dynamic sampling's extra rounds): counted as planned."""
        self.planned += episodes

    def on_episode(self, record: TrajectoryRecord) -> None:
        self.sampled += 1
        self.successes += record.outcome is Outcome.SUCCESS
        now = time.monotonic()
        if now - self._last >= self.every_s:
            self._last = now
            self.log(f"{self.prefix} rollouts: {self.sampled} of {self.planned} episodes sampled so far, "
                     f"{self.successes} successes, {elapsed(now - self.started)}")

    def _stage(self, name: str, what: str) -> None:
        now = time.monotonic()
        self.log(f"{self.prefix} {name}: {what} in {elapsed(now - self._since)}")
        self._since = now

    def rollouts(self, records: Sequence[TrajectoryRecord], reused: set[str]) -> None:
        groups = len({r.group_id for r in records})
        successes = sum(r.outcome is Outcome.SUCCESS for r in records)
        on_disk = sum(r.episode_id in reused for r in records)
        disk = f" ({on_disk} already on disk from before the resume)" if on_disk else ""
        self._stage("rollouts", f"{len(records)} episodes in {groups} group{'s' * (groups != 1)}, "
                    f"{successes} successes{disk}")

    def selection(self, stats: dict[str, Any]) -> None:
        drawn = stats.get("groups_drawn", 0)
        more = f", {stats['sampling_rounds']} more rounds of dynamic sampling ({drawn} groups drawn)" \
            if stats.get("sampling_rounds") else ""
        audit = f", {int(stats['audit_dropped'])} dropped by the token audit" if stats.get("audit_dropped") else ""
        self._stage("audit and selection", f"{int(stats.get('kept', 0))} episodes kept, "
                    f"{int(stats.get('zero_variance_groups', 0))} of {int(stats.get('groups', 0))} groups "
                    f"zero-variance{audit}{more}")

    def update(self, stats: dict[str, Any]) -> None:
        if not stats.get("updated"):
            self._stage("update", "nothing to train on (no kept episode)")
            return
        steps = int(stats.get("optimizer_steps", 0))
        self._stage("update", f"{steps} optimizer step{'s' * (steps != 1)} on {int(stats.get('trained_samples', 0))} "
                    f"samples, loss {float(stats.get('loss', 0.0)):.4f}")

    def pushed(self, stats: dict[str, Any], weight_version: str) -> None:
        self._stage("weight push", f"the engine samples with weight version {weight_version}"
                    if stats.get("updated") else f"no new weights (version {weight_version} stays)")


class Telemetry:
    """``config`` (the run's): its trackers (``loggers``, ``tensorboard``) get the config, the steps and
    the evals; without it, ``tensorboard`` alone says whether TensorBoard does."""

    def __init__(self, *, env_id: str, run_dir: Path, total_steps: int, metrics_port: int | None,
                 enabled: bool, log: Callable[[str], None], tensorboard: bool = False,
                 config: TrainConfig | None = None) -> None:
        self.enabled, self.total, self.log = enabled, total_steps, log
        self.started = time.monotonic()
        self._steps_from, self._steps_started = 0, self.started
        self.rollout = None
        self._stop: Callable[[], None] | None = None
        self.trackers = Trackers([], log)
        self.step_progress: StepProgress | None = None
        if not enabled:
            return
        if metrics_port is not None:
            self._serve(env_id, metrics_port)
        names = tracker_names(config) if config is not None else (["tensorboard"] if tensorboard else [])
        try:
            self.trackers = Trackers.open(names, run_dir, log)
        except BaseException:
            self.close()
            raise
        if config is not None:
            self.trackers.log_config(config.dump())

    def _serve(self, env_id: str, port: int) -> None:
        from prometheus_client import Gauge

        from envhub.rollout.metrics import RolloutMetrics

        self.rollout = RolloutMetrics(env_id)
        r, labels = self.rollout.registry, ["env"]
        self.env = env_id
        self.gauges = {
            "step": Gauge("envhub_train_step", "GRPO steps done", labels, registry=r),
            "reward_mean": Gauge("envhub_train_reward_mean",
                                 "mean reward of the step's episodes that are not infra failures", labels, registry=r),
            "strict_success": Gauge("envhub_train_strict_success_ratio", "successes / attempted episodes of the step",
                                    labels, registry=r),
            "zero_variance_fraction": Gauge("envhub_train_zero_variance_fraction",
                                            "groups of the step whose rewards were all equal", labels, registry=r),
            "weight_version": Gauge("envhub_train_weight_version", "weight version the engine samples with", labels,
                                    registry=r),
            "weight_version_lag": Gauge("envhub_train_sample_staleness",
                                        "weight versions between the newest weights and the oldest sample trained on",
                                        labels, registry=r),
        }
        self.phase = Gauge("envhub_train_step_seconds", "seconds of the last step by phase", ["env", "phase"],
                           registry=r)
        for gauge in self.gauges.values():
            gauge.labels(env_id)
        for phase in PHASES:
            self.phase.labels(env_id, phase.removesuffix("_s"))
        self.async_gauges = AsyncGauges(r, env_id)
        host, bound, self._stop = self.rollout.serve(str(port))
        self.log(f"metrics: http://{host}:{bound}/metrics")

    def wrap_policy(self, policy: Any) -> Any:
        """The collector's policy: counted as in flight from its start when metrics are served."""
        return self.rollout.policy(policy) if self.rollout is not None else policy

    def begin_step(self, step: int, episodes: int) -> StepProgress:
        """The lines of GRPO step ``step`` (``episodes`` planned) as its stages end."""
        log = self.log if self.enabled else (lambda line: None)
        self.step_progress = StepProgress(step, self.total, episodes, log)
        return self.step_progress

    def on_episode(self, record: TrajectoryRecord) -> None:
        if self.rollout is not None:
            self.rollout.on_episode(record)
        if self.step_progress is not None:
            self.step_progress.on_episode(record)

    def on_step(self, record: dict[str, Any]) -> None:
        if not self.enabled:
            return
        self.log(self.progress_line(record))
        if self.rollout is not None:
            for key, gauge in self.gauges.items():
                value = record.get(key)
                if value is not None:
                    gauge.labels(self.env).set(float(value))
            for phase in PHASES:
                self.phase.labels(self.env, phase.removesuffix("_s")).set(record["time"].get(phase, 0.0))
            self.async_gauges.update(record)
        if self.trackers.trackers:
            self.trackers.log_step(record["step"], dict(_scalars(record)))

    def on_eval(self, result: dict[str, Any]) -> None:
        if self.trackers.trackers:
            self.trackers.log_eval(int(result["step"]), str(result["tag"]), eval_scalars(result))

    def start_steps(self, step: int) -> None:
        """The GRPO steps begin (or resume) at ``step``: the ETA counts the steps timed from here."""
        self._steps_from, self._steps_started = step, time.monotonic()

    def progress_line(self, r: dict[str, Any]) -> str:
        done = r["step"]
        elapsed = time.monotonic() - self._steps_started
        eta = elapsed / max(done - self._steps_from, 1) * max(self.total - done, 0)
        return (f"step {done}/{self.total}  reward {r['reward_mean']:.3f}  strict success {r['strict_success']:.3f}  "
                f"kept {int(r.get('kept', 0))}  tok/s {r['tokens_per_second']:.0f}  "
                f"step {sum(v for k, v in r['time'].items() if k != 'verify_s'):.1f}s  ETA {_duration(eta)}"
                + ("  (replayed: its rollout time is the first run's, its episodes were on disk)"
                   if r.get("replayed") else ""))

    def close(self) -> None:
        if self._stop is not None:
            self._stop()
            self._stop = None
        self.trackers.close()


def _scalars(record: dict[str, Any], prefix: str = "train/") -> list[tuple[str, float]]:
    out = []
    for key, value in record.items():
        if isinstance(value, dict):
            out.extend(_scalars(value, f"{prefix}{key}/"))
        elif isinstance(value, (int, float)) and not isinstance(value, bool) and key != "step":
            out.append((f"{prefix}{key}", float(value)))
    return out


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 3600}h{seconds // 60 % 60:02d}m" if seconds >= 3600 else f"{seconds // 60}m{seconds % 60:02d}s"


def rollout_counts(records: Sequence[TrajectoryRecord]) -> dict[str, float]:
    """Per-step sums over a rank's episodes (summed again over ranks by the loop)."""
    counts: Counter[str] = Counter({f"outcome/{o.value}": 0 for o in Outcome})
    for r in records:
        counts["attempted"] += 1
        counts[f"outcome/{r.outcome.value}"] += 1
        counts["success"] += r.outcome is Outcome.SUCCESS
        counts["infra"] += r.outcome.is_infra
        counts["reward_sum"] += 0.0 if r.outcome.is_infra else float(r.reward)
        counts["sampled_tokens"] += sum(r.response_mask)
        counts["verifier_s"] += float(r.metrics.verifier_seconds)
        judged = [layer for layer in (r.verdict.layers if r.verdict else []) if layer.layer == "quality"
                  and "pin" in layer.details]
        if judged:
            counts["judged"] += 1
            counts["judge_term_sum"] += sum(float(layer.details.get("weight", 0.0)) * layer.score for layer in judged)
            counts["judge_unparseable"] += sum(int(layer.details.get("unparseable", 0)) for layer in judged)
    for key in ("attempted", "success", "infra", "reward_sum", "sampled_tokens", "verifier_s", "judged",
                "judge_term_sum", "judge_unparseable"):
        counts.setdefault(key, 0)
    return {k: float(v) for k, v in counts.items()}


class StepTimer:
    """Wall seconds of a step's stages: :meth:`lap` ends the stage running since the last lap."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._since = time.monotonic()

    def lap(self, name: str) -> None:
        now = time.monotonic()
        self.seconds[name], self._since = now - self._since, now


def step_record(step: int, records: Sequence[TrajectoryRecord], samples: list[Any], stats: dict[str, Any],
                seconds: dict[str, float], *, weight_version: str, lr: float, dist: fsdp.DistInfo,
                reused: Sequence[TrajectoryRecord] = ()) -> dict[str, Any]:
    """The line of ``RUN/steps.jsonl`` of ``step``, over every rank's ``records`` (this rank's episodes)
    and ``samples`` (those it trained on); ``stats`` are the selection's and the update's, ``seconds``
    the stages' (rollout_s, train_s, weight_sync_s); ``reused``: the records that came back from disk
    after a resume (not sampled in ``rollout_s``). Every rank calls it (it sums over ranks)."""
    counts = fsdp.all_reduce_sum(rollout_counts(records), dist)
    again = fsdp.all_reduce_sum({"n": float(len(reused)),
                                 "tokens": float(sum(sum(r.response_mask) for r in reused))}, dist)
    attempted = max(counts["attempted"], 1)
    tokens = counts["sampled_tokens"]
    trained = {s.episode_id for s in samples}
    return {
        "step": step, "weight_version": weight_version,
        # the policy's mean reward is over the episodes it is scored on: infra outcomes (reward 0,
        # ours) would drag it down; strict success keeps them in its denominator (success / attempted)
        "reward_mean": counts["reward_sum"] / max(counts["attempted"] - counts["infra"], 1),
        "strict_success": counts["success"] / attempted,
        "success_excluding_infra": counts["success"] / max(counts["attempted"] - counts["infra"], 1),
        "outcomes": {k.removeprefix("outcome/"): int(v) for k, v in counts.items() if k.startswith("outcome/")},
        "attempted": int(counts["attempted"]),
        "tokens_per_success": tokens / counts["success"] if counts["success"] else None,
        # the LLM judge's bounded term (weight x score) over the episodes it judged (successes only)
        "judge": {"judged": int(counts["judged"]), "unparseable": int(counts["judge_unparseable"]),
                  "term_mean": counts["judge_term_sum"] / counts["judged"] if counts["judged"] else None},
        **stats,
        "trained_episodes": sorted(fsdp.all_gather_lists([s.episode_id for s in samples], dist)),
        "untrained_episodes": sorted(fsdp.all_gather_lists(
            sorted({r.episode_id for r in records} - trained), dist)),
        "tokens_per_second": (tokens - again["tokens"]) / max(seconds["rollout_s"], 1e-9),
        "resumed_episodes": int(again["n"]),
        "time": {"rollout_s": seconds["rollout_s"], "verify_s": counts["verifier_s"], "train_s": seconds["train_s"],
                 "weight_sync_s": seconds["weight_sync_s"]},
        "lr": lr, "rss_mb": rss_mb(), "device_peak_mb": device_peak_mb(dist.device),
    }


def headline(summary: dict[str, Any]) -> str:
    """The run's last console line: what it trained (or that it trained nothing) and its final eval."""
    steps, updates = summary["steps"], summary.get("optimizer_steps", 0)
    trained = summary.get("trained_samples", 0)
    what = (f"trained {updates} optimizer steps on {trained} samples in {steps} GRPO steps" if updates
            else f"trained nothing in {steps} GRPO steps (0 optimizer steps: every group had zero variance)"
            if steps else "no GRPO steps")
    final = summary.get("final_eval")
    score = (f"; final strict success {final['strict_success']:.3f} on {final['episodes']} episodes"
             if final else "")
    stop = f"; stopped: {summary['stopped']}" if summary.get("stopped") else ""
    return f"done: {what}, weight version {summary.get('weight_version')}{score}{stop}"


def device_peak_mb(device: Any) -> float | None:
    """The most memory torch has allocated on a CUDA ``device`` so far, in MiB (None on the CPU: ``rss_mb``)."""
    import torch

    return torch.cuda.max_memory_allocated(device) / 2**20 if device.type == "cuda" else None


def rss_mb() -> float:
    """Resident memory of this process now, in MiB (Linux)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0
