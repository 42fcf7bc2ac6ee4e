"""``envhub bench async``: synchronous and asynchronous training (``rollout.mode``) side by side, same run.

Both modes get the same model, tasks (``bench/SlowLetter-v0``, whose tool takes ``--latency`` seconds a
call: :mod:`envhub.trainer.bench_async_env`), group size, groups per step, ``max_new_tokens``, learning
rate, torch threads, env workers (``rollout.concurrency``: the episodes of ``max_staleness + 1`` steps,
of which a synchronous step can use one step's) and the decoupled mismatch correction, which recomputes
the old policy on both sides; every sample is trained (``drop_zero_variance: false``; async keeps a
stale sample for the correction, ``stale_samples: reweight``, instead of dropping it), so both train
``steps x groups_per_step x group_size`` samples. Each mode runs in its own subprocess, ``--rounds``
times per latency, the order alternating (sync first in odd rounds), so a machine that speeds up or
slows down weighs on both alike; round ``k`` runs both modes with seed ``--seed + k - 1`` (a synchronous
run is one learning curve per seed: one seed for every round would hide its spread). Per run, timed from outside around ``train_step`` only:

* **trained samples per hour**: samples trained over the seconds of the steps (the model load, the
  producer's shutdown and the validation are not in it);
* **trainer idle ratio**: the trainer waiting for samples over the step time (sync: the rollout stage,
  during which the trainer waits; async: ``async_trainer_idle_ratio``);
* **mean version lag**: trainer version minus first-turn version of the trained samples (0 in sync);
* **validation strict success** after the same number of updates (``--eval-episodes`` of the validation
  split at temperature 1).

The figures are medians over the rounds with their range; the speed-up is the median of the rounds'
ratios async / sync. It says plainly when async did not help (under ``HELPED``: no tool latency, or a
model whose compute dominates the step). No figure here is a test assertion.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from envhub.rollout.stats import spread
from envhub.trainer.bench import child_env, model_dir, run_child

MODES = ("sync", "async")
#: the issue's target at a tool latency of 1 s or more (async over sync, samples per hour; lag in versions)
TARGETS = {"speedup": 1.5, "lag": 1.0}
#: below this median speed-up async "did not help"
HELPED = 1.2


@dataclass
class AsyncBenchSettings:
    """What both modes share; ``model`` is ``tiny`` (a random model with SmolLM2's tokenizer), a known
    model name such as ``smollm2-135m``, or a local model dir."""

    model: str = "tiny"
    #: past the knee of every run seen (35 runs: the reward first reached 0.9 at step 9 to 23; see docs/training.md)
    steps: int = 40
    rounds: int = 3
    latencies: tuple[float, ...] = (0.0, 1.0)
    group_size: int = 8
    groups_per_step: int = 4
    #: one token: the answer's first letter is all the task grades (the learning test's settings)
    max_new_tokens: int = 1
    max_staleness: int = 1
    eval_episodes: int = 64
    #: high, with grad_clip 1.0: the tiny random model learns the task within the bench's steps (the reward
    #: climbs from ~0.2 to 1.0 within a few steps, at a step that varies from run to run: the knee)
    lr: float = 0.03
    threads: int = 1
    seed: int = 0
    #: ``algorithm.mismatch.normalize`` of both modes (``group`` measured no better here; see docs/training.md)
    normalize: str = "none"

    def __post_init__(self) -> None:
        problems = [f"{name} must be >= {low}, got {getattr(self, name)}" for name, low in (
            ("steps", 1), ("rounds", 1), ("group_size", 2), ("groups_per_step", 1), ("max_new_tokens", 1),
            ("max_staleness", 0), ("eval_episodes", 1), ("threads", 1)) if getattr(self, name) < low]
        if not self.latencies or any(lat < 0 for lat in self.latencies):
            problems.append(f"latencies must be one or more seconds >= 0, got {list(self.latencies)}")
        if problems:
            raise ValueError("envhub bench async: " + "; ".join(problems))

    @property
    def samples_per_step(self) -> int:
        return self.groups_per_step * self.group_size


def trainer_config(s: AsyncBenchSettings, mode: str, latency: float, model: Path, run_dir: Path) -> dict[str, Any]:
    """One run's trainer config: the same for both modes but ``rollout.mode`` (and, async, what a stale
    sample becomes)."""
    batch = s.samples_per_step
    rollout: dict[str, Any] = {"groups_per_step": s.groups_per_step, "group_size": s.group_size,
                               "concurrency": (s.max_staleness + 1) * batch, "max_response_tokens": s.max_new_tokens + 32,
                               "max_context": 512, "mode": mode, "max_staleness": s.max_staleness}
    if mode == "async":
        rollout["stale_samples"] = "reweight"
    return {
        "run_dir": str(run_dir), "model": str(model),
        "env": {"id": "bench/SlowLetter-v0", "split": "train", "validation_split": "validation",
                "args": {"latency_s": latency}},
        "sampling": {"max_new_tokens": s.max_new_tokens, "temperature": 1.0},
        "rollout": rollout,
        "algorithm": {"loss": "grpo", "drop_zero_variance": False,
                      "mismatch": {"mode": "decoupled", "normalize": s.normalize}},
        "optim": {"lr": s.lr, "micro_batch_size": batch, "schedule": "constant", "grad_clip": 1.0},
        "eval": {"every": 0, "episodes": s.eval_episodes, "temperature": 1.0},
        "steps": s.steps, "seed": s.seed, "threads": s.threads, "checkpoint_every": s.steps + 1,
    }


# ---- the child: one mode's run ------------------------------------------------------------------------

#: Step-line figures a child keeps beside its timings (the update's health and the async staleness).
DIAGNOSTICS = ("loss", "grad_norm", "entropy", "clip_fraction", "ratio_mean", "ratio_max", "trainer_engine_gap",
               "informative_groups", "async_stale_reweighted", "async_version_lag_max", "is_weight_mean",
               "is_group_tilt")

def child_main(config_path: Path, out_path: Path) -> int:
    from envhub.store import write_json_atomic
    from envhub.trainer.bench_async_env import register_bench_env
    from envhub.trainer.config import parse_config
    from envhub.trainer.loop import Trainer

    register_bench_env()
    config = parse_config(json.loads(config_path.read_text(encoding="utf-8")), where="bench config")
    if config.rollout.mode == "async":
        from envhub.trainer.async_loop import AsyncTrainer

        trainer: Trainer = AsyncTrainer(config, log=lambda line: None)
    else:
        trainer = Trainer(config, log=lambda line: None)
    steps = []
    try:
        for step in range(1, config.steps + 1):
            t0 = time.perf_counter()
            rec = trainer.train_step()
            seconds = time.perf_counter() - t0
            idle = rec.get("async_trainer_idle_ratio")
            steps.append({"step": step, "seconds": seconds, "trained_samples": int(rec.get("trained_samples", 0)),
                          "optimizer_steps": int(rec.get("optimizer_steps", 0)),
                          "trainer_idle_ratio": idle if idle is not None else rec["time"]["rollout_s"] / seconds,
                          "version_lag_mean": rec.get("async_version_lag_mean", 0.0),
                          "stale_dropped": int(rec.get("async_stale_dropped", 0)),
                          "reward_mean": rec.get("reward_mean"),
                          # what shapes an update, to tell a run that learns from one that does not
                          **{key: rec.get(key) for key in DIAGNOSTICS}})
        stop = getattr(trainer, "stop_rollouts", None)
        if stop is not None:
            stop()
        result = trainer.evaluate("bench") or {}
        drift = engine_drift(trainer)
    finally:
        trainer.close()
    write_json_atomic(out_path, {"steps": steps, "engine_drift": drift, "validation": {
        "strict_success": result.get("strict_success"), "episodes": result.get("episodes"),
        "interval": result.get("interval")}})
    return 0


def engine_drift(trainer: Any) -> float | None:
    """After the last step and the eval: the largest difference between a weight the in-process engine
    samples with and the trained module's (0 when the engine holds what the trainer trained; None
    when the engine is no in-process copy)."""
    import torch

    engine_model = getattr(trainer.models.engine, "model", None)
    if engine_model is None or engine_model is trainer.models.model:
        return None
    trained = trainer.models.model.state_dict()
    with torch.no_grad():
        return max(float((value.float() - trained[key].float()).abs().max())
                   for key, value in engine_model.state_dict().items() if key in trained)


def run_figures(child: dict[str, Any]) -> dict[str, Any]:
    steps = child["steps"]
    seconds = sum(s["seconds"] for s in steps)
    trained = sum(s["trained_samples"] for s in steps)
    return {"seconds": seconds, "step_seconds": [s["seconds"] for s in steps], "trained_samples": trained,
            "updates": sum(s["optimizer_steps"] for s in steps), "samples_per_hour": trained / seconds * 3600,
            "trainer_idle_ratio": statistics.fmean(s["trainer_idle_ratio"] for s in steps),
            "version_lag_mean": statistics.fmean(s["version_lag_mean"] for s in steps),
            "stale_dropped": sum(s["stale_dropped"] for s in steps), "validation": child["validation"]}


def pooled(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """A mode's figures over the rounds: medians with their range; validation pooled over every episode."""
    episodes = sum(r["validation"]["episodes"] or 0 for r in runs)
    successes = sum((r["validation"]["strict_success"] or 0.0) * (r["validation"]["episodes"] or 0) for r in runs)
    return {**{key: spread([r[key] for r in runs]) for key in ("samples_per_hour", "trainer_idle_ratio",
                                                                "version_lag_mean")},
            "trained_samples": [r["trained_samples"] for r in runs], "updates": [r["updates"] for r in runs],
            "stale_dropped": sum(r["stale_dropped"] for r in runs),
            "validation": {"strict_success": successes / episodes if episodes else None, "episodes": episodes}}


