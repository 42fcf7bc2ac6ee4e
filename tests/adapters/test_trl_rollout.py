"""TRL: a real ``trl.GRPOTrainer`` trains the tiny model for 2 steps on CPU, its completions coming
from envhub episodes through :class:`envhub.adapters.trl.EnvhubRolloutFunc`.

TRL's contract (trl >= 1.x ``rollout_func``): the function receives this process's prompts, each
already repeated ``num_generations`` times, and returns one completion per entry as
``prompt_ids``, ``completion_ids``, ``logprobs``, optionally ``env_mask``; other keys reach the
reward functions.
"""

from __future__ import annotations

import hashlib
import math
import os
from pathlib import Path
from typing import Any

import pytest

trl = pytest.importorskip("trl")
datasets = pytest.importorskip("datasets")

from token_runs import shared_token_run, smollm2_tokenizer  # noqa: E402

from envhub.adapters.trl import EnvhubRolloutFunc, envhub_reward, make_rollout_func, trl_dataset  # noqa: E402
from envhub.types import TrajectoryRecord  # noqa: E402

ENV = "envhub/Computation-v0"
ENV_KWARGS = {"budget": {"max_turns": 2, "max_format_errors": 2}}


def spread(envhub_episode_id: list[str], **kwargs: Any) -> list[float]:
    """A second reward that differs within a group, so the GRPO loss (and the update) is not zero:
    the random tiny model never solves a task, so envhub's reward alone is 0 for every sample.
    (It reads an extra field of the rollout output, as TRL hands those to reward functions.)"""
    return [int(hashlib.sha1(e.encode()).hexdigest()[:4], 16) / 65535 for e in envhub_episode_id]


@pytest.mark.slow
def test_grpo_trainer_runs_two_steps_on_envhub_episodes(tmp_path: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    from envhub.adapters.engines.tiny import build_tiny_model

    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    path = build_tiny_model()
    tokenizer = smollm2_tokenizer()
    model = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32)
    dataset = trl_dataset(ENV, limit=2, env_kwargs=ENV_KWARGS)
    assert dataset.column_names == ["prompt", "task_id", "env_id"]
    rollout = make_rollout_func(ENV, dataset, env_kwargs=ENV_KWARGS, max_new_tokens=8)
    budget = 80  # TRL's max_completion_length: turn 1 (8) + the env's reply (57) + what is left for turn 2
    seen: list[list[Any]] = []

    def spy(prompts: list[Any], trainer: Any) -> dict[str, list[Any]]:
        seen.append(prompts)
        return rollout(prompts, trainer)

    config = trl.GRPOConfig(
        output_dir=str(tmp_path / "out"), bf16=False, use_cpu=True, per_device_train_batch_size=2,
        num_generations=2, max_steps=2, max_completion_length=budget, learning_rate=1e-2, logging_steps=1,
        report_to="none", save_strategy="no", temperature=1.0, seed=0,
    )
    trainer = trl.GRPOTrainer(model=model, processing_class=tokenizer, reward_funcs=[envhub_reward, spread],
                              args=config, train_dataset=dataset, rollout_func=spy)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    result = trainer.train()

    assert result.global_step == 2 and len(seen) == 2
    for prompts in seen:  # TRL repeats each prompt num_generations times; one episode per entry
        assert len(prompts) == 2 and prompts[0] == prompts[1]
    records = rollout.records
    assert len(records) == 2 and all(r.prompt_ids and r.response_ids for r in records)
    for rec in records:
        assert rec.num_turns == 2  # the env's reply is in the completion, masked
        assert rec.response_mask[0] == 1 and 0 in rec.response_mask
        assert len(rec.response_ids) <= budget  # the trainer's budget bounds the whole completion
        assert all(math.isfinite(lp) and lp <= 0 for lp, m in zip(rec.response_logprobs, rec.response_mask,
                                                                    strict=True) if m)
    logs = [h for h in trainer.state.log_history if "loss" in h]
    assert len(logs) == 2 and all(math.isfinite(h["loss"]) for h in logs)
    changed = [n for n, p in model.named_parameters() if not torch.equal(before[n], p.detach())]
    assert changed, "two GRPO steps did not update the model"
    assert model.training  # the rollout handed the model back in training mode


