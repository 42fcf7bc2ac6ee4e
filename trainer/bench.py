"""``envhub bench train``: GRPO steps of the bundled trainer next to TRL's ``GRPOTrainer``, same run.

Both sides get the same model, the same prompts (the first ``--prompts`` tasks of the env's split,
rendered with the model's chat format and the env's tools), the same group size, ``max_new_tokens``,
temperature and learning rate, fp32 on the CPU, the same torch thread count, TRL without vLLM. Each
side runs in its own subprocess for ``--warmup`` + ``--steps`` steps; the figures are the median
seconds per measured step and the child's peak RSS (``ru_maxrss`` from ``os.wait4``), and the
ratios ours/TRL. Per step:

* **ours** (:meth:`envhub.trainer.loop.Trainer.train_step`): rollouts through the env with the
  episode collector (the in-process engine samples from the training module, the env steps, its
  verifier grades), token audit, selection and advantages, the update, the new weight version;
* **TRL single-turn**: ``model.generate``, a reward function that grades each completion with the
  env's own parser and verifier, the update;
* **TRL multi-turn**: ``rollout_func`` = :class:`envhub.adapters.trl.EnvhubRolloutFunc` (whole
  envhub episodes played with TRL's model), its verifier reward, the update.

Neither side checkpoints during the measured steps (TRL: ``save_strategy="no"``). Zero-variance
groups are kept on our side (``drop_zero_variance: false``) because TRL trains on them too: a
step that skipped its update would not be the same work.

The memory check runs the real ``python -m envhub.trainer`` (checkpoints and all) on the tiny model
for ``--memory-steps`` steps and reports the RSS growth from step ``--memory-from`` to the last
step, from ``RUN/steps.jsonl``. No figure here is ever a test assertion.

With ``--lora`` both sides are ours: the same config with a LoRA adapter (``lora``: r, alpha 2r, every
linear layer) and without (``full``); the ratios are LoRA over full fine-tuning, with no target.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from envhub.rollout.stats import spread

#: The env of each mode and its kwargs to ``envhub.make``: one turn, or two with the env's reply between.
MODES: dict[str, tuple[str, dict[str, Any]]] = {
    "single": ("envhub/ReasoningGym-v0", {"budget": {"max_turns": 1}}),
    "multi": ("envhub/Computation-v0", {"budget": {"max_turns": 2, "max_format_errors": 2}}),
}
TARGETS = {"time": 0.7, "memory": 0.9, "rss_growth_pct": 2.0}
TINY = "tiny"
#: steps in each median of the memory check
WINDOW = 5
#: the trainer config each of our sides runs (the TRL side gets the same settings as TRL's)
CONFIG_OF = {"ours": "ours_config", "full": "ours_config", "lora": "lora_config"}
TRL_DOES = {
    "single": "model.generate + reward (the env's parser and verifier per completion) + update",
    "multi": "rollout_func (envhub episodes through adapters/trl.py, TRL's model) + verifier reward + update",
}


@dataclass
class BenchSettings:
    """What both sides share; ``model`` is ``tiny`` (a 3M-parameter random model), a known model
    name such as ``smollm2-135m``, or a local model dir."""

    model: str = TINY
    steps: int = 2
    warmup: int = 1
    group_size: int = 4
    prompts: int = 2
    max_new_tokens: int = 32
    #: multi-turn: the most tokens of an episode's whole response, env replies included (TRL's
    #: ``max_completion_length``); None: 2 * max_new_tokens + 128
    max_response_tokens: int | None = None
    max_context: int = 2048
    #: completions per forward and backward, on both sides (TRL: ``per_device_train_batch_size``, with
    #: ``gradient_accumulation_steps`` making up the step); None: all of the step's in one
    micro_batch_size: int | None = None
    temperature: float = 1.0
    lr: float = 1e-5
    threads: int = 1
    seed: int = 0
    #: each round runs both sides once (warmup + steps each), the order alternating between rounds
    rounds: int = 3
    mode: str = "both"
    memory_steps: int = 50
    memory_from: int = 10
    #: TRL's own default (GRPOConfig.gradient_checkpointing=True); ours is activation_checkpointing: auto
    trl_gradient_checkpointing: bool = True
    split: str = "train"
    #: compare a LoRA adapter run ("lora") with full fine-tuning ("full") instead of ours with TRL
    lora: bool = False
    lora_r: int = 16
    modes: dict[str, tuple[str, dict[str, Any]]] = field(default_factory=lambda: dict(MODES))

    def __post_init__(self) -> None:
        problems = [f"{name} must be >= {low}, got {getattr(self, name)}" for name, low in (
            ("steps", 1), ("warmup", 0), ("rounds", 1), ("group_size", 2), ("prompts", 1), ("max_new_tokens", 1),
            ("threads", 1), ("memory_steps", 0), ("memory_from", 1), ("lora_r", 1)) if getattr(self, name) < low]
        if self.mode not in ("single", "multi", "both"):
            problems.append(f"mode must be single, multi or both, got {self.mode!r}")
        if self.micro_batch_size is not None and (self.micro_batch_size < 1
                                                  or self.completions % self.micro_batch_size):
            problems.append(f"micro_batch_size ({self.micro_batch_size}) must divide the completions per step "
                            f"({self.completions})")
        if self.temperature <= 0:
            problems.append("temperature must be > 0 (GRPO samples; greedy groups have zero variance)")
        if self.memory_steps and self.memory_steps <= self.memory_from:
            problems.append(f"memory_steps ({self.memory_steps}) must be above memory_from ({self.memory_from}), "
                            "or 0 to skip the memory check")
        if problems:
            raise ValueError("envhub bench train: " + "; ".join(problems))

    @property
    def sides(self) -> tuple[str, str]:
        """The two sides, the measured one first: the ratios are the first's over the second's."""
        return ("lora", "full") if self.lora else ("ours", "trl")

    @property
    def completions(self) -> int:
        return self.prompts * self.group_size

    @property
    def micro_batch(self) -> int:
        return self.micro_batch_size or self.completions

    def response_budget(self, mode: str) -> int:
        if mode == "single":
            return self.max_new_tokens
        return self.max_response_tokens or 2 * self.max_new_tokens + 128


class ChildError(RuntimeError):
    """A benchmark subprocess failed; the message ends with its output's tail."""