def within_noise(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Two strict-success rates differ by less than two standard errors of their difference."""
    pa, na, pb, nb = a["strict_success"], a["episodes"], b["strict_success"], b["episodes"]
    if pa is None or pb is None or not na or not nb:
        return False
    p = (pa * na + pb * nb) / (na + nb)
    se = math.sqrt(max(p * (1 - p), 1e-12) * (1 / na + 1 / nb))
    return abs(pa - pb) <= 2 * se


def bench_latency(s: AsyncBenchSettings, latency: float, model: Path, work: Path) -> dict[str, Any]:
    here = work / f"latency-{latency:g}"
    here.mkdir(parents=True)
    rounds = []
    for number in range(1, s.rounds + 1):
        order = MODES if number % 2 else MODES[::-1]
        runs = {}
        for mode in order:
            config = here / f"{mode}-{number}.json"
            # each round its own seed, the same for both modes: a synchronous run is one curve per seed, so
            # with one seed for every round its spread would never show beside async's (whose timing varies)
            seeded = replace(s, seed=s.seed + number - 1)
            config.write_text(json.dumps(trainer_config(seeded, mode, latency, model, here / f"{mode}-run-{number}")),
                              encoding="utf-8")
            out = here / f"{mode}-{number}.out.json"
            argv = [sys.executable, "-m", "envhub.trainer.bench_async", "_child", str(config), str(out)]
            run_child(argv, child_env(s.threads), here / f"{mode}-{number}.log")
            runs[mode] = run_figures(json.loads(out.read_text(encoding="utf-8")))
        rounds.append({"round": number, "seed": s.seed + number - 1, "order": list(order), **runs,
                       "speedup": runs["async"]["samples_per_hour"] / runs["sync"]["samples_per_hour"]})
    result: dict[str, Any] = {"latency_s": latency, **{mode: pooled([r[mode] for r in rounds]) for mode in MODES},
                              "speedup": spread([r["speedup"] for r in rounds]), "rounds": rounds}
    result["validation_within_noise"] = within_noise(result["async"]["validation"], result["sync"]["validation"])
    result["helped"] = result["speedup"]["median"] >= HELPED
    if latency >= 1.0:
        result["target"] = {"speedup": result["speedup"]["median"] >= TARGETS["speedup"],
                            "lag": result["async"]["version_lag_mean"]["median"] <= TARGETS["lag"],
                            "validation": result["validation_within_noise"]}
    return result


def machine() -> dict[str, Any]:
    return {"cpus": os.cpu_count(), "processor": platform.processor() or platform.machine(),
            "python": platform.python_version()}


def run_bench(settings: AsyncBenchSettings | None = None, *, out: Callable[[str], None] = print,
              out_file: Path | None = None, work_dir: Path | None = None) -> dict[str, Any]:
    """Every latency, both modes, ``rounds`` times; prints the table and returns the figures."""
    s = settings or AsyncBenchSettings()
    model = model_dir(s.model)
    work = Path(tempfile.mkdtemp(prefix="envhub-bench-async-")) if work_dir is None else Path(work_dir)
    work.mkdir(parents=True, exist_ok=True)
    try:
        result = {"settings": {**asdict(s), "latencies": list(s.latencies)}, "machine": machine(),
                  "samples_per_run": s.steps * s.samples_per_step,
                  "latencies": [bench_latency(s, lat, model, work) for lat in s.latencies]}
    finally:
        if work_dir is None:
            shutil.rmtree(work, ignore_errors=True)
    for line in report_lines(result):
        out(line)
    if out_file is not None:
        out_file.write_text(json.dumps(result, indent=2), encoding="utf-8")
    return result


def _range(f: dict[str, Any], fmt: str) -> str:
    return f"{f['median']:{fmt}} [{f['min']:{fmt}}, {f['max']:{fmt}}]"


def report_lines(result: dict[str, Any]) -> list[str]:
    s = result["settings"]
    lines = [f"envhub bench async: model {s['model']}, {s['steps']} steps x {s['groups_per_step']} groups x "
             f"{s['group_size']} samples ({result['samples_per_run']} trained samples a run), max_staleness "
             f"{s['max_staleness']}, importance weights normalized: {s.get('normalize', 'none')}, {s['rounds']} rounds "
             f"(order alternating, seeds {s['seed']}-{s['seed'] + s['rounds'] - 1}), {s['threads']} torch thread(s), "
             f"{result['machine']['cpus']} CPUs; medians [min, max] over the rounds",
             f"{'latency':>8} {'mode':>5} {'samples/h':>24} {'trainer idle':>20} {'lag':>16} "
             f"{'val strict':>11} {'trained':>8}"]
    for row in result["latencies"]:
        for mode in MODES:
            f = row[mode]
            val = f["validation"]
            lines.append(f"{row['latency_s']:>7g}s {mode:>5} {_range(f['samples_per_hour'], '.0f'):>24} "
                         f"{_range(f['trainer_idle_ratio'], '.2f'):>20} {_range(f['version_lag_mean'], '.2f'):>16} "
                         f"{val['strict_success']:>7.3f}/{val['episodes']:<3} {sum(f['trained_samples']):>8}")
    lines.append("")
    for row in result["latencies"]:
        lines.append(verdict(row, int(result["settings"].get("max_staleness", 1))))
    return lines


def verdict(row: dict[str, Any], max_staleness: int = 1) -> str:
    lat, sp, a = row["latency_s"], row["speedup"], row["async"]
    said = (f"latency {lat:g} s: async {_range(sp, '.2f')}x the trained samples per hour of sync, mean lag "
            f"{a['version_lag_mean']['median']:.2f} versions, validation "
            f"{'within' if row['validation_within_noise'] else 'NOT within'} noise of sync")
    if not row["helped"]:
        why = ("max_staleness 0: no sample may be trained a version late, so rollouts wait for every update "
               "and nothing overlaps" if max_staleness == 0 else
               "no tool latency: the step is compute-bound, nothing to overlap" if lat == 0 else
               "the model's compute dominates the step: the overlap saves little")
        said += f". Async did NOT help here ({why}); use rollout.mode: sync"
    if "target" in row:
        missed = [k for k, ok in row["target"].items() if not ok]
        said += f"; target (>= {TARGETS['speedup']}x, lag <= {TARGETS['lag']:g}, validation within noise): " + (
            "met" if not missed else "NOT met (" + ", ".join(missed) + ")")
    return said


# ---- the command line ---------------------------------------------------------------------------------

def parser() -> argparse.ArgumentParser:
    d = AsyncBenchSettings()
    p = argparse.ArgumentParser(prog="envhub bench async", description=(__doc__ or "").split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--model", default=d.model, help="tiny, smollm2-135m, or a local model dir")
    p.add_argument("--steps", type=int, default=d.steps, help="training steps of each run")
    p.add_argument("--rounds", type=int, default=d.rounds, help="rounds of both modes per latency, order alternating")
    p.add_argument("--latency", type=float, action="append", default=None,
                   help="seconds the env's tool takes a call (repeatable; default 0 and 1)")
    p.add_argument("--group-size", type=int, default=d.group_size)
    p.add_argument("--groups-per-step", type=int, default=d.groups_per_step)
    p.add_argument("--max-new-tokens", type=int, default=d.max_new_tokens)
    p.add_argument("--max-staleness", type=int, default=d.max_staleness)
    p.add_argument("--eval-episodes", type=int, default=d.eval_episodes, help="validation episodes after each run")
    p.add_argument("--lr", type=float, default=d.lr)
    p.add_argument("--threads", type=int, default=d.threads, help="torch/OpenMP threads of each run")
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--normalize", choices=("none", "group"), default=d.normalize,
                   help="algorithm.mismatch.normalize of both modes")
    p.add_argument("--out", type=Path, default=None, help="write the figures as JSON")
    p.add_argument("--work-dir", type=Path, default=None, help="keep the runs and logs here (default: a temp dir)")
    return p


def main(argv: list[str] | None = None) -> int:
    """``envhub bench async [options]`` (``python -m envhub.trainer.bench_async``); 2 on bad options."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["_child"]:
        return child_main(Path(argv[1]), Path(argv[2]))
    args = parser().parse_args(argv)
    try:
        settings = AsyncBenchSettings(
            model=args.model, steps=args.steps, rounds=args.rounds,
            latencies=tuple(args.latency) if args.latency else AsyncBenchSettings.latencies,
            group_size=args.group_size, groups_per_step=args.groups_per_step, max_new_tokens=args.max_new_tokens,
            max_staleness=args.max_staleness, eval_episodes=args.eval_episodes, lr=args.lr, threads=args.threads,
            seed=args.seed, normalize=args.normalize)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    run_bench(settings, out_file=args.out, work_dir=args.work_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
