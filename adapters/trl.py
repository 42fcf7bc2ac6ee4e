"""TRL integration: a ``rollout_func`` for ``GRPOTrainer`` that plays whole envhub episodes.

TRL's contract (``trl.GRPOTrainer(rollout_func=...)``, experimental in trl 1.x): the function
gets this process's slice of prompts (each prompt already repeated ``num_generations`` times by
TRL's sampler) and the trainer, and returns one completion per entry as a dict with
``prompt_ids``, ``completion_ids`` and ``logprobs``; ``env_mask`` (1 = the model's token,
0 = env feedback) is multiplied into the loss mask; every other key is handed to the reward
functions. Here one entry is one envhub episode: the prompt's task is reset in an env, the
trainer's current model plays it through :class:`~envhub.adapters.model_policy.ModelPolicy` (token
in, token out), and the episode's masked token view becomes the completion.

Rewards come from envhub's verifier, not from TRL: :func:`envhub_reward` is the reward function
to pass as ``reward_funcs``. Infra-failure episodes (our fault, not the model's) get reward
``None`` -- TRL then leaves them out of the group baseline and gives them zero advantage -- and
an all-zero ``env_mask``, so they never produce a gradient.

TRL passes the rollout function only the prompts, so each prompt carries its task: the first
message of a :func:`trl_dataset` prompt has an ``envhub_task_id`` key (chat templates read only
``role`` and ``content``). Prompt texts are not unique -- two code-repair tasks can open with the
very same messages -- so nothing is looked up by text.

Length: TRL's ``max_completion_length`` bounds the whole completion, and an episode's completion is
every turn's sampled tokens *plus* the env replies between them. So ``max_completion_length`` (or
the ``max_completion_tokens`` option) is the episode's response budget: each turn samples at most
``max_new_tokens`` (default: the budget) and at most what is left of the budget, and an episode
whose next env reply would not fit ends as ``context_overflow`` (reward 0: a truncation, the
model's doing). No completion TRL receives is longer than the budget.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from envhub.types import OutcomeClass, TrajectoryRecord

#: The key of a prompt's first message that names its task (see the module docstring).
TASK_KEY = "envhub_task_id"


def prompt_messages(messages: Iterable[Any], task_id: str) -> list[dict[str, Any]]:
    """An env's opening messages as a TRL prompt that carries ``task_id``."""
    return [{"role": m.role, "content": m.content, TASK_KEY: task_id if i == 0 else None}
            for i, m in enumerate(messages)]


def prompt_task_id(prompt: Any) -> str:
    """The task a :func:`trl_dataset` prompt belongs to; ValueError for any other prompt."""
    first = prompt[0] if isinstance(prompt, list) and prompt else None
    task_id = first.get(TASK_KEY) if isinstance(first, dict) else None
    if not isinstance(task_id, str) or not task_id:
        raise ValueError(f"a prompt that does not name its envhub task (no {TASK_KEY!r} in its first message); "
                         "build the trainer's dataset with envhub.adapters.trl.trl_dataset")
    return task_id


def trl_dataset(env_id: str, *, split: str = "train", limit: int | None = None,
                env_kwargs: dict[str, Any] | None = None, task_ids: Sequence[str] | None = None) -> Any:
    """A ``datasets.Dataset`` of the env's tasks (``task_ids``, default the split's; at most
    ``limit``): ``prompt`` (the opening messages, conversational form, the first naming the task),
    ``task_id`` and ``env_id``."""
    from datasets import Dataset

    from envhub.registry import make

    env = make(env_id, split=split, **(env_kwargs or {}))
    rows = []
    try:
        for task_id in list(env.tasks.task_ids(split) if task_ids is None else task_ids)[: limit]:
            obs = env.reset(task_id=task_id)
            rows.append({"prompt": prompt_messages(obs.messages, task_id), "task_id": task_id, "env_id": env_id})
    finally:
        env.close()
    return Dataset.from_list(rows)


def envhub_reward(prompts: list[Any], completions: list[Any], envhub_reward: list[float | None],
                  **kwargs: Any) -> list[float | None]:
    """Reward function for ``GRPOTrainer(reward_funcs=[envhub_reward])``: the verifier's reward
    that :class:`EnvhubRolloutFunc` computed (``None`` for an infra failure)."""
    return list(envhub_reward)