def test_output_masks_infra_failures(tmp_path_factory: pytest.TempPathFactory) -> None:
    from envhub.adapters.export import load_records

    records = load_records(shared_token_run(tmp_path_factory.getbasetemp()))
    func = EnvhubRolloutFunc(ENV, [])
    out = func.to_output(records, pad_id=0)
    assert set(out) >= {"prompt_ids", "completion_ids", "logprobs", "env_mask", "envhub_reward"}
    for i, rec in enumerate(records):
        assert len(out["completion_ids"][i]) == len(out["logprobs"][i]) == len(out["env_mask"][i])
        if rec.outcome.value == "engine_error":
            assert out["envhub_reward"][i] is None and set(out["env_mask"][i]) == {0}
        else:
            assert out["envhub_reward"][i] == rec.reward and out["env_mask"][i] == rec.response_mask
    assert envhub_reward([], [], out["envhub_reward"]) == out["envhub_reward"]


def test_a_prompt_that_names_no_task_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="does not name its envhub task"):
        EnvhubRolloutFunc(ENV, [{"prompt": [{"role": "user", "content": "a"}], "task_id": "t"}])
    with pytest.raises(ValueError, match="does not name its envhub task"):
        EnvhubRolloutFunc(ENV)([[{"role": "user", "content": "b"}]], trainer=None)


#: Two code-repair tasks whose opening messages are byte-identical (same project, same bug report).
TWINS = ("ini_config-b85bbcd2", "ini_config-bbe5a9ec")


@pytest.mark.slow
@pytest.mark.bwrap
def test_tasks_with_identical_prompts_are_each_played_within_the_budget(tmp_path: Path) -> None:
    """TRL hands ``rollout_func`` nothing but the prompts. Looked up by text, the second twin was
    never played; the prompt now names its task. With ``max_completion_length=16`` every completion
    TRL receives is at most 16 tokens, env replies included (an episode whose reply does not fit
    ends as context_overflow)."""
    import torch
    from sandbox_fixtures import require_backend
    from transformers import AutoModelForCausalLM

    from envhub.adapters.engines.tiny import build_tiny_model

    require_backend("bwrap")  # code repair runs only in an isolating sandbox
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    kwargs = {"sandbox": "bwrap"}
    dataset = trl_dataset("envhub/CodeRepair-v0", task_ids=TWINS, env_kwargs=kwargs)
    assert dataset[0]["prompt"][:2] != dataset[1]["prompt"][:2]  # they differ only by the task they name
    assert [[{k: m[k] for k in ("role", "content")} for m in row["prompt"]] for row in dataset] == \
        [[{k: m[k] for k in ("role", "content")} for m in dataset[0]["prompt"]]] * 2
    rollout = make_rollout_func("envhub/CodeRepair-v0", dataset, env_kwargs=kwargs)
    played: list[TrajectoryRecord] = []

    def spy(prompts: list[Any], trainer: Any) -> dict[str, list[Any]]:
        out = rollout(prompts, trainer)
        played.extend(rollout.records)
        assert all(len(ids) <= 16 for ids in out["completion_ids"])
        return out

    model = AutoModelForCausalLM.from_pretrained(str(build_tiny_model()), dtype=torch.float32)
    config = trl.GRPOConfig(
        output_dir=str(tmp_path / "out"), bf16=False, use_cpu=True, per_device_train_batch_size=2,
        num_generations=2, max_steps=2, max_completion_length=16, learning_rate=1e-2, report_to="none",
        save_strategy="no", temperature=1.0, seed=0,
    )
    trl.GRPOTrainer(model=model, processing_class=smollm2_tokenizer(), reward_funcs=[envhub_reward, spread],
                    args=config, train_dataset=dataset, rollout_func=spy).train()
    assert sorted({r.task_id for r in played}) == sorted(TWINS) and len(played) == 4
    assert all(len(r.response_ids) <= 16 for r in played)
    assert {r.outcome.value for r in played} <= {"context_overflow", "format_error", "wrong_answer"}
