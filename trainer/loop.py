"""The training loop, one step top to bottom (see :meth:`Trainer.train_step`):

1. **plan**: the step's groups come from the data cursor -- a seeded shuffle of the split's tasks
   (or of the ``envhub profile`` curriculum), epoch after epoch -- so a resumed run draws exactly the
   tasks, episode ids and sampling seeds the uninterrupted one would have;
2. **rollouts**: each rank runs its share of the groups through the engine with the episode
   collector; records are kept in ``RUN/rollouts/step-N/`` as they finish (pending samples survive
   a crash);
3. **audit**: every trajectory passes the token audit before it may enter a batch (a failing one is
   dropped and counted, or stops the run);
4. **selection and advantages** (:mod:`envhub.trainer.grpo`): infra outcomes out, zero-variance
   groups dropped, group-relative advantages;
5. **update**: micro-batched loss on the mask-1 tokens, ``updates_per_step`` optimizer steps;
6. **weight sync**: the new weights go to the engine and the weight version is bumped; every later
   turn records it;
7. **log and checkpoint**: one line of ``RUN/steps.jsonl`` per step; the whole state every
   ``checkpoint_every`` steps (:mod:`envhub.trainer.checkpoint`).
"""

from __future__ import annotations

import copy
import hashlib
import json
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from envhub.adapters.audit import check_record
from envhub.adapters.engines.models import resolve_model
from envhub.adapters.model_policy import ModelPolicy
from envhub.registry import make
from envhub.rollout.collect import EpisodeCollector, EpisodePlan, plan_episodes
from envhub.rollout.summary import summarize
from envhub.run_dir import Run
from envhub.store import JsonlStore, read_jsonl, write_json_atomic, write_text_atomic
from envhub.trainer import checkpoint as ckpt
from envhub.trainer import fsdp, grpo, preflight, sft
from envhub.trainer.batch import TrainingSample
from envhub.trainer.config import TrainConfig
from envhub.trainer.telemetry import Telemetry, rollout_counts, rss_mb
from envhub.trainer.update import lr_factor, update_policy
from envhub.trainer.weight_sync import WeightSyncError, weight_sync_for, write_hf_dir
from envhub.types import Outcome, OutcomeClass, TrajectoryRecord

#: Settings a resumed run may change; any other difference means another run.
RESUMABLE_CHANGES = {"steps", "eval", "metrics_port", "tensorboard", "audit_failure", "checkpoint_every",
                     "keep_checkpoints", "weight_sync_timeout_s", "threads"}


class TrainingError(RuntimeError):
    """The run cannot go on (an audit failure with ``audit_failure: stop``, a run directory that
    holds another run); the message says why."""


