"""A run interrupted before its first checkpoint: ``--resume`` says it starts from step 0, and the eval
and the step it comes back to keep the times they first took (their episodes are on disk), marked
replayed, instead of showing the seconds of reading them back."""

import json

import pytest
from trainer_fixtures import letter_config, steps_of

from envhub.trainer.config import parse_config
from envhub.trainer.loop import train


def _interrupt_after_step_1(lines):
    def log(line):
        lines.append(line)
        if line.startswith("step 1/3 "):  # step 1 is in steps.jsonl; no checkpoint before step 3
            raise KeyboardInterrupt
    return log


def _evals(run):
    return {e["tag"]: e for e in map(json.loads, (run / "evals.jsonl").read_text().splitlines())}


@pytest.mark.slow
def test_a_resume_without_a_checkpoint_says_so_and_keeps_the_first_times(tmp_path, scratch_model, one_torch_thread):
    run = tmp_path / "run"
    config = parse_config(letter_config(run, scratch_model, steps=3, checkpoint_every=5,
                                        env={"validation_split": "validation"}, eval={"episodes": 4}))
    first: list[str] = []
    with pytest.raises(KeyboardInterrupt):
        train(config, log=_interrupt_after_step_1(first))
    assert not (run / "checkpoints").exists()
    eval_before, (step_1,) = _evals(run)["before"], steps_of(run)

    lines: list[str] = []
    train(config, resume=True, log=lines.append)
    assert f"resume: no checkpoint yet in {run}: starting from step 0 (episodes and evals already on disk " \
           "are reused)" in lines
    assert not any(line.startswith("resumed from") for line in lines)

    assert _evals(run)["before"] == eval_before  # its seconds are the first run's, not the replay's
    assert any(line.startswith("eval before: already done with weight version 0, in ") for line in lines)
    assert not any(line.startswith("eval before: sampling") for line in lines)

    steps = steps_of(run)
    assert [s["step"] for s in steps] == [1, 2, 3]
    assert steps[0]["replayed"] is True and steps[0]["resumed_episodes"] == 8
    assert steps[0]["time"]["rollout_s"] == step_1["time"]["rollout_s"]
    assert steps[0]["tokens_per_second"] == step_1["tokens_per_second"]
    assert steps[0]["trained_episodes"] == step_1["trained_episodes"]
    assert not any(s.get("replayed") for s in steps[1:])
    (progress,) = [line for line in lines if line.startswith("step 1/3 ")]
    assert progress.endswith("(replayed: its rollout time is the first run's, its episodes were on disk)")
    assert "8 already on disk from before the resume" in next(line for line in lines
                                                              if line.startswith("[step 1/3] rollouts:"))


def test_an_eval_interrupted_midway_counts_the_episodes_it_found_on_disk(tmp_path, scratch_model, one_torch_thread):
    from envhub.trainer.loop import Trainer

    config = parse_config(letter_config(tmp_path / "run", scratch_model, steps=0,
                                        env={"validation_split": "validation"}, eval={"episodes": 4}))
    trainer = Trainer(config, log=lambda line: None)
    try:
        whole = trainer.evaluate("before")
        trajectories = trainer.files.eval_run("before").trajectories_path
        kept = trajectories.read_text().splitlines()[:2]
        trajectories.write_text("".join(f"{line}\n" for line in kept))
        (trainer.files.evals_path).unlink()  # the eval never finished: no line of it
        lines: list[str] = []
        trainer.log = lines.append
        again = trainer.evaluate("before")
    finally:
        trainer.close()
    assert whole["resumed_episodes"] == 0 and again["resumed_episodes"] == 2
    assert again["strict_success"] == whole["strict_success"]  # the same planned episodes, seeded alike
    assert "eval before: sampling 4 validation episodes with weight version 0 (2 already on disk from before " \
           "the resume)" in lines