class EnvhubRolloutFunc:
    """A ``rollout_func`` (see the module docstring); call it as TRL does: ``func(prompts, trainer)``.

    ``dataset`` (optional) is checked to be one whose prompts name their tasks. ``max_new_tokens``
    caps one turn; ``max_completion_tokens`` (default: the trainer's ``max_completion_length``)
    caps the whole completion, env replies included; ``max_context`` caps prompt + completion.
    """

    def __init__(self, env_id: str, dataset: Any = None, *, split: str = "train",
                 env_kwargs: dict[str, Any] | None = None, max_new_tokens: int | None = None,
                 max_completion_tokens: int | None = None, max_context: int | None = None, concurrency: int = 8,
                 include_infra: bool = False) -> None:
        self.env_id, self.split, self.env_kwargs = env_id, split, dict(env_kwargs or {})
        self.max_new_tokens, self.max_context = max_new_tokens, max_context
        self.max_completion_tokens = max_completion_tokens
        self.concurrency = max(1, concurrency)
        self.include_infra = include_infra
        for row in dataset if dataset is not None else ():
            prompt_task_id(row["prompt"])
        self.calls = 0
        self.records: list[TrajectoryRecord] = []  # the last call's episodes, for inspection
        self._lock = threading.Lock()

    def budget(self, trainer: Any) -> int:
        """The most tokens one completion may hold: ``max_completion_tokens``, else the trainer's
        ``max_completion_length``, else 256."""
        return int(self.max_completion_tokens or getattr(trainer.args, "max_completion_length", None) or 256)

    def _sampling(self, trainer: Any) -> Any:
        from envhub.adapters.engines import SamplingParams

        args = trainer.args
        return SamplingParams(
            max_new_tokens=int(min(self.max_new_tokens or self.budget(trainer), self.budget(trainer))),
            temperature=float(getattr(args, "temperature", 1.0) or 0.0),
            top_p=float(getattr(args, "top_p", 1.0) or 1.0),
            top_k=int(getattr(args, "top_k", 0) or 0),
        )

    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, list[Any]]:
        from envhub.adapters.engines.factory import LocalModel, make_engine
        from envhub.adapters.model_policy import ModelPolicy
        from envhub.rollout.runner import EpisodePlan

        task_ids = [prompt_task_id(prompt) for prompt in prompts]
        model = trainer.accelerator.unwrap_model(trainer.model)
        was_training = model.training
        step = int(getattr(trainer.state, "global_step", 0))
        tokenizer = trainer.processing_class
        engine = make_engine("transformers", max_context=self.max_context, model=LocalModel(
            model, tokenizer, share=True, max_batch_size=len(prompts), weight_version=f"trl-step-{step}"))
        policy = ModelPolicy(engine, tokenizer, params=self._sampling(trainer), max_context=self.max_context,
                             name="trl", model_id=str(getattr(model.config, "_name_or_path", "") or "trl-model"),
                             fit_turns=True, max_response_tokens=self.budget(trainer))
        self.calls += 1
        plans = []
        for i, task_id in enumerate(task_ids):
            seed = int(hashlib.sha1(f"{task_id}|{step}|{self.calls}|{i}".encode()).hexdigest()[:8], 16)
            group = hashlib.sha1(f"{task_id}|{step}|{self.calls}".encode()).hexdigest()[:16]
            plans.append(EpisodePlan(f"trl-{group}-{i}", group, task_id, i, seed))
        try:
            with ThreadPoolExecutor(max_workers=min(self.concurrency, len(plans))) as pool:
                records = list(pool.map(self._play, plans, [policy] * len(plans)))
        finally:
            engine.close()
            model.train(was_training)
        self.records = records
        return self.to_output(records, pad_id=_pad_id(tokenizer))

    def _play(self, plan: Any, policy: Any) -> TrajectoryRecord:
        from envhub.registry import make
        from envhub.rollout.runner import run_episode

        env = make(self.env_id, split=self.split, **self.env_kwargs)
        try:
            return run_episode(env, policy, plan, {"policy": policy.name, **policy.describe()})
        finally:
            env.close()

    def to_output(self, records: Sequence[TrajectoryRecord], *, pad_id: int) -> dict[str, list[Any]]:
        """Records as TRL's rollout output. An empty response (an episode that failed before the
        model sampled anything) becomes one masked pad token: TRL needs a token per completion."""
        out: dict[str, list[Any]] = {k: [] for k in (
            "prompt_ids", "completion_ids", "logprobs", "env_mask", "envhub_reward", "envhub_outcome",
            "envhub_episode_id")}
        for rec in records:
            infra = rec.outcome_class is OutcomeClass.INFRA_FAILURE
            ids, mask, lps = list(rec.response_ids), list(rec.response_mask), list(rec.response_logprobs)
            if not ids:
                ids, mask, lps = [pad_id], [0], [0.0]
            if infra and not self.include_infra:
                mask = [0] * len(ids)
            out["prompt_ids"].append(list(rec.prompt_ids))
            out["completion_ids"].append(ids)
            out["logprobs"].append(lps)
            out["env_mask"].append(mask)
            out["envhub_reward"].append(None if infra and not self.include_infra else float(rec.reward))
            out["envhub_outcome"].append(rec.outcome.value)
            out["envhub_episode_id"].append(rec.episode_id)
        return out


def make_rollout_func(env_id: str, dataset: Any = None, **options: Any) -> EnvhubRolloutFunc:
    """``GRPOTrainer(rollout_func=make_rollout_func(env_id, ds), reward_funcs=[envhub_reward], ...)``."""
    return EnvhubRolloutFunc(env_id, dataset, **options)


def _pad_id(tokenizer: Any) -> int:
    pad = getattr(tokenizer, "pad_token_id", None)
    return int(pad if pad is not None else tokenizer.eos_token_id)