class Trainer:
    """A training run in ``config.run_dir``; ``run()`` does the stages, ``train_step`` one GRPO step."""

    def __init__(self, config: TrainConfig, *, resume: bool = False, dist: fsdp.DistInfo | None = None,
                 log: Callable[[str], None] | None = None) -> None:
        self.config = config
        self.dist = dist or fsdp.init_distributed()
        say = log or (lambda line: print(line, file=sys.stderr, flush=True))
        self.log = say if self.dist.is_main else (lambda line: None)
        self.run_dir = Path(config.run_dir)
        self.files = Run(self.run_dir)
        preflight.raise_if(preflight.check_config(config))
        if config.threads:
            torch.set_num_threads(config.threads)
        self._seed_everything(config.seed + self.dist.rank)
        self.model_dir = resolve_model(config.model)
        self._claim(resume)
        self.telemetry = Telemetry(env_id=config.env.id, run_dir=self.run_dir, total_steps=config.steps,
                                   metrics_port=config.metrics_port, tensorboard=config.tensorboard,
                                   enabled=self.dist.is_main, log=self.log)
        try:
            self._build_models()
            self.state = ckpt.TrainState()
            self.tasks = self._training_tasks()
            self._resume_if_asked(resume)
            self.sft_examples = self._sft_examples()
        except BaseException:
            self.close()
            raise
        self.steps_path = self.run_dir / "steps.jsonl"
        self.started = time.monotonic()

    # ---- setup --------------------------------------------------------------------------------

    def _seed_everything(self, seed: int) -> None:
        import numpy as np

        random.seed(seed)
        np.random.seed(seed % (1 << 32))
        torch.manual_seed(seed)

    def _claim(self, resume: bool) -> None:
        """``RUN/config.json`` names the run; another config in the same directory is refused."""
        path = self.run_dir / "config.json"
        mine = self.config.dump()
        if path.exists():
            before = json.loads(path.read_text(encoding="utf-8"))
            differ = sorted(k for k in {*before, *mine} if before.get(k) != mine.get(k) and k not in RESUMABLE_CHANGES)
            if differ:
                raise TrainingError(f"{self.run_dir} holds another run (different {', '.join(differ)}); "
                                    "use another run_dir")
            if not resume and ckpt.latest_checkpoint(self.run_dir) is not None:
                raise TrainingError(f"{self.run_dir} already has checkpoints: pass --resume to continue it, "
                                    "or use another run_dir")
        if self.dist.is_main:
            write_json_atomic(path, mine)
        fsdp.barrier(self.dist)

    def _build_models(self) -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        cfg = self.config
        self.tokenizer = AutoTokenizer.from_pretrained(str(self.model_dir))
        model = AutoModelForCausalLM.from_pretrained(str(self.model_dir), dtype=torch.float32)
        model.config.use_cache = False
        self.pad_id = int(self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None
                          else self.tokenizer.eos_token_id)
        self.reference = None
        if cfg.algorithm.kl_coef > 0:
            self.reference = copy.deepcopy(model).eval().requires_grad_(False)
        self.shared = (cfg.rollout.share_weights and self.dist.world_size == 1 and cfg.engine == "transformers")
        self.engine = self._make_engine(model)
        if cfg.optim.activation_checkpointing:
            model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
        self.model = fsdp.shard_model(model, self.dist)
        self.model.eval()  # train mode only inside an update: the engine may sample from this module
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=cfg.optim.lr, betas=cfg.optim.betas,
                                           eps=cfg.optim.eps, weight_decay=cfg.optim.weight_decay)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda update: lr_factor(self.config, update))
        self.policy = self._policy(cfg.sampling)
        self.sync = weight_sync_for(self.engine, base_model_dir=self.model_dir, staging_dir=self.run_dir / "weights",
                                    timeout_s=cfg.weight_sync_timeout_s)
        self.env_factory = self._env_factory(cfg.env.split)
        self.collector = EpisodeCollector(self.env_factory, self.telemetry.wrap_policy(self.policy),
                                          concurrency=cfg.rollout.concurrency,
                                          policy_info={"policy": self.policy.name, **self.policy.describe()})

    def _make_engine(self, model: torch.nn.Module) -> Any:
        cfg = self.config
        if cfg.engine.startswith("sglang:"):
            from envhub.adapters.engines.sglang_client import SGLangEngine

            return SGLangEngine(cfg.engine.removeprefix("sglang:"), max_context=cfg.rollout.max_context)
        from envhub.adapters.engines.transformers_engine import TransformersEngine

        # Rollouts come from an unsharded model: generating through FSDP's all-gathers is ~5x slower.
        return TransformersEngine(model if self.shared else copy.deepcopy(model).eval(), self.tokenizer, max_context=cfg.rollout.max_context,
                                  max_batch_size=max(cfg.rollout.concurrency, 1), weight_version="0",
                                  seed=cfg.seed + self.dist.rank, model_id=str(self.model_dir))

    def _policy(self, params: Any) -> ModelPolicy:
        r = self.config.rollout
        return ModelPolicy(self.engine, self.tokenizer, params=params, max_context=r.max_context,
                           name=f"hf:{self.model_dir}", model_id=str(self.model_dir), tokenizer_id=str(self.model_dir),
                           fit_turns=r.fit_turns, max_response_tokens=r.max_response_tokens)

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
        state = ckpt.load_checkpoint(path, self.dist.rank)
        fsdp.load_full_state_dict(self.model, state.model, self.dist)
        fsdp.load_optimizer_state(self.model, self.optimizer, state.optimizer, self.dist)
        self.scheduler.load_state_dict(state.scheduler)
        if state.rng is not None:
            ckpt.restore_rng(state.rng, getattr(self.engine, "_rng", None))
        self.state = state.state
        self._publish_weights(self.state.weight_version, state.model)
        if self.dist.is_main:  # steps after the checkpoint are trained again: their log lines go
            kept = [r for r in read_jsonl(self.run_dir / "steps.jsonl") if r["step"] <= self.state.step] \
                if (self.run_dir / "steps.jsonl").exists() else []
            write_text_atomic(self.run_dir / "steps.jsonl", "".join(json.dumps(r) + "\n" for r in kept))
        self.log(f"resumed from {path.name} (step {self.state.step}, weight version {self.state.weight_version})")

    # ---- the run ------------------------------------------------------------------------------

    def run(self) -> dict[str, Any]:
        """SFT (when configured and not done), evaluation before, the GRPO steps, evaluation after,
        the final weights exported to ``RUN/final``. Returns the run's summary (also ``RUN/summary.json``)."""
        cfg, timings = self.config, {}
        if self.state.step == 0 and not self.state.sft_done:
            self.evaluate("before")
        if cfg.sft is not None and not self.state.sft_done:
            t0 = time.monotonic()
            self.sft_stage()
            timings["sft_s"] = time.monotonic() - t0
            self.evaluate("after-sft")
            self.save_checkpoint()
        t0 = time.monotonic()
        with JsonlStore(self.steps_path, key="step") as log:
            while self.state.step < cfg.steps:
                record = self.train_step()
                if self.dist.is_main:
                    log.append(record)
                self.telemetry.on_step(record)
                if cfg.eval.every and self.state.step % cfg.eval.every == 0 and self.state.step < cfg.steps:
                    self.evaluate(f"step-{self.state.step:06d}")
                if self.state.step % cfg.checkpoint_every == 0 or self.state.step == cfg.steps:
                    self.save_checkpoint()
        timings["grpo_s"] = time.monotonic() - t0
        final = self.evaluate("final")
        summary = {"run_dir": str(self.run_dir), "steps": self.state.step, "timings": timings,
                   "evals": self.eval_summaries(), "final_eval": final, "final_weights": str(self.export())}
        if self.dist.is_main:
            write_json_atomic(self.run_dir / "summary.json", summary)
        return summary

    def close(self) -> None:
        """Stop the engine, the env workers and the metrics server (idempotent; safe after a failed start)."""
        for part in ("collector", "engine", "telemetry"):
            if hasattr(self, part):
                getattr(self, part).close()

    # ---- one GRPO step --------------------------------------------------------------------------

    def plans(self, step: int) -> list[EpisodePlan]:
        """This rank's episodes of ``step`` (1-based): groups ``[(step-1)*G, step*G)`` of the task order,
        every ``world_size``-th group to this rank, whole groups only (advantages are per group)."""
        cfg = self.config
        per_step, size = cfg.rollout.groups_per_step, cfg.rollout.group_size
        plans = []
        for j in range((step - 1) * per_step, step * per_step):
            if (j % per_step) % self.dist.world_size != self.dist.rank:
                continue
            task_id = self._task_of_group(j)
            group_id = hashlib.sha1(f"{cfg.env.id}|{cfg.seed}|train|{j}|{task_id}".encode()).hexdigest()[:16]
            for k in range(size):
                seed = int(hashlib.sha1(f"{group_id}|{k}".encode()).hexdigest()[:8], 16)
                plans.append(EpisodePlan(f"{group_id}-{k}", group_id, task_id, k, seed))
        return plans

    def _task_of_group(self, j: int) -> str:
        epoch, i = divmod(j, len(self.tasks))
        order = list(self.tasks)
        random.Random(f"{self.config.env.id}/{self.config.seed}/{epoch}").shuffle(order)
        return order[i]

    def train_step(self) -> dict[str, Any]:
        step = self.state.step + 1
        t0 = time.monotonic()
        records = self.rollouts(step)
        t1 = time.monotonic()
        samples, selection = self.select(records)
        update = self.update(samples)
        t2 = time.monotonic()
        if update.get("updated"):
            self.state.weight_version = str(int(self.state.weight_version) + 1)
            self._publish_weights(self.state.weight_version)
        t3 = time.monotonic()
        self.state.step, self.state.cursor = step, step * self.config.rollout.groups_per_step
        counts = fsdp.all_reduce_sum(rollout_counts(records), self.dist)
        attempted = max(counts["attempted"], 1)
        tokens = counts["sampled_tokens"]
        return {
            "step": step, "weight_version": self.state.weight_version,
            # the policy's mean reward is over the episodes it is scored on: infra outcomes (reward 0,
            # ours) would drag it down; strict success keeps them in its denominator, as DESIGN.md says
            "reward_mean": counts["reward_sum"] / max(counts["attempted"] - counts["infra"], 1),
            "strict_success": counts["success"] / attempted,
            "success_excluding_infra": counts["success"] / max(counts["attempted"] - counts["infra"], 1),
            "outcomes": {k.removeprefix("outcome/"): int(v) for k, v in counts.items() if k.startswith("outcome/")},
            "attempted": int(counts["attempted"]),
            "tokens_per_success": tokens / counts["success"] if counts["success"] else None,
            **selection, **update,
            "trained_episodes": sorted(fsdp.all_gather_lists([s.episode_id for s in samples], self.dist)),
            "untrained_episodes": sorted(fsdp.all_gather_lists(
                sorted({r["episode_id"] for r in records} - {s.episode_id for s in samples}), self.dist)),
            "tokens_per_second": tokens / max(t1 - t0, 1e-9),
            "time": {"rollout_s": t1 - t0, "verify_s": counts["verifier_s"], "train_s": t2 - t1,
                     "weight_sync_s": t3 - t2},
            "lr": self.scheduler.get_last_lr()[0], "rss_mb": rss_mb(),
        }

    def rollouts(self, step: int) -> list[dict[str, Any]]:
        """This rank's records of ``step``; episodes already on disk (an interrupted step) are kept."""
        plans = self.plans(step)
        step_dir = self.files.sub("rollouts", f"step-{step:06d}")
        if self.dist.world_size > 1:
            step_dir = Run(step_dir.path, trajectories=step_dir.path / f"trajectories.rank{self.dist.rank}.jsonl")
        with step_dir.store() as store:
            todo = [p for p in plans if p.episode_id not in store.keys]
            for record in self.collector.run(todo):
                store.append(record.model_dump(mode="json"))
                self.telemetry.on_episode(record)
        wanted = {p.episode_id for p in plans}
        return [r for r in step_dir.rows() if r["episode_id"] in wanted]

    def select(self, records: list[dict[str, Any]]) -> tuple[list[TrainingSample], dict[str, Any]]:
        """Audit, selection and advantages (see :func:`envhub.trainer.grpo.select_samples`)."""
        cfg = self.config.algorithm
        classes, dropped, lag = [], 0, 0
        for data in records:
            outcome = Outcome(data["outcome"])
            cls = outcome.outcome_class.value
            if outcome.outcome_class is not OutcomeClass.INFRA_FAILURE:
                problems = self.audit(data)
                if problems:
                    if self.config.audit_failure == "stop":
                        raise TrainingError(f"episode {data['episode_id']} fails the token audit: {problems[0]}")
                    dropped, cls = dropped + 1, "audit_failed"
            versions = [int(v) for v in data["versions"].get("weight_versions", []) if v is not None]
            if versions:
                lag = max(lag, int(self.state.weight_version) - min(versions))
            classes.append(cls)
        if not records:
            return [], {"audit_dropped": 0, "kept": 0}
        groups = {g: i for i, g in enumerate(dict.fromkeys(r["group_id"] for r in records))}
        rewards = torch.tensor([float(r["reward"]) for r in records])
        index = torch.tensor([groups[r["group_id"]] for r in records])
        truncated = [Outcome(r["outcome"]).is_truncation for r in records]
        keep, weight, stats = grpo.select_samples(
            classes, rewards, index, truncated, exclude_classes=(*cfg.exclude_classes, "audit_failed"),
            drop_zero_variance=cfg.drop_zero_variance, mask_truncated=cfg.mask_truncated)
        kept = keep.nonzero().flatten().tolist()
        advantages = grpo.group_advantages(rewards[kept], index[kept], std_normalize=cfg.std_normalize) \
            if kept else torch.zeros(0)
        samples = [TrainingSample(records[i]["episode_id"], records[i]["prompt_ids"], records[i]["response_ids"],
                          records[i]["response_mask"], records[i]["response_logprobs"], float(a), float(weight[i]))
                   for i, a in zip(kept, advantages.tolist(), strict=True)
                   if sum(records[i]["response_mask"]) > 0]
        return samples, {**stats, "audit_dropped": dropped, "weight_version_lag": lag}

    def audit(self, data: dict[str, Any]) -> list[str]:
        """The token-record invariants of one trajectory, as the ``envhub audit`` command checks them,
        plus: the chat template is this trainer's and the sequence fits the trainer's context."""
        record = TrajectoryRecord.model_validate(data)
        problems = [f"{i.check}: {i.detail}" for i in check_record(record, self.tokenizer)]
        if record.versions.chat_template_hash != self.policy.describe().get("chat_template_hash"):
            problems.append("chat template: recorded with another chat template than the trainer's")
        if len(record.prompt_ids) + len(record.response_ids) > self.config.rollout.max_context:
            problems.append("length: longer than rollout.max_context")
        return problems

    def update(self, samples: list[TrainingSample]) -> dict[str, Any]:
        return update_policy(self.model, self.optimizer, self.scheduler, samples, config=self.config, dist=self.dist,
                             reference=self.reference, pad_id=self.pad_id)

    def _publish_weights(self, version: str, state: dict[str, torch.Tensor] | None = None) -> None:
        """The engine samples with the trained weights as ``version`` from now on: a shared module only
        changes its version; otherwise the full weights (``state``, or gathered now) are pushed."""
        if self.shared:
            self.engine.mark_weights_updated(version)
            return
        self._push(state if state is not None else fsdp.full_state_dict(self.model, self.dist), version)

    def _push(self, state: dict[str, torch.Tensor], version: str) -> None:
        """New weights to the engine; a failed or hung update stops the run (WeightSyncError)."""
        if not self.config.engine.startswith("sglang:"):
            self.sync.push(state, version)
            return
        error = None  # one server for every rank: rank 0 updates it, and every rank learns whether it worked
        if self.dist.is_main:
            try:
                self.sync.push(state, version)
            except WeightSyncError as exc:
                error = exc
        failed = fsdp.all_reduce_sum({"failed": float(error is not None)}, self.dist)["failed"]
        if error is not None:
            raise error
        if failed:
            raise WeightSyncError(f"rank 0 could not give the SGLang server weight version {version}; see its log")

    # ---- checkpoints, evaluation, export ---------------------------------------------------------

    def save_checkpoint(self) -> None:
        staging = ckpt.begin_save(self.run_dir, self.state.step) if self.dist.is_main else \
            ckpt.staging_dir(self.run_dir, self.state.step)
        fsdp.barrier(self.dist)
        ckpt.save_rank_part(staging, self.dist.rank, getattr(self.engine, "_rng", None))
        model = fsdp.full_state_dict(self.model, self.dist)
        optimizer = fsdp.optimizer_state(self.model, self.optimizer, self.dist)
        fsdp.barrier(self.dist)
        if self.dist.is_main:
            ckpt.finish_save(self.run_dir, staging, state=self.state, model=model, optimizer=optimizer,
                             scheduler=self.scheduler.state_dict(), keep=self.config.keep_checkpoints)
        fsdp.barrier(self.dist)

    def evaluate(self, tag: str) -> dict[str, Any] | None:
        """Strict success on the validation split (never the training split), rank 0 only; resumable."""
        cfg = self.config
        split = cfg.env.validation_split
        result = None
        if split is not None and self.dist.is_main:
            out = self.files.sub("eval", tag)
            factory = self._env_factory(split)
            probe = factory()
            try:
                ids = list(probe.tasks.task_ids(split))
            finally:
                probe.close()
            plans = plan_episodes(cfg.env.id, ids, episodes=cfg.eval.episodes, seed=cfg.seed) if ids else []
            policy = self._policy(cfg.sampling.with_(temperature=cfg.eval.temperature))
            t0 = time.monotonic()
            with out.store() as store, EpisodeCollector(
                    factory, policy, concurrency=cfg.rollout.concurrency,
                    policy_info={"policy": policy.name, **policy.describe()}) as collector:
                for record in collector.run([p for p in plans if p.episode_id not in store.keys]):
                    store.append(record.model_dump(mode="json"))
            records = list(out.rows())
            report = summarize(records, wall_seconds=time.monotonic() - t0)
            report.update({"env_id": cfg.env.id, "split": split, "tag": tag, "step": self.state.step,
                           "weight_version": self.state.weight_version})
            out.write_report(report)
            result = {"tag": tag, "step": self.state.step, "split": split, "episodes": len(records),
                      "strict_success": report.get("strict_success_rate", 0.0), "reward_mean": report.get("mean_reward")}
            with JsonlStore(self.run_dir / "evals.jsonl", key="tag") as evals:
                evals.append(result)
            self.telemetry.on_eval(result)
            self.log(f"eval {tag}: strict success {result['strict_success']:.3f} on {len(records)} {split} episodes")
        fsdp.barrier(self.dist)
        return result

    def eval_summaries(self) -> list[dict[str, Any]]:
        path = self.run_dir / "evals.jsonl"
        return list(read_jsonl(path)) if path.exists() else []

    def export(self) -> Path:
        """The final weights as a transformers model dir (``--policy hf:RUN/final`` evaluates it)."""
        state = fsdp.full_state_dict(self.model, self.dist)
        out = self.run_dir / "final"
        if self.dist.is_main:
            write_hf_dir(state, self.model_dir, out)
        fsdp.barrier(self.dist)
        return out

    # ---- the SFT stage ----------------------------------------------------------------------------

    def sft_stage(self) -> None:
        """Supervised warm start (:func:`envhub.trainer.sft.run_sft`); its weights go to the engine."""
        assert self.config.sft is not None
        sft.run_sft(self.model, self.sft_examples, self.config.sft, seed=self.config.seed,
                    grad_clip=self.config.optim.grad_clip, dist=self.dist, pad_id=self.pad_id, log=self.log)
        self.state.sft_done = True
        self.state.weight_version = str(int(self.state.weight_version) + 1)
        self._publish_weights(self.state.weight_version)


def train(config: TrainConfig, *, resume: bool = False, log: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Run ``config`` to the end (see :class:`Trainer`); returns the summary."""
    trainer = Trainer(config, resume=resume, log=log)
    try:
        return trainer.run()
    finally:
        trainer.close()
