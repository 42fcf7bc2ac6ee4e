"""A run that trains nothing says so, and dynamic sampling keeps a step's batch informative.

* every group zero-variance for K consecutive steps: a warning with the fraction and what to do, a
  stop with ``stop_when_untrained``; the summary and the last console line give optimizer steps,
  trained samples and the weight version (0 optimizer steps: "trained nothing");
* dynamic sampling draws more groups (bounded, counted) until the step has ``groups_per_step``
  informative ones, and the data cursor moves past every group drawn;
* a step replayed after ``--resume`` keeps its first run's rollout timing and is marked replayed.
"""

import json
import shutil

from letter_env import FirstLetterEnv
from trainer_fixtures import letter_config

from envhub.registry import register
from envhub.trainer.config import parse_config
from envhub.trainer.loop import Trainer, headline, train
from envhub.types import Task


class NeverRightEnv(FirstLetterEnv):
    """No reply starts with a letter of an empty set: every episode fails, every group has zero variance."""

    env_id = "test/NeverRight-v0"

    def load_tasks(self):
        tasks = super().load_tasks()
        for task_id, task in list(tasks._tasks.items()):
            tasks._tasks[task_id] = Task(**{**task.model_dump(), "hidden": {"letters": ()}})
        return tasks

    def task_cache_key(self) -> str:
        return "never-right"


register(NeverRightEnv.env_id, NeverRightEnv, description="every episode fails")


def _steps(run):
    return [json.loads(line) for line in (run / "steps.jsonl").read_text().splitlines()]


def test_a_run_whose_groups_all_have_zero_variance_warns_and_stops(tmp_path, scratch_model, one_torch_thread):
    lines: list[str] = []
    config = parse_config(letter_config(tmp_path / "run", scratch_model, env={"id": NeverRightEnv.env_id},
                                        algorithm={"zero_variance_patience": 2, "stop_when_untrained": True},
                                        steps=6))
    summary = train(config, log=lines.append)
    assert summary["steps"] == 2 and "stop_when_untrained" in summary["stopped"]
    assert (summary["optimizer_steps"], summary["trained_samples"], summary["weight_version"]) == (0, 0, "0")
    (warning,) = [line for line in lines if line.startswith("warning: the last 2 steps trained nothing")]
    assert "4 of 4 groups had zero variance (100%" in warning and "envhub profile" in warning
    assert lines[-1].startswith("done: trained nothing in 2 GRPO steps (0 optimizer steps")
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["optimizer_steps"] == 0
    assert (tmp_path / "run" / "checkpoints" / "step-000002").is_dir()  # the stop is resumable


def test_without_the_stop_flag_the_run_warns_and_goes_on(tmp_path, scratch_model, one_torch_thread):
    lines: list[str] = []
    config = parse_config(letter_config(tmp_path / "run", scratch_model, env={"id": NeverRightEnv.env_id},
                                        algorithm={"zero_variance_patience": 2}, steps=3))
    summary = train(config, log=lines.append)
    assert summary["steps"] == 3 and summary["stopped"] is None
    assert sum(line.startswith("warning: the last 2 steps trained nothing") for line in lines) == 1


def test_the_headline_names_what_was_trained():
    summary = {"steps": 8, "optimizer_steps": 5, "trained_samples": 40, "weight_version": "5",
               "final_eval": {"strict_success": 0.5, "episodes": 128}}
    assert headline(summary) == ("done: trained 5 optimizer steps on 40 samples in 8 GRPO steps, weight version 5; "
                                 "final strict success 0.500 on 128 episodes")
    assert "trained nothing" in headline({**summary, "optimizer_steps": 0, "trained_samples": 0})


def test_dynamic_sampling_draws_groups_until_the_step_is_informative(tmp_path, scratch_model, one_torch_thread):
    run = tmp_path / "run"
    config = parse_config(letter_config(run, scratch_model, rollout={"dynamic_sampling": True, "max_extra_rounds": 3},
                                        steps=3))
    trainer = Trainer(config, log=lambda line: None)
    try:
        cursors, drawn = [], []
        for _ in range(3):
            cursors.append(trainer.state.cursor)
            record = trainer.train_step()
            step_dir = run / "rollouts" / f"step-{record['step']:06d}" / "trajectories.jsonl"
            episodes = [json.loads(line) for line in step_dir.read_text().splitlines()]
            assert len(episodes) == record["groups_drawn"] * 4  # every drawn group was played
            assert 2 <= record["groups_drawn"] <= 2 + 3 * 2 and record["sampling_rounds"] <= 3
            trained_groups = {e.rsplit("-", 1)[0] for e in record["trained_episodes"]}
            assert len(trained_groups) == min(record["informative_groups"], 2)
            assert record["surplus_groups"] == max(record["informative_groups"] - 2, 0)
            if record["informative_groups"] < 2:
                assert record["sampling_rounds"] == 3  # bounded: it gave up after max_extra_rounds
            assert trainer.state.cursor == cursors[-1] + record["groups_drawn"]
            drawn.append(record["groups_drawn"])
        assert max(drawn) > 2  # some step over-sampled: a random model is right ~16 % of the time
    finally:
        trainer.close()


def test_dynamic_sampling_gives_up_after_its_rounds_on_an_unlearnable_env(tmp_path, scratch_model, one_torch_thread):
    config = parse_config(letter_config(tmp_path / "run", scratch_model, env={"id": NeverRightEnv.env_id},
                                        rollout={"dynamic_sampling": True, "max_extra_rounds": 2}, steps=1))
    trainer = Trainer(config, log=lambda line: None)
    try:
        record = trainer.train_step()
    finally:
        trainer.close()
    assert (record["groups_drawn"], record["sampling_rounds"], record["informative_groups"]) == (6, 2, 0)
    assert record["trained_episodes"] == [] and not record["updated"]


def test_a_step_replayed_after_resume_keeps_its_first_timing(tmp_path, scratch_model, one_torch_thread):
    run = tmp_path / "run"
    train(parse_config(letter_config(run, scratch_model, steps=3)), log=lambda line: None)
    first = _steps(run)[2]
    # as a kill after step 3's line and before its checkpoint leaves it: the latest checkpoint is step 2
    shutil.rmtree(run / "checkpoints" / "step-000003")
    (run / "checkpoints" / "latest").write_text("step-000002\n")
    train(parse_config(letter_config(run, scratch_model, steps=4)), resume=True, log=lambda line: None)
    replayed, new = _steps(run)[2:]
    assert replayed["step"] == 3 and replayed["replayed"] is True
    assert replayed["time"]["rollout_s"] == first["time"]["rollout_s"]
    assert replayed["tokens_per_second"] == first["tokens_per_second"]
    assert replayed["resumed_episodes"] == 8 and "replayed" not in new and new["resumed_episodes"] == 0
