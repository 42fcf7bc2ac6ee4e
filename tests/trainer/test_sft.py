"""The SFT warm start: scripted (gold) runs re-encoded exactly as the model policy records sampled
turns, and a supervised stage that teaches the model what the accepted episodes did."""

import json

import pytest
from trainer_fixtures import letter_config
from transformers import AutoTokenizer

from envhub.adapters.engines.scripted import ScriptedEngine
from envhub.adapters.model_policy import ModelPolicy
from envhub.policies import make_policy
from envhub.registry import make
from envhub.rollout.collect import EpisodePlan, describe_policy, run_episode
from envhub.rollout.runner import run_rollouts
from envhub.trainer.config import parse_config
from envhub.trainer.loop import train
from envhub.trainer.sft import reencode, sft_samples
from envhub.types import TrajectoryRecord


def _records(run):
    return [TrajectoryRecord.model_validate(json.loads(line))
            for line in (run / "trajectories.jsonl").read_text().splitlines()]


def test_gold_turns_reencode_to_the_tokens_a_model_saying_them_would_record(tmp_path, scratch_model):
    """Multi-turn (a python call, its output, the answer): the re-encoded token view of a gold episode
    equals, token for token and mask for mask, the record of a model that sampled those same texts."""
    env_id, kwargs = "envhub/Computation-v0", {"sandbox": "process", "levels": [1]}
    run_rollouts(env_id, make_policy("gold"), out_dir=tmp_path / "gold", episodes=2, env_kwargs=kwargs)
    gold = _records(tmp_path / "gold")
    assert all(r.outcome == "success" and not r.response_ids and r.num_turns == 2 for r in gold)
    tokenizer = AutoTokenizer.from_pretrained(str(scratch_model))
    for record in gold:
        engine = ScriptedEngine(tokenizer, [t.action_text for t in record.turns])
        policy = ModelPolicy(engine, tokenizer, max_context=4096)
        with make(env_id, **kwargs) as env:
            plan = EpisodePlan(record.episode_id, record.group_id, record.task_id, 0, 0)
            sampled = run_episode(env, policy, plan, describe_policy(policy))
        assert sampled.outcome == "success" and sampled.num_turns == 2
        view = reencode(record, policy)
        assert view.prompt_ids == sampled.prompt_ids
        assert view.response_ids == sampled.response_ids
        assert view.response_mask == sampled.response_mask
        assert 0 in view.response_mask and 1 in view.response_mask


@pytest.mark.slow
def test_sft_stage_teaches_the_accepted_answers(tmp_path, scratch_model, one_torch_thread):
    gold = tmp_path / "gold"
    run_rollouts("test/FirstLetter-v0", make_policy("gold"), out_dir=gold, episodes=8)
    noop = tmp_path / "noop"
    run_rollouts("test/FirstLetter-v0", make_policy("noop"), out_dir=noop, episodes=4)
    tokenizer = AutoTokenizer.from_pretrained(str(scratch_model))
    policy = ModelPolicy(ScriptedEngine(tokenizer, ["x"]), tokenizer)
    samples, stats = sft_samples([gold, noop], policy, outcomes=("success",), max_context=512)
    assert (stats["episodes"], stats["accepted"], stats["reencoded"]) == (12, 8, 8)
    assert all(s.response_mask == [1, 1] for s in samples)  # "cat" and the end token, both the model's
    config = parse_config(letter_config(
        tmp_path / "run", scratch_model, env={"validation_split": "validation"},
        sft={"runs": [str(gold)], "epochs": 10, "lr": 0.05, "batch_size": 4},
        sampling={"max_new_tokens": 1}, eval={"episodes": 32, "temperature": 1.0}, steps=0))
    summary = train(config, log=lambda line: None)
    evals = {e["tag"]: e["strict_success"] for e in summary["evals"]}
    assert evals["before"] <= 0.3 and evals["after-sft"] >= 0.9, evals
    state = json.loads((tmp_path / "run" / "checkpoints" / "step-000000" / "state.json").read_text())
    assert state["sft_done"] and state["weight_version"] == "1"


def test_sft_examples_longer_than_a_sampled_turn_are_refused_up_front(tmp_path, scratch_model):
    from envhub.trainer.loop import Trainer
    from envhub.trainer.preflight import PreflightError

    gold = tmp_path / "gold"
    run_rollouts("envhub/Computation-v0", make_policy("gold"), out_dir=gold, episodes=4,
                 env_kwargs={"sandbox": "process", "kinds": ["bigint"], "levels": [1]})
    config = parse_config(letter_config(tmp_path / "run", scratch_model, sft={"runs": [str(gold)]},
                                        sampling={"max_new_tokens": 2}, rollout={"max_context": 2048}))
    with pytest.raises(PreflightError, match=r"turns of up to \d+ tokens but sampling.max_new_tokens is 2"):
        Trainer(config, log=lambda line: None)
    assert not (tmp_path / "run" / "eval").exists()  # refused before the first evaluation
