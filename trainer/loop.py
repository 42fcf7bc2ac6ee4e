"""The training loop, one step top to bottom (see :meth:`Trainer.train_step`):

1. **plan**: the step's groups are the next ones of the task order (:mod:`envhub.trainer.sampling`:
   a seeded shuffle of the split's tasks, or of the ``envhub profile`` curriculum, epoch after
   epoch), so a resumed run draws exactly the episodes the uninterrupted one would have;
2. **rollouts**: each rank runs its share of the groups through the engine with the episode
   collector; records are kept in ``RUN/rollouts/step-N/`` as they finish (pending samples survive
   a crash);
3. **audit**: every trajectory record passes the token audit before it may enter a batch (a failing
   one is dropped and counted, or stops the run); with ``rollout.dynamic_sampling``, more groups are
   drawn while too few carry a learning signal (:func:`envhub.trainer.sampling.dynamic_sampling`);
4. **selection and advantages** (:mod:`envhub.trainer.samples`, :mod:`envhub.trainer.grpo`): infra
   outcomes out, zero-variance groups dropped, group-relative advantages;
5. **update**: micro-batched loss on the mask-1 tokens, ``updates_per_step`` optimizer steps;
6. **weight push**: the new weights go to the engine and the weight version is bumped; every later
   turn records it;
7. **record**: one line of ``RUN/steps.jsonl`` per step
   (:func:`envhub.trainer.telemetry.step_record`); the whole state every ``checkpoint_every`` steps
   (:mod:`envhub.trainer.checkpoint`, which also claims the run directory and resumes a run).

With ``rollout.mode: async`` the rollouts of stage 2 come from a buffer that a producer thread keeps
filling while the trainer trains (:mod:`envhub.trainer.async_loop`).

The models are built in :mod:`envhub.trainer.models`, the validation evals run in
:mod:`envhub.trainer.evaluation`, and the run directory's layout is
:class:`envhub.run_dir.TrainingRun`.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from envhub.adapters.engines.models import resolve_model
from envhub.registry import make
from envhub.rollout.collect import EpisodeCollector
from envhub.rollout.episodes import EpisodePlan
from envhub.rollout.evidence import paired_line
from envhub.run_dir import TrainingRun
from envhub.store import JsonlStore, write_json_atomic
from envhub.trainer import checkpoint as ckpt
from envhub.trainer import evaluation, fsdp, preflight, sampling, sft
from envhub.trainer.batch import TrainingSample
from envhub.trainer.checkpoint import TrainingError
from envhub.trainer.config import TrainConfig
from envhub.trainer.models import PolicyModels
from envhub.trainer.samples import AUDIT_FAILED, audit_trajectory, training_samples
from envhub.trainer.telemetry import StepTimer, Telemetry, headline, step_record
from envhub.trainer.update import update_policy
from envhub.types import TrajectoryRecord

__all__ = ["Trainer", "TrainingError", "headline", "train"]


class Trainer:
    """A training run in ``config.run_dir``; ``run()`` does the stages, ``train_step`` one GRPO
    step."""

    def __init__(self, config: TrainConfig, *, resume: bool = False,
                 dist: fsdp.DistInfo | None = None,
                 log: Callable[[str], None] | None = None) -> None:
        self.config = config
        self.dist = dist or fsdp.init_distributed(device=config.device)
        say = log or (lambda line: print(line, file=sys.stderr, flush=True))
        self.log = say if self.dist.is_main else (lambda line: None)
        self.run_dir = Path(config.run_dir)
        self.files = TrainingRun(self.run_dir)
        preflight.raise_if(preflight.check_config(config))
        preflight.raise_unavailable(preflight.check_model(config))
        self.env_factory = self._env_factory(config.env.split)
        self.tasks = sampling.training_tasks(config, self.env_factory)
        for note in preflight.config_notes(config):
            self.log(f"note: {note}")
        if config.threads:
            torch.set_num_threads(config.threads)
        ckpt.seed_everything(config.seed + self.dist.rank)
        self.model_dir = resolve_model(config.model)
        ckpt.claim(self.files, config, self.dist, resume=resume)
        ckpt.claim_judges(self.files, self.env_factory, self.dist)
        self.telemetry = Telemetry(env_id=config.env.id, run_dir=self.run_dir,
                                   total_steps=config.steps, metrics_port=config.metrics_port,
                                   config=config, enabled=self.dist.is_main, log=self.log)
        try:
            self.models = PolicyModels(config, self.model_dir, self.dist,
                                       staging_dir=self.files.weights_dir)
            self.policy = self.models.policy(config.sampling)
            sampling.check_prompt(config, self.env_factory, self.policy)
            self.collector = EpisodeCollector(
                self.env_factory, self.telemetry.wrap_policy(self.policy),
                concurrency=config.rollout.concurrency,
                policy_info={"policy": self.policy.name, **self.policy.describe()})
            self.order = sampling.TaskOrder(self.tasks, env_id=config.env.id, seed=config.seed,
                                            group_size=config.rollout.group_size, dist=self.dist)
            self.state, self.replay = ckpt.TrainState(), ckpt.Replay()
            if resume:
                self.state, self.replay = ckpt.resume(self.files, self.models, self.dist, self.log)
            self.sft_examples = self._sft_examples()
        except BaseException:
            self.close()
            raise
        self.steps_path = self.files.steps_path
        self.started = time.monotonic()

    def _env_factory(self, split: str) -> Callable[[], Any]:
        env = self.config.env
        kwargs = dict(env.args)
        if env.budget is not None:
            kwargs["budget"] = env.budget
        return lambda: make(env.id, split=split, **kwargs)

    def _sft_examples(self) -> list[TrainingSample]:
        """The SFT stage's examples, loaded (and checked) before anything runs."""
        cfg = self.config.sft
        if cfg is None or self.state.sft_done:
            return []
        samples, stats = sft.sft_samples(cfg.runs, self.policy, outcomes=cfg.outcomes,
                                         max_context=self.config.rollout.max_context,
                                         max_examples=cfg.max_examples)
        preflight.raise_if(preflight.check_sft(samples, stats, [str(r) for r in cfg.runs],
                                               max_new_tokens=self.config.sampling.max_new_tokens,
                                               longest_turn=sft.longest_turn))
        self.log(f"sft: {stats['accepted']} examples ({stats['reencoded']} re-encoded from "
                 f"scripted runs), {cfg.epochs} epochs")
        return samples

    # ---- the run ------------------------------------------------------------------------------

    def run(self) -> dict[str, Any]:
        """SFT (when configured and not done), evaluation before, the GRPO steps, evaluation after,
        the final weights exported to ``RUN/final``. Returns the run's summary (also
        ``RUN/summary.json``)."""
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
                step = self.state.step
                if cfg.eval.every and step % cfg.eval.every == 0 and step < cfg.steps:
                    self.evaluate(TrainingRun.step_name(step))
                if step % cfg.checkpoint_every == 0 or step == cfg.steps or stopped:
                    self.save_checkpoint()
        timings["grpo_s"] = time.monotonic() - t0
        final = self.evaluate("final")
        trained = self.trained_totals()
        tags = [e["tag"] for e in self.eval_summaries()]
        start_tag = "after-sft" if "after-sft" in tags else "before"
        paired = (evaluation.paired_evals(self.files, start_tag, "final")
                  if final and start_tag in tags else None)
        summary = {"run_dir": str(self.run_dir), "steps": self.state.step, **trained,
                   "stopped": stopped, "timings": timings, "evals": self.eval_summaries(),
                   "final_eval": final, "paired": paired, "final_weights": str(self.export()),
                   "best": self.files.best()}
        if self.dist.is_main:
            write_json_atomic(self.files.summary_path, summary)
        if paired:
            self.log(paired_line(paired))
        self.log(headline(summary))
        return summary

    # ---- one GRPO step --------------------------------------------------------------------------

    def train_step(self) -> dict[str, Any]:
        """One GRPO step, stage by stage (see the module docstring); returns its line of
        ``steps.jsonl``."""
        step, timer = self.state.step + 1, StepTimer()
        plans = self.plans(step)                                              # 1. plan
        progress = self.telemetry.begin_step(step, len(plans))
        records = self.rollouts(step, plans)                                  # 2. rollouts
        progress.rollouts(records, self.replay.reused)
        classes = self.audit(records)                                         # 3. audit
        records, classes, sampled = self.oversample(step, records, classes, progress)  # (dynamic sampling)
        timer.lap("rollout_s")
        samples, selection = self.select(records, classes)                    # 4. selection
        progress.selection({**selection, **sampled})
        update = self.update(samples)                                         # 5. update
        timer.lap("train_s")
        progress.update(update)
        self.push_weights(update)                                             # 6. weight push
        timer.lap("weight_sync_s")
        progress.pushed(update, self.state.weight_version)
        self.state.advance(step, sampled["groups_drawn"], trained=bool(update.get("updated")))
        stats = {**selection, **update, **sampled}
        return self.record(step, records, samples, stats, timer)              # 7. record

    def plans(self, step: int, start: int | None = None,
              count: int | None = None) -> list[EpisodePlan]:
        """This rank's episodes of ``count`` groups (default ``groups_per_step``) from group
        ``start`` of the task order (:meth:`~envhub.trainer.sampling.TaskOrder.plans`; default:
        where ``step`` begins, the data cursor for the next step and ``groups_per_step`` further
        for each step after)."""
        per_step = self.config.rollout.groups_per_step
        if start is None:
            start = self.state.cursor + (step - 1 - self.state.step) * per_step
        return self.order.plans(start, per_step if count is None else count)

    def rollouts(self, step: int, plans: list[EpisodePlan] | None = None) -> list[TrajectoryRecord]:
        """This rank's records of ``step`` (of ``plans``, by default :meth:`plans`), as kept on
        disk; episodes already there (an interrupted step) are not sampled again."""
        plans = self.plans(step) if plans is None else plans
        rank = self.dist.rank if self.dist.world_size > 1 else None
        step_dir = self.files.step_rollouts(step, rank=rank)
        with step_dir.store() as store:
            todo = [p for p in plans if p.episode_id not in store.keys]
            self.replay.reused.update(p.episode_id for p in plans if p.episode_id in store.keys)
            for record in self.collector.run(todo):
                store.append(record.model_dump(mode="json"))
                self.telemetry.on_episode(record)
        wanted = {p.episode_id for p in plans}
        return [r for r in step_dir.records() if r.episode_id in wanted]

    def audit(self, records: list[TrajectoryRecord]) -> list[str]:
        """Each record's outcome class, or ``audit_failed`` when its trajectory fails the token
        audit (:func:`envhub.trainer.samples.audit_trajectory`; with ``audit_failure: stop``,
        TrainingError). Classes never trained (``exclude_classes``: infra outcomes) are never
        audited."""
        classes, template = [], self.policy.describe().get("chat_template_hash")
        excluded = set(self.config.algorithm.exclude_classes)
        for record in records:
            cls = record.outcome.outcome_class.value
            if cls not in excluded:
                problems = audit_trajectory(record, self.models.tokenizer,
                                            chat_template_hash=template,
                                            max_context=self.config.rollout.max_context)
                if problems and self.config.audit_failure == "stop":
                    raise TrainingError(f"episode {record.episode_id} fails the token audit: "
                                        f"{problems[0]}")
                cls = AUDIT_FAILED if problems else cls
            classes.append(cls)
        return classes

    def oversample(self, step: int, records: list[TrajectoryRecord], classes: list[str],
                   progress: Any = None) -> tuple[list[TrajectoryRecord], list[str], dict[str, Any]]:
        """Dynamic sampling (:func:`envhub.trainer.sampling.dynamic_sampling`): more groups for
        ``step``, the next ones of the task order, while too few groups are informative (the step's
        ``progress`` counts their episodes as planned too)."""

        def draw(offset: int, count: int) -> tuple[list[TrajectoryRecord], list[str]]:
            plans = self.plans(step, self.state.cursor + offset, count)
            if progress is not None:
                progress.plan_more(len(plans))
            extra = self.rollouts(step, plans)
            return extra, self.audit(extra)

        return sampling.dynamic_sampling(records, classes, self.config, self.order, draw)

    def select(self, records: list[TrajectoryRecord],
               classes: list[str] | None = None) -> tuple[list[TrainingSample], dict[str, Any]]:
        """Selection and advantages (:func:`envhub.trainer.samples.training_samples`) of ``records``
        audited as ``classes`` (audited here when not given)."""
        classes = self.audit(records) if classes is None else classes
        return training_samples(records, classes, self.config.algorithm,
                                weight_version=self.state.weight_version)

    def update(self, samples: list[TrainingSample]) -> dict[str, Any]:
        self._fix_reference()  # run() fixes it before step 1; this is for a train_step called alone
        m = self.models
        return update_policy(m.model, m.optimizer, m.scheduler, samples, config=self.config,
                             dist=self.dist, reference=m.reference, pad_id=m.pad_id,
                             checkpointing=m.checkpointing)

    def push_weights(self, update: dict[str, Any]) -> None:
        """After an update, the engine samples with the new weights, as the next weight version."""
        if update.get("updated"):
            self._next_weight_version()

    def _next_weight_version(self) -> None:
        self.state.weight_version = str(int(self.state.weight_version) + 1)
        self.models.publish(self.state.weight_version)

    def record(self, step: int, records: list[TrajectoryRecord], samples: list[TrainingSample],
               stats: dict[str, Any], timer: StepTimer) -> dict[str, Any]:
        """The step's line of ``RUN/steps.jsonl`` (:func:`envhub.trainer.telemetry.step_record`;
        a step trained again after a resume keeps its first rollout time:
        :meth:`envhub.trainer.checkpoint.Replay.stamp`)."""
        line = step_record(step, records, samples, stats, timer.seconds,
                           weight_version=self.state.weight_version,
                           lr=self.models.scheduler.get_last_lr()[0], dist=self.dist,
                           reused=self.replay.take_reused(records))
        return self.replay.stamp(line)

    # ---- around the steps -----------------------------------------------------------------------

    def _untrained_guard(self) -> str | None:
        """After ``zero_variance_patience`` consecutive steps that trained nothing: a warning saying
        what to do, and with ``stop_when_untrained`` the reason the run stops (None: go on)."""
        algo, streak = self.config.algorithm, self.state.untrained_streak
        if streak < algo.zero_variance_patience or streak % algo.zero_variance_patience:
            return None
        rows = [r for r in self.files.steps() if r["step"] > self.state.step - streak]
        groups = sum(int(r.get("groups", 0)) for r in rows)
        zero = sum(int(r.get("zero_variance_groups", 0)) for r in rows)
        self.log(f"warning: the last {streak} steps trained nothing: {zero} of {groups} groups had "
                 f"zero variance ({zero / max(groups, 1):.0%}; all rewards of a group equal). "
                 "Train on tasks the policy solves sometimes: `envhub profile` with this model and "
                 "env.curriculum, a harder split or level, rollout.dynamic_sampling: true, a "
                 "larger group_size, or fewer SFT steps")
        if algo.stop_when_untrained:
            return f"{streak} consecutive steps without an update (stop_when_untrained)"
        return None

    def trained_totals(self) -> dict[str, Any]:
        """What the run trained, from ``steps.jsonl``: optimizer steps, trained samples, the weight
        version."""
        rows = self.files.steps()
        return {"optimizer_steps": sum(int(r.get("optimizer_steps", 0)) for r in rows),
                "trained_samples": sum(int(r.get("trained_samples", 0)) for r in rows),
                "untrained_steps": sum(1 for r in rows if not r.get("optimizer_steps")),
                "weight_version": self.state.weight_version}

    def _fix_reference(self) -> None:
        """The KL reference is the policy GRPO starts from (after SFT): frozen here at step 0; a
        run resumed later has it from its checkpoint (``reference.pt``), the one the uninterrupted
        run used."""
        if self.models.reference is None or self.models.reference_ready:
            return
        if self.state.step > 0:
            raise TrainingError(f"the checkpoint of step {self.state.step} has no KL reference "
                                "(reference.pt: it predates saving the post-SFT reference); resume "
                                "it with kl_coef 0, or start over")
        self.models.freeze_reference()
        self.log("kl: the KL reference is the policy at the start of GRPO"
                 + (" (after SFT)" if self.state.sft_done else " (the initial model)"))

    # ---- checkpoints, evaluation, export ---------------------------------------------------------

    def save_checkpoint(self) -> None:
        ckpt.save(self.run_dir, self.state, self.models, self.dist,
                  keep=self.config.keep_checkpoints)

    def evaluate(self, tag: str) -> dict[str, Any] | None:
        """Strict success on the validation split (never the training split), rank 0 only; resumable
        (:func:`envhub.trainer.evaluation.evaluate`)."""
        cfg, result = self.config, None
        if cfg.env.validation_split is not None and self.dist.is_main:
            # named after the weights it samples with (each turn records the weight version)
            policy = self.models.policy(cfg.sampling.with_(temperature=cfg.eval.temperature),
                                        name=f"train:{self.run_dir}")
            envs = self._env_factory(cfg.env.validation_split)
            result = evaluation.evaluate(self.files, cfg, policy, envs, tag=tag,
                                         step=self.state.step,
                                         weight_version=self.state.weight_version, log=self.log)
            self.telemetry.on_eval(result)
            low, high = result.get("interval", (0.0, 1.0))
            self.log(f"eval {tag}: strict success {result['strict_success']:.3f} "
                     f"[{low:.3f}, {high:.3f}] on {result['episodes']} {result['split']} episodes")
        initial = self.model_dir if self.state.weight_version == "0" else None
        evaluation.keep_if_best(self.files, result, self.models, self.dist, initial=initial,
                                log=self.log)
        return result

    def eval_summaries(self) -> list[dict[str, Any]]:
        return self.files.evals()

    def export(self) -> Path:
        """The final weights as a transformers model dir (``--policy hf:RUN/final`` evaluates it;
        with LoRA the merged model, and its adapter in ``RUN/final/adapter``)."""
        state = fsdp.full_state_dict(self.models.model, self.dist)
        out = self.files.final_dir
        if self.dist.is_main:
            self.models.write_model_dir(state, out)
        fsdp.barrier(self.dist)
        return out

    # ---- the SFT stage ---------------------------------------------------------------------------

    def sft_stage(self) -> None:
        """Supervised warm start (:func:`envhub.trainer.sft.run_sft`); its weights go to the
        engine."""
        assert self.config.sft is not None
        t0, m = time.monotonic(), self.models
        curve = sft.run_sft(m.model, self.sft_examples, self.config.sft, seed=self.config.seed,
                            optim=self.config.optim, dist=self.dist, pad_id=m.pad_id, log=self.log,
                            checkpointing=m.checkpointing, compute_dtype=m.compute_dtype)
        if self.dist.is_main:
            write_json_atomic(self.files.sft_path, {
                "examples": len(self.sft_examples), "seconds": time.monotonic() - t0,
                "steps": curve, "final_entropy": curve[-1]["entropy"] if curve else None})
        self.state.sft_done = True
        self._next_weight_version()

    def close(self) -> None:
        """Stop the env workers, the engine and the metrics server (idempotent; safe after a failed
        start)."""
        for part in ("collector", "models", "telemetry"):
            if hasattr(self, part):
                getattr(self, part).close()


def train(config: TrainConfig, *, resume: bool = False,
          log: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Run ``config`` to the end (see :class:`Trainer`; with ``rollout.mode: async``,
    :class:`envhub.trainer.async_loop.AsyncTrainer`); returns the summary."""
    if config.rollout.mode == "async":
        from envhub.trainer.async_loop import AsyncTrainer  # it builds on this module

        trainer: Trainer = AsyncTrainer(config, resume=resume, log=log)
    else:
        trainer = Trainer(config, resume=resume, log=log)
    try:
        return trainer.run()
    finally:
        trainer.close()
        fsdp.shutdown_distributed()