def model_dir(spec: str) -> Path:
    """The local dir of ``spec`` (``tiny`` is built on first use)."""
    if spec == TINY:
        from envhub.adapters.engines.tiny import build_tiny_model

        # a real model's init: near-uniform, so completions run to max_new_tokens on both sides
        return build_tiny_model(layers=2, hidden=64, init_std=0.02)
    from envhub.adapters.engines.models import resolve_model

    return resolve_model(spec)


def first_tasks(env_id: str, env_args: dict[str, Any], split: str, n: int) -> list[str]:
    from envhub.registry import make

    env = make(env_id, split=split, **env_args)
    try:
        ids = list(env.tasks.task_ids(split))[:n]
    finally:
        env.close()
    if len(ids) < n:
        raise ValueError(f"{env_id} has {len(ids)} tasks in split {split!r}; --prompts asks for {n}")
    return ids


def ours_config(s: BenchSettings, mode: str, model: Path, run_dir: Path, curriculum: Path,
                steps: int) -> dict[str, Any]:
    """The trainer config of one side: the settings TRL gets too, our defaults for everything else."""
    env_id, env_args = s.modes[mode]
    n = s.completions
    return {
        "run_dir": str(run_dir), "model": str(model),
        "env": {"id": env_id, "split": s.split, "validation_split": None, "args": env_args,
                "curriculum": str(curriculum)},
        "sampling": {"max_new_tokens": s.max_new_tokens, "temperature": s.temperature},
        "rollout": {"groups_per_step": s.prompts, "group_size": s.group_size, "concurrency": n,
                    "max_response_tokens": s.response_budget(mode), "max_context": s.max_context},
        "algorithm": {"loss": "grpo", "drop_zero_variance": False},
        "optim": {"lr": s.lr, "micro_batch_size": s.micro_batch, "schedule": "constant"},
        "steps": steps, "seed": s.seed, "threads": s.threads,
    }


def child_env(threads: int) -> dict[str, str]:
    """The environment of every child: the same thread count for OpenMP, MKL and torch."""
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads),
           "TOKENIZERS_PARALLELISM": "false", "TRL_EXPERIMENTAL_SILENCE": "1", "PYTHONUNBUFFERED": "1"}
    env.pop("WORLD_SIZE", None)
    env.pop("RANK", None)
    return env


