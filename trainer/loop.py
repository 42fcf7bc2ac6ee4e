"""The training loop, one step top to bottom (see :meth:`Trainer.train_step`):

1. **plan**: the step's groups come from the data cursor -- a seeded shuffle of the split's tasks
   (or of the ``envhub profile`` curriculum), epoch after epoch -- so a resumed run draws exactly the
   tasks, episode ids and sampling seeds the uninterrupted one would have (each group planned by
   :func:`envhub.rollout.episodes.plan_group`, the one recipe of episode ids);
2. **rollouts**: each rank runs its share of the groups through the engine with the episode
   collector; records are kept in ``RUN/rollouts/step-N/`` as they finish (pending samples survive
   a crash);
3. **audit**: every trajectory passes the token audit before it may enter a batch (a failing one is
   dropped and counted, or stops the run);
4. **selection and advantages** (:mod:`envhub.trainer.samples`, :mod:`envhub.trainer.grpo`): infra
   outcomes out, zero-variance groups dropped, group-relative advantages;
5. **update**: micro-batched loss on the mask-1 tokens, ``updates_per_step`` optimizer steps;
6. **weight push**: the new weights go to the engine and the weight version is bumped; every later
   turn records it;
7. **record**: one line of ``RUN/steps.jsonl`` per step (:func:`envhub.trainer.telemetry.step_record`);
   the whole state every ``checkpoint_every`` steps (:mod:`envhub.trainer.checkpoint`).

The models are built in :mod:`envhub.trainer.models`, the validation evals run in
:mod:`envhub.trainer.evaluation`, and the run directory's layout is
:class:`envhub.run_dir.TrainingRun`.
"""

from __future__ import annotations

import contextlib
import json
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from envhub.adapters.engines.models import resolve_model
from envhub.registry import make
from envhub.rollout.collect import EpisodeCollector
from envhub.rollout.episodes import EpisodePlan, plan_group
from envhub.run_dir import TrainingRun
from envhub.store import JsonlStore, write_json_atomic
from envhub.trainer import checkpoint as ckpt
from envhub.trainer import evaluation, fsdp, preflight, sft
from envhub.trainer.batch import TrainingSample
from envhub.trainer.config import TrainConfig, parse_config
from envhub.trainer.models import PolicyModels
from envhub.trainer.samples import AUDIT_FAILED, audit_trajectory, informative_groups, training_samples
from envhub.trainer.telemetry import StepTimer, Telemetry, step_record
from envhub.trainer.update import update_policy
from envhub.types import Outcome


class TrainingError(RuntimeError):
    """The run cannot go on (an audit failure with ``audit_failure: stop``, a run directory that
    holds another run); the message says why."""


