"""envhub/ReasoningGym-v0: reasoning-gym datasets by name and config, graded by their score_answer."""

import importlib.util
import os

import pytest
from typer.testing import CliRunner

if importlib.util.find_spec("reasoning_gym") is None:
    if os.environ.get("CI"):  # CI installs the extra; a silent skip there would hide a broken setup
        raise RuntimeError("CI must install the reasoning-gym extra: pip install '.[reasoning-gym]'")
    pytest.skip("the reasoning-gym extra is not installed: pip install 'envhub[reasoning-gym]'",
                allow_module_level=True)

from envhub.parsing import format_tool_call
from envhub.tasks.reasoning_gym import ENV_ID, register_envs
from envhub.tasks.reasoning_gym.env import ReasoningGymEnv, ReasoningGymTasks, reasoning_gym_attacks
from envhub.types import Outcome
from envhub.verifiers.suite import run_suite

DATASETS = {
    "chain_sum": {"min_terms": 2, "max_terms": 4},
    "leg_counting": {"max_animals": 4},
    "word_sorting": {},
    "basic_arithmetic": {},
}


@pytest.mark.parametrize("dataset", sorted(DATASETS))
def test_suite_passes_on_dataset(dataset):
    config = DATASETS[dataset]

    def factory():
        return ReasoningGymEnv(dataset=dataset, config=config, size=200, split="test")

    ids = factory().tasks.task_ids("test")[:12]
    assert ids and all(i.startswith(f"rg-{dataset}-") for i in ids)
    report = run_suite(factory, ids)
    assert report.violations == 0, report.to_json()
    assert report.by_case()["gold"]["rate"] == 1.0
    assert {c.name for c in reasoning_gym_attacks()} <= set(report.by_case())


def test_tasks_are_deterministic_and_splits_disjoint_by_question():
    a = ReasoningGymTasks("chain_sum", {"max_terms": 3}, size=300, seed=5)
    b = ReasoningGymTasks("chain_sum", {"max_terms": 3}, size=300, seed=5)
    questions = {}
    for split in ("train", "validation", "test"):
        assert a.task_ids(split) == b.task_ids(split)
        questions[split] = {a.get(t).prompt for t in a.task_ids(split)}
        assert all(a.get(t).split == split for t in a.task_ids(split))
    assert not questions["train"] & questions["test"] and not questions["train"] & questions["validation"]
    assert not questions["validation"] & questions["test"]
    other = ReasoningGymTasks("chain_sum", {"max_terms": 4}, size=300, seed=5)
    assert other.key != a.key and not set(other.task_ids("train")) & set(a.task_ids("train"))
    with pytest.raises(KeyError):
        a.get(other.task_ids("train")[0])


def test_the_datasets_score_answer_is_the_correctness_layer():
    env = ReasoningGymEnv(dataset="spell_backward", size=50, split="train", partial_credit=True)
    tid = env.tasks.task_ids("train")[0]
    task = env.tasks.get(tid)
    gold = task.hidden["answer"]
    env.reset(task_id=tid)
    near_miss = gold[:-1] + ("a" if gold[-1] != "a" else "b")
    obs = env.step(format_tool_call("answer", {"answer": near_miss}))
    expected = env.tasks.dataset.score_answer(near_miss, env.tasks.entry(task.hidden["index"]))
    assert 0 < expected < 1  # the dataset gives partial credit; envhub passes it through
    assert obs.outcome == Outcome.WRONG_ANSWER and obs.reward == pytest.approx(expected)
    assert obs.verdict.layers[-1].details["raw_score"] == pytest.approx(expected)
    env.reset(task_id=tid)
    obs = env.step(format_tool_call("answer", {"answer": f" {gold}\n"}))  # whitespace is not a different answer
    assert obs.outcome == Outcome.SUCCESS and obs.reward == 1.0


def test_suite_flags_a_scorer_that_can_be_gamed(monkeypatch):
    env = ReasoningGymEnv(dataset="chain_sum", size=100, split="test")
    lenient = lambda answer, entry: 1.0 if entry["answer"] in answer else 0.0  # noqa: E731
    monkeypatch.setattr(env.tasks.dataset, "score_answer", lenient)
    report = run_suite(lambda: env, env.tasks.task_ids("test")[:5])
    cases = report.by_case()
    assert cases["two_candidates"]["violations"] and cases["candidate_list"]["violations"]
    assert not cases["gold"]["violations"]


def test_bad_names_and_configs_are_clear_errors():
    with pytest.raises(ValueError, match=r"Known datasets:.*chain_sum"):
        ReasoningGymEnv(dataset="no_such_dataset").tasks  # noqa: B018
    with pytest.raises(ValueError, match="cannot build"):
        ReasoningGymEnv(dataset="chain_sum", config={"bogus": 1}).tasks  # noqa: B018
    with pytest.raises(ValueError, match="env args"):
        ReasoningGymEnv(dataset="chain_sum", config={"size": 3}).tasks  # noqa: B018


def test_cli_verify_with_dataset_and_config_env_args():
    register_envs()
    from envhub.cli.commands import app

    result = CliRunner().invoke(app, ["verify", ENV_ID, "--limit", "8", "--env-arg", "dataset=leg_counting",
                                      "--env-arg", 'config={"max_animals": 3}', "--env-arg", "size=100"])
    assert result.exit_code == 0, result.output
    assert "json_claim" in result.output
