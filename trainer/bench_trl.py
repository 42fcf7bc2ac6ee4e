"""The TRL side of ``envhub bench train``: ``trl.GRPOTrainer`` on the prompts our trainer gets.

Run only as a child of :mod:`envhub.trainer.bench` (one subprocess per side, so the parent reads
this process's peak RSS alone). TRL's settings that matter for the comparison, all explicit:
``use_cpu=True, bf16=False`` (fp32 on the CPU, TRL's generation through ``model.generate``, no vLLM),
``per_device_train_batch_size`` = the micro-batch and ``gradient_accumulation_steps`` = the step's
completions / micro-batch (TRL then generates every completion of the step at once and makes one
optimizer step of them), ``num_generations`` = the group size,
``max_completion_length``, ``temperature``, ``top_p=1, top_k=0``, ``beta=0`` (no reference model,
as ours), ``loss_type="grpo"``, ``save_strategy="no"``. Steps are timed by a callback from
``on_step_begin`` (before TRL generates) to ``on_step_end`` (after the optimizer step).

* single-turn: the dataset's prompts are plain strings, the env's opening messages and tools rendered
  with the model's chat format exactly as our policy renders them (so both sides see the same
  tokens); the reward function grades each completion with the env's own parser and verifier;
* multi-turn: conversational prompts from :func:`envhub.adapters.trl.trl_dataset` and
  :class:`envhub.adapters.trl.EnvhubRolloutFunc` as ``rollout_func``, which plays whole episodes.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from envhub.trainer.bench import TRL_DOES


def current_rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def rendered_dataset(env_id: str, env_args: dict[str, Any], split: str, task_ids: list[str], tokenizer: Any) -> Any:
    """Plain-text prompts: each task's opening messages and tools in the model's chat format."""
    from datasets import Dataset

    from envhub.adapters.chat_format import chat_format_for
    from envhub.registry import make

    fmt = chat_format_for(tokenizer)
    env = make(env_id, split=split, **env_args)
    rows = []
    try:
        for task_id in task_ids:
            obs = env.reset(task_id=task_id)
            rows.append({"prompt": fmt.render_prompt(tokenizer, obs.messages, obs.tools), "task_id": task_id})
    finally:
        env.close()
    return Dataset.from_list(rows)


def verifier_reward(env_id: str, env_args: dict[str, Any], split: str) -> Any:
    """A TRL reward function: each completion is the one turn of an episode of its task, graded by
    the env (its parser, then its verifier); TRL passes the dataset's ``task_id`` column."""
    from envhub.registry import make
    from envhub.types import Action

    def envhub_verifier(completions: list[str], task_id: list[str], **kwargs: Any) -> list[float]:
        env = make(env_id, split=split, **env_args)
        rewards = []
        try:
            for text, task in zip(completions, task_id, strict=True):
                env.reset(task_id=task)
                obs = env.step(Action(text=text))
                rewards.append(float(obs.reward or 0.0) if obs.done else 0.0)
        finally:
            env.close()
        return rewards

    return envhub_verifier


def _step_timer() -> Any:
    from transformers import TrainerCallback

    class StepTimer(TrainerCallback):
        def __init__(self) -> None:
            self.steps: list[dict[str, Any]] = []
            self._t0 = 0.0

        def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self._t0 = time.perf_counter()

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self.steps.append({"step": int(state.global_step), "seconds": time.perf_counter() - self._t0,
                               "rss_mb": current_rss_mb()})

    return StepTimer()


def trl_child(spec: dict[str, Any]) -> dict[str, Any]:
    """TRL's side of one mode of the benchmark (``spec`` is written by :func:`envhub.trainer.bench.bench_mode`)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from envhub.adapters.trl import envhub_reward, make_rollout_func, trl_dataset

    s, mode = spec["settings"], spec["mode"]
    env_id, env_args, split, task_ids = spec["env_id"], spec["env_args"], spec["split"], spec["task_ids"]
    torch.set_num_threads(s["threads"])
    completions = s["prompts"] * s["group_size"]
    micro = s["micro_batch_size"] or completions  # TRL generates all completions of the step at once either way
    tokenizer = AutoTokenizer.from_pretrained(spec["model"])
    model = AutoModelForCausalLM.from_pretrained(spec["model"], dtype=torch.float32)
    if mode == "single":
        dataset = rendered_dataset(env_id, env_args, split, task_ids, tokenizer)
        rewards, rollout = [verifier_reward(env_id, env_args, split)], None
        prompt_tokens = statistics.fmean(len(tokenizer(row["prompt"])["input_ids"]) for row in dataset)
    else:
        dataset = trl_dataset(env_id, split=split, task_ids=task_ids, env_kwargs=env_args)
        rollout = make_rollout_func(env_id, dataset, split=split, env_kwargs=env_args,
                                    max_new_tokens=s["max_new_tokens"], max_completion_tokens=spec["response_budget"],
                                    max_context=s["max_context"], concurrency=completions)
        rewards, prompt_tokens = [envhub_reward], None
    timer = _step_timer()
    with tempfile.TemporaryDirectory(prefix="envhub-bench-trl-") as out_dir:
        config = GRPOConfig(
            output_dir=out_dir, use_cpu=True, bf16=False, per_device_train_batch_size=micro,
            gradient_accumulation_steps=completions // micro, num_generations=s["group_size"],
            max_completion_length=spec["response_budget"], temperature=s["temperature"], top_p=1.0, top_k=0,
            beta=0.0, loss_type="grpo", learning_rate=s["lr"], max_steps=s["warmup"] + s["steps"],
            gradient_checkpointing=s["trl_gradient_checkpointing"], logging_steps=1, report_to="none",
            save_strategy="no", disable_tqdm=True, seed=s["seed"], dataloader_num_workers=0,
        )
        trainer = GRPOTrainer(model=model, processing_class=tokenizer, reward_funcs=rewards, args=config,
                              train_dataset=dataset, rollout_func=rollout, callbacks=[timer])
        trainer.train()
    logs = {int(h["step"]): h for h in trainer.state.log_history if "loss" in h and "step" in h}
    for line in timer.steps:
        log = logs.get(line["step"], {})
        line.update({"reward_mean": log.get("reward"), "loss": log.get("loss"),
                     "completion_tokens": log.get("completions/mean_length")})
    if rollout is not None and rollout.records:
        prompt_tokens = statistics.fmean(len(r.prompt_ids) for r in rollout.records)
    return {"steps": timer.steps, "does": TRL_DOES[mode], "prompt_tokens_mean": prompt_tokens}