def run_child(argv: list[str], env: dict[str, str], log_path: Path) -> float:
    """Run ``argv`` to the end, its output to ``log_path``; returns its peak RSS in MiB
    (``ru_maxrss`` of this child alone, from ``os.wait4``). ChildError when it fails."""
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env)
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        except BaseException:
            proc.kill()
            proc.wait()
            raise
        proc.returncode = code = os.waitstatus_to_exitcode(status)
    if code != 0:
        tail = log_path.read_text(encoding="utf-8", errors="replace")[-3000:]
        why = " (SIGKILL: out of memory?)" if code == -9 else ""
        raise ChildError(f"{' '.join(argv[1:])} exited {code}{why}; its output ({log_path}) ends:\n{tail}")
    return usage.ru_maxrss / 1024


def side_figures(child: dict[str, Any], peak_rss_mb: float, warmup: int) -> dict[str, Any]:
    """A child's per-step lines as the side's figures: the median over the steps after the warmup."""
    measured = child["steps"][warmup:]
    mean = lambda key: statistics.fmean(v for r in measured if (v := r.get(key)) is not None) \
        if any(r.get(key) is not None for r in measured) else None  # noqa: E731
    return {"seconds_per_step": statistics.median(r["seconds"] for r in measured), "peak_rss_mb": peak_rss_mb,
            "step_seconds": [r["seconds"] for r in child["steps"]], "rss_mb_after_step": [r["rss_mb"] for r in child["steps"]],
            "reward_mean": mean("reward_mean"), "loss": mean("loss"), "completion_tokens_mean": mean("completion_tokens"),
            "prompt_tokens_mean": child.get("prompt_tokens_mean"), "does": child["does"],
            **({"time_split": child["steps"][-1]["time"]} if "time" in child["steps"][-1] else {})}


def ratios(measured: dict[str, Any], baseline: dict[str, Any]) -> dict[str, float]:
    return {"time": measured["seconds_per_step"] / baseline["seconds_per_step"],
            "memory": measured["peak_rss_mb"] / baseline["peak_rss_mb"]}



def pooled(rounds: list[dict[str, Any]], side: str) -> dict[str, Any]:
    """One side's figures over all rounds: the median of every measured step, the median peak RSS."""
    figures = [r[side] for r in rounds]
    measured = [t for f in figures for t in f["step_seconds"][f["warmup"]:]]
    known = lambda key: [f[key] for f in figures if f[key] is not None]  # noqa: E731
    return {**figures[-1], "seconds_per_step": statistics.median(measured), "measured_steps": len(measured),
            "peak_rss_mb": statistics.median(f["peak_rss_mb"] for f in figures),
            "step_seconds": [t for f in figures for t in f["step_seconds"]],
            "rss_mb_after_step": [m for f in figures for m in f["rss_mb_after_step"]],
            **{key: statistics.fmean(v) if (v := known(key)) else None
               for key in ("reward_mean", "loss", "completion_tokens_mean")}}


def bench_mode(s: BenchSettings, mode: str, model: Path, work: Path) -> dict[str, Any]:
    """One mode, both sides, each in its own subprocess, ``s.rounds`` times with the order alternating
    (ours first in round 1, TRL first in round 2, ...), so that a machine that slows down or speeds
    up during the run weighs on both sides alike."""
    env_id, env_args = s.modes[mode]
    tasks = first_tasks(env_id, env_args, s.split, s.prompts)
    here = work / mode
    here.mkdir(parents=True)
    curriculum = here / "tasks.json"
    curriculum.write_text(json.dumps({"task_ids": tasks}), encoding="utf-8")
    total = s.warmup + s.steps
    rounds = []
    for number in range(1, s.rounds + 1):
        spec = {"mode": mode, "env_id": env_id, "env_args": env_args, "split": s.split, "task_ids": tasks,
                "model": str(model), "settings": _plain(s), "response_budget": s.response_budget(mode),
                "ours_config": ours_config(s, mode, model, here / f"ours-run-{number}", curriculum, total),
                "lora_config": {**ours_config(s, mode, model, here / f"lora-run-{number}", curriculum, total),
                                "lora": {"r": s.lora_r, "alpha": 2.0 * s.lora_r}}}
        spec_path = here / f"spec-{number}.json"
        spec_path.write_text(json.dumps(spec), encoding="utf-8")
        first, second = s.sides
        order = (first, second) if number % 2 else (second, first)
        sides = {}
        for side in order:
            out = here / f"{side}-{number}.json"
            argv = [sys.executable, "-m", "envhub.trainer.bench", "_child", side, str(spec_path), str(out)]
            peak = run_child(argv, child_env(s.threads), here / f"{side}-{number}.log")
            sides[side] = {**side_figures(json.loads(out.read_text(encoding="utf-8")), peak, s.warmup),
                           "warmup": s.warmup}
        rounds.append({"round": number, "order": list(order), **sides, "ratio": ratios(sides[first], sides[second])})
    return {"env": env_id, "env_args": env_args, "task_ids": tasks, "completions_per_step": s.completions,
            "max_completion_tokens": s.response_budget(mode), "sides": list(s.sides),
            **{side: pooled(rounds, side) for side in s.sides}, "rounds": rounds,
            "ratio": {key: statistics.median(r["ratio"][key] for r in rounds) for key in ("time", "memory")},
            "ratio_spread": {key: spread([r["ratio"][key] for r in rounds]) for key in ("time", "memory")}}


