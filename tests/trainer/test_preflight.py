"""Configs that would train nothing are refused before anything runs, with a message naming the setting."""

import pytest
import yaml
from trainer_fixtures import letter_config

from envhub.trainer.config import load_config, parse_config
from envhub.trainer.loop import Trainer
from envhub.trainer.preflight import PreflightError, check_config


def _problems(tmp_path, model, **sections):
    return check_config(parse_config(letter_config(tmp_path / "run", model, **sections)))


@pytest.mark.parametrize(("sections", "says"), [
    ({"rollout": {"group_size": 1}}, "group_size is 1"),
    ({"sampling": {"temperature": 0.0}}, "greedy"),
    ({"sampling": {"top_p": 0.9}}, "top_p"),
    ({"algorithm": {"clip_low": 1.0}}, "clip_low is 1.0"),
    ({"algorithm": {"clip_low": 0.0, "clip_high": 0.0}}, "clipped to 1 on both sides"),
    ({"algorithm": {"mismatch": {"mode": "decoupled", "weight": "mask", "cap": 0.9}}}, "would be masked"),
    ({"algorithm": {"mismatch": {"mode": "bypass", "normalize": "group"}}}, "no importance weights to normalize"),
    ({"sampling": {"max_new_tokens": 8}, "rollout": {"max_response_tokens": 4}}, "response budget"),
    ({"algorithm": {"exclude_classes": []}}, "algorithm.train_on_infra: true"),
])
def test_config_that_trains_nothing_is_named(tmp_path, scratch_model, sections, says):
    problems = _problems(tmp_path, scratch_model, **sections)
    assert len(problems) == 1 and says in problems[0], problems


def test_a_sound_config_has_no_problem(tmp_path, scratch_model):
    assert _problems(tmp_path, scratch_model) == []
    assert _problems(tmp_path, scratch_model, algorithm={"loss": "cispo", "clip_low": 0.0, "clip_high": 0.0}) == []


def test_trainer_refuses_before_building_anything(tmp_path, scratch_model):
    with pytest.raises(PreflightError, match="group_size is 1") as info:
        Trainer(parse_config(letter_config(tmp_path / "run", scratch_model, rollout={"group_size": 1})))
    assert "would train nothing" in str(info.value)
    assert not (tmp_path / "run").exists()


def test_split_without_tasks_and_a_prompt_that_cannot_fit(tmp_path, scratch_model):
    curriculum = tmp_path / "curriculum.json"
    curriculum.write_text('{"task_ids": ["validation-0", "no-such-task"]}')
    with pytest.raises(PreflightError, match="lists no task of split 'train'"):
        Trainer(parse_config(letter_config(tmp_path / "a", scratch_model, env={"curriculum": str(curriculum)})))
    with pytest.raises(PreflightError, match="every episode would overflow"):
        Trainer(parse_config(letter_config(tmp_path / "b", scratch_model, rollout={"max_context": 100})))


def test_config_file_overrides_and_typos(tmp_path, scratch_model):
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(letter_config(tmp_path / "run", scratch_model)))
    config = load_config(path, ["optim.lr=3e-5", "algorithm.loss=dapo", "algorithm.clip_high=0.28"])
    assert (config.optim.lr, config.algorithm.loss, config.algorithm.clip_high) == (3e-5, "dapo", 0.28)
    with pytest.raises(ValueError, match=r"optim\.lerning_rate: Extra inputs are not permitted"):
        load_config(path, ["optim.lerning_rate=1"])
    with pytest.raises(ValueError, match=r"algorithm\.loss"):
        load_config(path, ["algorithm.loss=ppo2"])
    with pytest.raises(ValueError, match="budget field max_turns must not be negative"):
        load_config(path, ["env.budget={max_turns: -1}"])
    with pytest.raises(ValueError, match=r"use key\.sub=value"):
        load_config(path, ["optim.lr"])


@pytest.mark.slow
def test_train_command_reports_a_bad_config_without_a_traceback(tmp_path, scratch_model):
    import subprocess

    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(letter_config(tmp_path / "run", scratch_model, rollout={"group_size": 1})))
    for args, says in (([str(tmp_path / "missing.yaml")], "cannot read config"), ([str(bad)], "group_size is 1")):
        done = subprocess.run(["envhub", "train", *args], capture_output=True, text=True, timeout=120)
        assert done.returncode == 2, done.stderr
        assert done.stderr.startswith("error: ") and says in done.stderr and "Traceback" not in done.stderr


def test_training_on_infra_outcomes_needs_the_explicit_flag(tmp_path, scratch_model):
    problems = _problems(tmp_path, scratch_model, algorithm={"exclude_classes": ["policy_failure"]})
    assert len(problems) == 1 and "reward-0 failures" in problems[0] and "algorithm.train_on_infra: true" in problems[0]
    assert _problems(tmp_path, scratch_model, algorithm={"exclude_classes": [], "train_on_infra": True}) == []


def test_kl_with_an_sft_stage_says_the_reference_is_the_post_sft_policy(tmp_path, scratch_model):
    from envhub.trainer.preflight import config_notes

    gold = tmp_path / "gold"
    gold.mkdir()
    (gold / "trajectories.jsonl").write_text('{"outcome": "success"}\n')
    config = parse_config(letter_config(tmp_path / "run", scratch_model, sft={"runs": [str(gold)]},
                                        algorithm={"kl_coef": 0.05}))
    assert check_config(config) == []
    (note,) = config_notes(config)
    assert "KL reference is the policy after SFT" in note and "not the base model" in note
    assert config_notes(parse_config(letter_config(tmp_path / "run", scratch_model, sft={"runs": ["gold"]}))) == []


def test_the_chat_family_is_named_in_the_config_and_checked(tmp_path, scratch_model):
    from envhub.adapters.chat_format import UnsupportedChatFormat

    with pytest.raises(ValueError, match=r"unknown chat_format 'nonsense'; known: .*llama3"):
        parse_config(letter_config(tmp_path / "run", scratch_model, chat_format="nonsense"))
    with pytest.raises(UnsupportedChatFormat, match="llama3"):  # SmolLM2's tokenizer has none of its tokens
        Trainer(parse_config(letter_config(tmp_path / "llama", scratch_model, chat_format="llama3")), log=lambda line: None)
    assert not (tmp_path / "llama" / "steps.jsonl").exists()
    trainer = Trainer(parse_config(letter_config(tmp_path / "chatml", scratch_model, chat_format="chatml")),
                      log=lambda line: None)
    try:
        assert trainer.policy.format.name == "chatml"
    finally:
        trainer.close()