class Trainer:
    """A training run in ``config.run_dir``; ``run()`` does the stages, ``train_step`` one GRPO step."""

    def __init__(self, config: TrainConfig, *, resume: bool = False, dist: fsdp.DistInfo | None = None,
                 log: Callable[[str], None] | None = None) -> None:
        self.config = config
        self.dist = dist or fsdp.init_distributed(device=config.device)
        say = log or (lambda line: print(line, file=sys.stderr, flush=True))
        self.log = say if self.dist.is_main else (lambda line: None)
        self.run_dir = Path(config.run_dir)
        self.files = TrainingRun(self.run_dir)
        preflight.raise_if(preflight.check_config(config))
        for note in preflight.config_notes(config):
            self.log(f"note: {note}")
        if config.threads:
            torch.set_num_threads(config.threads)
        self._seed_everything(config.seed + self.dist.rank)
        self.model_dir = resolve_model(config.model)
        self._claim(resume)
        self.telemetry = Telemetry(env_id=config.env.id, run_dir=self.run_dir, total_steps=config.steps,
                                   metrics_port=config.metrics_port, config=config,
                                   enabled=self.dist.is_main, log=self.log)
        try:
            self.models = PolicyModels(config, self.model_dir, self.dist, staging_dir=self.files.weights_dir)
            self.policy = self.models.policy(config.sampling)
            self.env_factory = self._env_factory(config.env.split)
            self.collector = EpisodeCollector(self.env_factory, self.telemetry.wrap_policy(self.policy),
                                              concurrency=config.rollout.concurrency,
                                              policy_info={"policy": self.policy.name, **self.policy.describe()})
            self.state = ckpt.TrainState()
            self._group_index: dict[str, int] = {}  # group id -> its place in the task order
            self._replayed: dict[int, dict[str, Any]] = {}  # steps.jsonl lines of steps trained again
            self._reused: set[str] = set()  # episodes of this process's steps that came back from disk
            self.tasks = self._training_tasks()
            self._resume_if_asked(resume)
            self.sft_examples = self._sft_examples()
        except BaseException:
            self.close()
            raise
        self.steps_path = self.files.steps_path
        self.started = time.monotonic()

    # ---- setup --------------------------------------------------------------------------------

    def _seed_everything(self, seed: int) -> None:
        import numpy as np

        random.seed(seed)
        np.random.seed(seed % (1 << 32))
        torch.manual_seed(seed)

    def _claim(self, resume: bool) -> None:
        """``RUN/config.json`` names the run; another config in the same directory is refused."""
        path = self.files.config_path
        mine = self.config.dump()
        if path.exists():
            before = json.loads(path.read_text(encoding="utf-8"))
            with contextlib.suppress(ValueError):  # a config saved before a setting existed: its default
                before = parse_config(before).dump()
            differ = ckpt.run_differences(before, mine)
            if differ:
                raise TrainingError(f"{self.run_dir} holds another run (different {'; '.join(differ[:4])}); "
                                    "use another run_dir")
            if not resume and ckpt.latest_checkpoint(self.run_dir) is not None:
                raise TrainingError(f"{self.run_dir} already has checkpoints: pass --resume to continue it, "
                                    "or use another run_dir")
        if self.dist.is_main:
            write_json_atomic(path, mine)
        fsdp.barrier(self.dist)

    def _env_factory(self, split: str) -> Callable[[], Any]:
        env = self.config.env
        kwargs = dict(env.args)
        if env.budget is not None:
            kwargs["budget"] = env.budget
        return lambda: make(env.id, split=split, **kwargs)

    def _training_tasks(self) -> list[str]:
        env = self.env_factory()
        try:
            split_ids = list(env.tasks.task_ids(env.split))
            curriculum: list[str] = []
            if self.config.env.curriculum is not None:
                listed = json.loads(Path(self.config.env.curriculum).read_text(encoding="utf-8"))
                known = set(split_ids)
                curriculum = [t for t in listed.get("task_ids", []) if t in known]
            problems = preflight.check_tasks(self.config, split_ids, curriculum)
            if not problems:
                s = self.config.sampling
                problems = preflight.check_rendering(env, self.policy.render_prompt, self.policy.encode,
                                                     self.policy.max_context, s.max_new_tokens)
        finally:
            env.close()
        preflight.raise_if(problems)
        self.curriculum = curriculum
        return curriculum or split_ids

    def _sft_examples(self) -> list[TrainingSample]:
        """The SFT stage's examples, loaded (and checked) before anything runs."""
        cfg = self.config.sft
        if cfg is None or self.state.sft_done:
            return []
        samples, stats = sft.sft_samples(cfg.runs, self.policy, outcomes=cfg.outcomes,
                                         max_context=self.config.rollout.max_context, max_examples=cfg.max_examples)
        preflight.raise_if(preflight.check_sft(samples, stats, [str(r) for r in cfg.runs],
                                               max_new_tokens=self.config.sampling.max_new_tokens,
                                               longest_turn=sft.longest_turn))
        self.log(f"sft: {stats['accepted']} examples ({stats['reencoded']} re-encoded from scripted runs), "
                 f"{cfg.epochs} epochs")
        return samples

    def _resume_if_asked(self, resume: bool) -> None:
        path = ckpt.latest_checkpoint(self.run_dir) if resume else None
        if path is None:
            return
        self.state, weights = ckpt.restore(path, self.models, self.dist)
        self.models.publish(self.state.weight_version, weights)
        if self.dist.is_main:  # steps after the checkpoint are trained again: their log lines go, their
            # rollout timings stay with the replayed steps (their episodes come back from disk)
            self._replayed = {r["step"]: r for r in self.files.keep_steps_upto(self.state.step)}
        self.log(f"resumed from {path.name} (step {self.state.step}, weight version {self.state.weight_version})")

    # ---- the run ------------------------------------------------------------------------------

    def run(self) -> dict[str, Any]:
        """SFT (when configured and not done), evaluation before, the GRPO steps, evaluation after,
        the final weights exported to ``RUN/final``. Returns the run's summary (also ``RUN/summary.json``)."""
        cfg, timings = self.config, {}
        start = None
        if self.state.step == 0 and not self.state.sft_done:
            start = self.evaluate("before")
        if cfg.sft is not None and not self.state.sft_done:
            t0 = time.monotonic()
            self.sft_stage()
            timings["sft_s"] = time.monotonic() - t0
            start = self.evaluate("after-sft")
            self.save_checkpoint()
        warning = preflight.solved_warning(start) if cfg.steps > self.state.step else None
        if warning:
            self.log(f"warning: {warning}")
        self._fix_reference()
        t0, stopped = time.monotonic(), None
        self.telemetry.start_steps(self.state.step)
        with JsonlStore(self.steps_path, key="step") as log:
            while self.state.step < cfg.steps and stopped is None:
                record = self.train_step()
                if self.dist.is_main:
                    log.append(record)
                self.telemetry.on_step(record)
                stopped = self._untrained_guard()
                if cfg.eval.every and self.state.step % cfg.eval.every == 0 and self.state.step < cfg.steps:
                    self.evaluate(TrainingRun.step_name(self.state.step))
                if self.state.step % cfg.checkpoint_every == 0 or self.state.step == cfg.steps or stopped:
                    self.save_checkpoint()
        timings["grpo_s"] = time.monotonic() - t0
        final = self.evaluate("final")
        trained = self.trained_totals()
        tags = [e["tag"] for e in self.eval_summaries()]
        start_tag = "after-sft" if "after-sft" in tags else "before"
        paired = evaluation.paired_evals(self.files, start_tag, "final") if final and start_tag in tags else None
        summary = {"run_dir": str(self.run_dir), "steps": self.state.step, **trained, "stopped": stopped,
                   "timings": timings, "evals": self.eval_summaries(), "final_eval": final, "paired": paired,
                   "final_weights": str(self.export()), "best": self.files.best()}
        if self.dist.is_main:
            write_json_atomic(self.files.summary_path, summary)
        self.log(headline(summary))
        return summary

    def _untrained_guard(self) -> str | None:
        """After ``zero_variance_patience`` consecutive steps that trained nothing: a warning saying what to
        do, and with ``stop_when_untrained`` the reason the run stops (None: go on)."""
        algo, streak = self.config.algorithm, self.state.untrained_streak
        if streak < algo.zero_variance_patience or streak % algo.zero_variance_patience:
            return None
        rows = [r for r in self.files.steps() if r["step"] > self.state.step - streak]
        groups = sum(int(r.get("groups", 0)) for r in rows)
        zero = sum(int(r.get("zero_variance_groups", 0)) for r in rows)
        self.log(f"warning: the last {streak} steps trained nothing: {zero} of {groups} groups had zero variance "
                 f"({zero / max(groups, 1):.0%}; all rewards of a group equal). Train on tasks the policy solves "
                 "sometimes: `envhub profile` with this model and env.curriculum, a harder split or level, "
                 "rollout.dynamic_sampling: true, a larger group_size, or fewer SFT steps")
        if algo.stop_when_untrained:
            return f"{streak} consecutive steps without an update (stop_when_untrained)"
        return None

    def trained_totals(self) -> dict[str, Any]:
        """What the run trained, from ``steps.jsonl``: optimizer steps, trained samples, the weight version."""
        rows = self.files.steps()
        return {"optimizer_steps": sum(int(r.get("optimizer_steps", 0)) for r in rows),
                "trained_samples": sum(int(r.get("trained_samples", 0)) for r in rows),
                "untrained_steps": sum(1 for r in rows if not r.get("optimizer_steps")),
                "weight_version": self.state.weight_version}

    def _fix_reference(self) -> None:
        """The KL reference is the policy GRPO starts from (after SFT): frozen here at step 0; a run resumed
        later has it from its checkpoint (``reference.pt``), the one the uninterrupted run used."""
        if self.models.reference is None or self.models.reference_ready:
            return
        if self.state.step > 0:
            raise TrainingError(f"the checkpoint of step {self.state.step} has no KL reference (reference.pt: "
                                "it predates saving the post-SFT reference); resume it with kl_coef 0, or start over")
        self.models.freeze_reference()
        self.log("kl: the KL reference is the policy at the start of GRPO"
                 + (" (after SFT)" if self.state.sft_done else " (the initial model)"))

    def close(self) -> None:
        """Stop the env workers, the engine and the metrics server (idempotent; safe after a failed start)."""
        for part in ("collector", "models", "telemetry"):
            if hasattr(self, part):
                getattr(self, part).close()

    # ---- one GRPO step --------------------------------------------------------------------------

    def train_step(self) -> dict[str, Any]:
        """One GRPO step, stage by stage (see the module docstring); returns its line of ``steps.jsonl``."""
        step, timer = self.state.step + 1, StepTimer()
        plans = self.plans(step)                                   # 1. plan
        records = self.rollouts(step, plans)                       # 2. rollouts
        classes = self.audit(records)                              # 3. audit
        records, classes, sampling = self.oversample(step, records, classes)  # (dynamic sampling)
        timer.lap("rollout_s")
        samples, selection = self.select(records, classes)         # 4. selection and advantages
        update = self.update(samples)                              # 5. update
        timer.lap("train_s")
        self.push_weights(update)                                  # 6. weight push
        timer.lap("weight_sync_s")
        self.state.advance(step, sampling["groups_drawn"], trained=bool(update.get("updated")))
        return self.record(step, records, samples, {**selection, **update, **sampling}, timer)  # 7. record

    def plans(self, step: int, start: int | None = None, count: int | None = None) -> list[EpisodePlan]:
        """This rank's episodes of ``count`` groups (default ``groups_per_step``) from group ``start`` of the
        task order (default: where ``step`` begins: the data cursor for the next step, ``groups_per_step``
        further for each step after it), every ``world_size``-th group to this rank, whole groups only
        (advantages are per group)."""
        cfg = self.config
        count = cfg.rollout.groups_per_step if count is None else count
        if start is None:
            start = self.state.cursor + (step - 1 - self.state.step) * cfg.rollout.groups_per_step
        plans = [plan for j in range(start, start + count)
                 if (j - start) % self.dist.world_size == self.dist.rank
                 for plan in plan_group(cfg.env.id, self._task_of_group(j), j, seed=cfg.seed,
                                        group_size=cfg.rollout.group_size, stream="train")]
        for k, plan in enumerate(plans):
            self._group_index[plan.group_id] = start + self.dist.rank + k // cfg.rollout.group_size * self.dist.world_size
        return plans

    def _task_of_group(self, j: int) -> str:
        epoch, i = divmod(j, len(self.tasks))
        order = list(self.tasks)
        random.Random(f"{self.config.env.id}/{self.config.seed}/{epoch}").shuffle(order)
        return order[i]

    def oversample(self, step: int, records: list[dict[str, Any]],
                   classes: list[str]) -> tuple[list[dict[str, Any]], list[str], dict[str, Any]]:
        """Dynamic sampling (DAPO; veRL's ``filter_groups``): while fewer than ``groups_per_step`` groups
        are informative (:func:`~envhub.trainer.samples.informative_groups`, over every rank), draw more
        groups from the task order -- as many as the informative rate so far says are needed, at most
        ``groups_per_step`` a round and ``max_extra_rounds`` rounds. Informative groups past the first
        ``groups_per_step`` are left untrained, so the step's batch is the same size whenever it can be.
        Returns the records to select from, their classes and the counts for ``steps.jsonl``."""
        r = self.config.rollout
        wanted, drawn, rounds = r.groups_per_step, r.groups_per_step, 0
        informative = self._informative(records, classes)
        while r.dynamic_sampling and len(informative) < wanted and rounds < r.max_extra_rounds:
            rate = len(informative) / drawn
            more = min(wanted, -(-(wanted - len(informative)) // rate) if rate else wanted)
            extra = self.rollouts(step, self.plans(step, self.state.cursor + drawn, int(more)))
            records, classes = records + extra, classes + self.audit(extra)
            drawn, rounds = drawn + int(more), rounds + 1
            informative = self._informative(records, classes)
        surplus = set(informative[wanted:])
        kept = [i for i, data in enumerate(records) if data["group_id"] not in surplus]
        counts = {"groups_drawn": drawn, "sampling_rounds": rounds, "informative_groups": len(informative),
                  "surplus_groups": len(surplus)}
        return [records[i] for i in kept], [classes[i] for i in kept], counts

    def _informative(self, records: list[dict[str, Any]], classes: list[str]) -> list[str]:
        """Informative group ids over every rank, in the order of the task cursor."""
        mine = informative_groups(records, classes, self.config.algorithm)
        ranked = fsdp.all_gather_lists([f"{self._group_index[g]:012d} {g}" for g in mine], self.dist)
        return [item.split(" ", 1)[1] for item in sorted(ranked)]

    def rollouts(self, step: int, plans: list[EpisodePlan] | None = None) -> list[dict[str, Any]]:
        """This rank's records of ``step`` (of ``plans``, by default :meth:`plans`); episodes already on
        disk (an interrupted step) are kept."""
        plans = self.plans(step) if plans is None else plans
        step_dir = self.files.step_rollouts(step, rank=self.dist.rank if self.dist.world_size > 1 else None)
        with step_dir.store() as store:
            todo = [p for p in plans if p.episode_id not in store.keys]
            self._reused.update(p.episode_id for p in plans if p.episode_id in store.keys)
            for record in self.collector.run(todo):
                store.append(record.model_dump(mode="json"))
                self.telemetry.on_episode(record)
        wanted = {p.episode_id for p in plans}
        return [r for r in step_dir.rows() if r["episode_id"] in wanted]

    def audit(self, records: list[dict[str, Any]]) -> list[str]:
        """Each record's outcome class, or ``audit_failed`` when its trajectory fails the token audit
        (:func:`envhub.trainer.samples.audit_trajectory`; with ``audit_failure: stop``, TrainingError).
        Classes never trained (``exclude_classes``: infra outcomes) are never audited."""
        classes, template = [], self.policy.describe().get("chat_template_hash")
        excluded = set(self.config.algorithm.exclude_classes)
        for data in records:
            cls = Outcome(data["outcome"]).outcome_class.value
            if cls not in excluded:
                problems = audit_trajectory(data, self.models.tokenizer, chat_template_hash=template,
                                            max_context=self.config.rollout.max_context)
                if problems and self.config.audit_failure == "stop":
                    raise TrainingError(f"episode {data['episode_id']} fails the token audit: {problems[0]}")
                cls = AUDIT_FAILED if problems else cls
            classes.append(cls)
        return classes

    def select(self, records: list[dict[str, Any]],
               classes: list[str] | None = None) -> tuple[list[TrainingSample], dict[str, Any]]:
        """Selection and advantages (:func:`envhub.trainer.samples.training_samples`) of ``records``
        audited as ``classes`` (audited here when not given)."""
        classes = self.audit(records) if classes is None else classes
        return training_samples(records, classes, self.config.algorithm, weight_version=self.state.weight_version)

    def update(self, samples: list[TrainingSample]) -> dict[str, Any]:
        self._fix_reference()  # run() fixes it before step 1; this is for a train_step called alone
        m = self.models
        return update_policy(m.model, m.optimizer, m.scheduler, samples, config=self.config, dist=self.dist,
                             reference=m.reference, pad_id=m.pad_id, checkpointing=m.checkpointing)

    def push_weights(self, update: dict[str, Any]) -> None:
        """After an update, the engine samples with the new weights, as the next weight version."""
        if update.get("updated"):
            self._next_weight_version()

    def _next_weight_version(self) -> None:
        self.state.weight_version = str(int(self.state.weight_version) + 1)
        self.models.publish(self.state.weight_version)

    def record(self, step: int, records: list[dict[str, Any]], samples: list[TrainingSample],
               stats: dict[str, Any], timer: StepTimer) -> dict[str, Any]:
        """The step's line of ``RUN/steps.jsonl`` (:func:`envhub.trainer.telemetry.step_record`)."""
        reused = [r for r in records if r["episode_id"] in self._reused]
        self._reused.clear()
        line = step_record(step, records, samples, stats, timer.seconds, weight_version=self.state.weight_version,
                           lr=self.models.scheduler.get_last_lr()[0], dist=self.dist, reused=reused)
        original = self._replayed.pop(step, None)
        if original is not None:  # the rollouts came back from disk: their time is the first run's
            line["time"] = {**line["time"], "rollout_s": original["time"]["rollout_s"]}
            line["tokens_per_second"] = original["tokens_per_second"]
            line["replayed"] = True
        return line

    # ---- checkpoints, evaluation, export ---------------------------------------------------------

    def save_checkpoint(self) -> None:
        ckpt.save(self.run_dir, self.state, self.models, self.dist, keep=self.config.keep_checkpoints)

    def evaluate(self, tag: str) -> dict[str, Any] | None:
        """Strict success on the validation split (never the training split), rank 0 only; resumable
        (:func:`envhub.trainer.evaluation.evaluate`)."""
        cfg, result = self.config, None
        if cfg.env.validation_split is not None and self.dist.is_main:
            # named after the weights it samples with: the run's (each turn records the weight version)
            policy = self.models.policy(cfg.sampling.with_(temperature=cfg.eval.temperature),
                                        name=f"train:{self.run_dir}")
            result = evaluation.evaluate(self.files, cfg, policy, self._env_factory(cfg.env.validation_split),
                                         tag=tag, step=self.state.step, weight_version=self.state.weight_version,
                                         log=self.log)
            self.telemetry.on_eval(result)
            low, high = result.get("interval", (0.0, 1.0))
            self.log(f"eval {tag}: strict success {result['strict_success']:.3f} [{low:.3f}, {high:.3f}] on "
                     f"{result['episodes']} {result['split']} episodes")
        self._keep_if_best(result)
        return result

    def _keep_if_best(self, result: dict[str, Any] | None) -> None:
        """``RUN/best``: the weights of the best validation eval so far (``best.json`` says which eval;
        weights still the initial ones are named, not copied). Every rank: the weights are gathered."""
        better = self.dist.is_main and result is not None and evaluation.improves_best(self.files, result)
        if fsdp.all_reduce_sum({"better": float(better)}, self.dist)["better"]:
            initial = self.state.weight_version == "0"
            state = None if initial else fsdp.full_state_dict(self.models.model, self.dist)
            if result is not None and self.dist.is_main:
                if state is not None:
                    self.models.write_model_dir(state, self.files.best_dir)
                weights = str(self.model_dir if initial else self.files.best_dir)
                write_json_atomic(self.files.best_path, evaluation.best_record(result, weights))
                self.log(f"best: eval {result['tag']} (weight version {result['weight_version']}) in {weights}")
        fsdp.barrier(self.dist)

    def eval_summaries(self) -> list[dict[str, Any]]:
        return self.files.evals()

    def export(self) -> Path:
        """The final weights as a transformers model dir (``--policy hf:RUN/final`` evaluates it; with
        LoRA the merged model, and its adapter in ``RUN/final/adapter``)."""
        state = fsdp.full_state_dict(self.models.model, self.dist)
        out = self.files.final_dir
        if self.dist.is_main:
            self.models.write_model_dir(state, out)
        fsdp.barrier(self.dist)
        return out

    # ---- the SFT stage ----------------------------------------------------------------------------

    def sft_stage(self) -> None:
        """Supervised warm start (:func:`envhub.trainer.sft.run_sft`); its weights go to the engine."""
        assert self.config.sft is not None
        t0 = time.monotonic()
        curve = sft.run_sft(self.models.model, self.sft_examples, self.config.sft, seed=self.config.seed,
                            optim=self.config.optim, dist=self.dist, pad_id=self.models.pad_id, log=self.log,
                            checkpointing=self.models.checkpointing, compute_dtype=self.models.compute_dtype)
        if self.dist.is_main:
            write_json_atomic(self.files.sft_path, {"examples": len(self.sft_examples), "seconds": time.monotonic() - t0,
                                                    "steps": curve, "final_entropy": curve[-1]["entropy"] if curve else None})
        self.state.sft_done = True
        self._next_weight_version()


def headline(summary: dict[str, Any]) -> str:
    """The run's last console line: what it trained (or that it trained nothing) and its final eval."""
    steps, updates = summary["steps"], summary.get("optimizer_steps", 0)
    what = (f"trained {updates} optimizer steps on {summary.get('trained_samples', 0)} samples in {steps} GRPO steps"
            if updates else f"trained nothing in {steps} GRPO steps (0 optimizer steps: every group had zero variance)"
            if steps else "no GRPO steps")
    final = summary.get("final_eval")
    score = f"; final strict success {final['strict_success']:.3f} on {final['episodes']} episodes" if final else ""
    stop = f"; stopped: {summary['stopped']}" if summary.get("stopped") else ""
    return f"done: {what}, weight version {summary.get('weight_version')}{score}{stop}"


def train(config: TrainConfig, *, resume: bool = False, log: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Run ``config`` to the end (see :class:`Trainer`); returns the summary."""
    trainer = Trainer(config, resume=resume, log=log)
    try:
        return trainer.run()
    finally:
        trainer.close()