def memory_check(s: BenchSettings, work: Path) -> dict[str, Any]:
    """RSS of the real ``python -m envhub.trainer`` on the tiny model, step ``memory_from`` to the last."""
    from envhub.run_dir import TrainingRun
    from envhub.store import read_jsonl

    here = work / "memory"
    here.mkdir(parents=True)
    env_id, env_args = s.modes["single"]
    curriculum = here / "tasks.json"
    curriculum.write_text(json.dumps({"task_ids": first_tasks(env_id, env_args, s.split, s.prompts)}), encoding="utf-8")
    config = ours_config(s, "single", model_dir(TINY), here / "run", curriculum, s.memory_steps)
    (here / "config.yaml").write_text(json.dumps(config), encoding="utf-8")  # JSON is YAML
    run_child([sys.executable, "-m", "envhub.trainer", str(here / "config.yaml")], child_env(s.threads),
              here / "train.log")
    lines = list(read_jsonl(TrainingRun(here / "run").steps_path))
    rss = {int(r["step"]): float(r["rss_mb"]) for r in lines}
    last, first = max(rss), s.memory_from
    start, end = rss[first], rss[last]
    # RSS after a step moves by several % from one step to the next (freed buffers the allocator keeps
    # or returns), so the two single readings are shown next to medians of the steps ending at each
    window = lambda to: statistics.median(rss[k] for k in range(max(1, to - WINDOW + 1), to + 1))  # noqa: E731
    late = [rss[k] for k in range(first, last + 1)]
    return {"model": TINY, "steps": last, "from_step": first, "rss_from_mb": start, "rss_to_mb": end,
            "growth_pct": 100.0 * (end - start) / start,
            "window_growth_pct": 100.0 * (window(last) - window(first)) / window(first), "window_steps": WINDOW,
            "step_to_step_range_pct": 100.0 * (max(late) - min(late)) / min(late),
            "rss_mb_by_step": [rss[k] for k in sorted(rss)], "target_pct": TARGETS["rss_growth_pct"],
            "what": "python -m envhub.trainer (checkpoints included)"}


def run_bench(out: Callable[[str], object] = print, settings: BenchSettings | None = None,
              out_file: Path | None = None, work_dir: Path | None = None) -> dict[str, Any]:
    """Measure, print the table, write ``out_file`` (JSON, atomically) when given; returns the figures."""
    s = settings or BenchSettings()
    work = Path(work_dir) if work_dir is not None else Path(tempfile.mkdtemp(prefix="envhub-bench-train-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        model = model_dir(s.model)
        result: dict[str, Any] = {"settings": {**_plain(s), "model_dir": str(model), "completions_per_step": s.completions,
                                               "both": "fp32, CPU, OMP/MKL/torch threads equal, TRL without vLLM"},
                                  "targets": TARGETS}
        for mode in ("single", "multi") if s.mode == "both" else (s.mode,):
            out(f"measuring {mode}-turn: {s.rounds} round(s) of both sides, the order alternating "
                f"({s.warmup} warmup + {s.steps} measured steps per side and round) ...")
            result[mode] = _or_error(bench_mode, s, mode, model, work)
        if s.memory_steps:
            out(f"memory check: python -m envhub.trainer, tiny model, {s.memory_steps} steps ...")
            result["memory"] = _or_error(memory_check, s, work)
        for line in table(result):
            out(line)
        if out_file is not None:
            from envhub.store import write_json_atomic

            write_json_atomic(Path(out_file), result)
            out(f"wrote {out_file}")
        return result
    finally:
        if work_dir is None:
            shutil.rmtree(work, ignore_errors=True)


def _or_error(measure: Callable[..., dict[str, Any]], *args: Any) -> dict[str, Any]:
    """A failed child spoils only its own part of the figures: ``{"error": ...}`` in its place."""
    try:
        return measure(*args)
    except ChildError as exc:
        return {"error": str(exc)}


def failed(result: dict[str, Any]) -> list[str]:
    """The parts of ``result`` whose measurement failed."""
    return [k for k in ("single", "multi", "memory") if "error" in result.get(k, {})]


def table(result: dict[str, Any]) -> list[str]:
    """The figures as text lines: per mode, both sides, the ratios and their targets."""
    s = result["settings"]
    lines = [f"model {s['model']} ({s['model_dir']}); {s['prompts']} prompts x {s['group_size']} = "
             f"{s['completions_per_step']} completions per step in micro-batches of "
             f"{s['micro_batch_size'] or s['completions_per_step']}, max_new_tokens {s['max_new_tokens']}, "
             f"temperature {s['temperature']}, {s['threads']} thread(s); {s['rounds']} round(s) of both sides, "
             f"the order alternating, {s['steps']} measured step(s) after {s['warmup']} warmup per side and round; "
             + (f"LoRA r={s['lora_r']} against full fine-tuning" if s.get("lora")
                else f"TRL gradient_checkpointing={s['trl_gradient_checkpointing']}")]
    for mode in ("single", "multi"):
        if mode not in result:
            continue
        r = result[mode]
        if "error" in r:
            lines += ["", f"{mode}-turn: FAILED: {r['error']}"]
            continue
        first, second = r.get("sides", ("ours", "trl"))
        lines += ["", f"{mode}-turn on {r['env']} (completions up to {r['max_completion_tokens']} tokens)",
                  f"  {'':6} {'s/step':>8} {'peak RSS MiB':>13} {'tokens/compl':>13} {'reward':>7}"]
        for side in (first, second):
            f = r[side]
            tokens = "-" if f["completion_tokens_mean"] is None else f"{f['completion_tokens_mean']:.1f}"
            reward = "-" if f["reward_mean"] is None else f"{f['reward_mean']:.3f}"
            lines.append(f"  {side:6} {f['seconds_per_step']:8.2f} {f['peak_rss_mb']:13.0f} {tokens:>13} {reward:>7}")
        t, m = r["ratio"]["time"], r["ratio"]["memory"]
        targets = ((f" (target <= {TARGETS['time']}x: {_met(t <= TARGETS['time'])})",
                    f" (target <= {TARGETS['memory']}x: {_met(m <= TARGETS['memory'])})") if second == "trl" else ("", ""))
        lines.append(f"  {first}/{second}, median of {len(r['rounds'])} round(s): time {t:.2f}x{targets[0]}, "
                     f"memory {m:.2f}x{targets[1]}")
        ts, ms = r["ratio_spread"]["time"], r["ratio_spread"]["memory"]
        lines.append(f"  spread over the rounds: time {ts['min']:.2f}x-{ts['max']:.2f}x, memory {ms['min']:.2f}x-"
                     f"{ms['max']:.2f}x; per round (first side first): " + ", ".join(
                         f"{'/'.join(x['order'])} {x['ratio']['time']:.2f}x" for x in r["rounds"]))
        lines += [f"  per step, {side}: {r[side]['does']}" for side in (first, second)]
    mem = result.get("memory")
    if mem and "error" in mem:
        lines += ["", f"memory check: FAILED: {mem['error']}"]
    elif mem:
        lines += ["", f"memory: RSS {mem['rss_from_mb']:.0f} MiB at step {mem['from_step']} -> {mem['rss_to_mb']:.0f} "
                  f"MiB at step {mem['steps']}: {mem['growth_pct']:+.2f} % "
                  f"(target < {TARGETS['rss_growth_pct']} %: {_met(mem['growth_pct'] < TARGETS['rss_growth_pct'])}); "
                  f"medians of {mem['window_steps']} steps: {mem['window_growth_pct']:+.2f} % "
                  f"({_met(mem['window_growth_pct'] < TARGETS['rss_growth_pct'])}); step-to-step range "
                  f"{mem['step_to_step_range_pct']:.1f} %"]
    return lines


def _met(ok: bool) -> str:
    return "met" if ok else "NOT met"


def _plain(s: BenchSettings) -> dict[str, Any]:
    data = asdict(s)
    data.pop("modes")
    return data


# ---- the children -------------------------------------------------------------------------------

def child_main(side: str, spec_path: Path, out_path: Path) -> int:
    spec = json.loads(Path(spec_path).read_text(encoding="utf-8"))
    if side in CONFIG_OF:
        from envhub.trainer.bench_ours import ours_child

        result = ours_child(spec[CONFIG_OF[side]])
    else:
        from envhub.trainer.bench_trl import trl_child

        result = trl_child(spec)
    from envhub.store import write_json_atomic

    write_json_atomic(Path(out_path), result)
    return 0


# ---- the command line ---------------------------------------------------------------------------

def parser() -> argparse.ArgumentParser:
    d = BenchSettings()
    p = argparse.ArgumentParser(prog="envhub bench train", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--model", default=d.model, help="tiny, smollm2-135m, or a local model dir")
    p.add_argument("--steps", type=int, default=d.steps, help="measured steps per side")
    p.add_argument("--warmup", type=int, default=d.warmup, help="steps per side before the measured ones")
    p.add_argument("--rounds", type=int, default=d.rounds,
                   help="rounds of both sides, the order alternating; the ratio is the median of the rounds'")
    p.add_argument("--group-size", type=int, default=d.group_size)
    p.add_argument("--prompts", type=int, default=d.prompts, help="distinct prompts (groups) per step")
    p.add_argument("--max-new-tokens", type=int, default=d.max_new_tokens)
    p.add_argument("--max-response-tokens", type=int, default=None,
                   help="multi-turn response budget, env replies included (default 2 * max_new_tokens + 128)")
    p.add_argument("--micro-batch-size", type=int, default=None,
                   help="completions per forward/backward on both sides (default: all of the step's)")
    p.add_argument("--temperature", type=float, default=d.temperature)
    p.add_argument("--threads", type=int, default=d.threads, help="torch/OpenMP threads of each side")
    p.add_argument("--mode", choices=("single", "multi", "both"), default=d.mode)
    p.add_argument("--memory-steps", type=int, default=d.memory_steps, help="0 skips the memory check")
    p.add_argument("--memory-from", type=int, default=d.memory_from)
    p.add_argument("--trl-gradient-checkpointing", action=argparse.BooleanOptionalAction,
                   default=d.trl_gradient_checkpointing, help="TRL's GRPOConfig default is on")
    p.add_argument("--lora", action="store_true", help="time a LoRA adapter run against full fine-tuning (not TRL)")
    p.add_argument("--lora-r", type=int, default=d.lora_r, help="the adapter's rank with --lora (alpha = 2 r)")
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--out", type=Path, default=None, help="write the figures as JSON")
    p.add_argument("--work-dir", type=Path, default=None, help="keep the runs and logs here (default: a temp dir)")
    return p


def main(argv: list[str] | None = None) -> int:
    """``envhub bench train [options]`` (``python -m envhub.trainer.bench``); 2 on bad options, 1 on a failed side."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["_child"]:
        return child_main(argv[1], Path(argv[2]), Path(argv[3]))
    args = parser().parse_args(argv)
    try:
        settings = BenchSettings(
            model=args.model, steps=args.steps, warmup=args.warmup, rounds=args.rounds, group_size=args.group_size, prompts=args.prompts,
            max_new_tokens=args.max_new_tokens, max_response_tokens=args.max_response_tokens,
            micro_batch_size=args.micro_batch_size,
            temperature=args.temperature, threads=args.threads, seed=args.seed, mode=args.mode,
            memory_steps=args.memory_steps, memory_from=args.memory_from,
            trl_gradient_checkpointing=args.trl_gradient_checkpointing, lora=args.lora, lora_r=args.lora_r)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        result = run_bench(settings=settings, out_file=args.out, work_dir=args.work_dir)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 1 if failed(result) else 0


if __name__ == "__main__":
    sys.exit(main())
