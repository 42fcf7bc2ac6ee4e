"""A GRPO step says each stage as it ends (rollouts, audit and selection, update, weight push), evals say
when they start, and the paired comparison of the first and the final eval closes the run: plain lines
on stderr, also when it is no terminal."""

import json
import os
import subprocess
import sys

import pytest
import yaml
from trainer_fixtures import TRAIN_SCRIPT, letter_config

from envhub.trainer.config import parse_config
from envhub.trainer.loop import Trainer

STAGES = ("rollouts", "audit and selection", "update", "weight push")


def test_each_stage_line_comes_when_its_stage_ends_not_when_the_step_does(tmp_path, scratch_model, one_torch_thread):
    config = parse_config(letter_config(tmp_path / "run", scratch_model, steps=2, optim={"lr": 1e-2}))
    seen: list[tuple[str, int, str, int]] = []
    trainer: Trainer | None = None

    def log(line):
        if trainer is not None:  # the step, weight version and steps.jsonl lines when the line is said
            seen.append((line, trainer.state.step, trainer.state.weight_version, len(trainer.files.steps())))

    trainer = Trainer(config, log=log)
    try:
        trainer.run()
    finally:
        trainer.close()
    trained = 0
    for step in (1, 2):
        said = [entry for entry in seen if entry[0].startswith(f"[step {step}/2] ")]
        assert [line.split("] ", 1)[1].split(":")[0] for line, *_ in said] == list(STAGES), said
        assert all(done == step - 1 and on_disk == step - 1 for _, done, _, on_disk in said), said
        assert all(line.rsplit(" in ", 1)[1].endswith("s") for line, *_ in said)
        rollouts, _, update, push = said
        assert rollouts[0].startswith(f"[step {step}/2] rollouts: 8 episodes in 2 groups, ")
        if "optimizer step" in update[0]:  # the weight version moves on after the update, at the push
            trained += 1
            assert int(push[2]) == int(update[2]) + 1 and f"weight version {push[2]} in " in push[0]
        summary = next(i for i, (line, *_) in enumerate(seen) if line.startswith(f"step {step}/2 "))
        assert summary > seen.index(push)
    assert trained, "no step trained: the weight push line was not tested"


@pytest.mark.slow
def test_the_train_command_prints_stages_and_the_paired_verdict_without_a_terminal(tmp_path, scratch_model):
    run = tmp_path / "run"
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(letter_config(run, scratch_model, steps=2, env={"validation_split": "validation"},
                                                   eval={"episodes": 8, "temperature": 1.0})))
    done = subprocess.run([sys.executable, str(TRAIN_SCRIPT), str(config)], capture_output=True, text=True,
                          timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()

    def at(prefix):
        return next(i for i, line in enumerate(lines) if line.startswith(prefix))

    order = [at("eval before: sampling 8 validation episodes with weight version 0"),
             *(at(f"[step 1/2] {stage}: ") for stage in STAGES), at("step 1/2 "),
             *(at(f"[step 2/2] {stage}: ") for stage in STAGES), at("step 2/2 "),
             at("paired: final against before on the same 8 episodes: strict success "), at("done: ")]
    assert order == sorted(order), lines
    paired = json.loads((run / "summary.json").read_text())["paired"]
    assert {"mcnemar_p", "evidence", "evidence_sentence"} <= paired.keys()
    line = lines[at("paired: ")]
    assert line.endswith(paired["evidence_sentence"]) and "exact McNemar p = " in line
    assert f"{paired['wins']} win" in line or paired["wins"] + paired["losses"] == 0


def test_long_rollouts_count_their_episodes_while_they_run():
    from envhub.trainer.telemetry import StepProgress
    from envhub.types import TrajectoryRecord, Versions

    def record(i, outcome):
        return TrajectoryRecord(episode_id=f"e{i}", task_id="t", env_id="e", group_id="g", sample_index=i,
                                versions=Versions(envhub="0", env="0"), outcome=outcome)

    lines: list[str] = []
    progress = StepProgress(3, 10, 4, lines.append, every_s=0.0)
    for i, outcome in enumerate(("success", "wrong_answer", "success")):
        progress.on_episode(record(i, outcome))
    assert lines[0].startswith("[step 3/10] rollouts: 1 of 4 episodes sampled so far, 1 successes, ")
    assert lines[-1].startswith("[step 3/10] rollouts: 3 of 4 episodes sampled so far, 2 successes, ")
    progress.plan_more(4)  # dynamic sampling draws another round: its episodes are planned too
    progress.on_episode(record(3, "success"))
    assert lines[-1].startswith("[step 3/10] rollouts: 4 of 8 episodes sampled so far, 3 successes, ")
    quiet: list[str] = []
    progress = StepProgress(1, 2, 4, quiet.append)  # every 30 s: none in a test's first second
    progress.on_episode(record(0, "success"))
    progress.rollouts([record(i, "success") for i in range(4)], reused={"e0"})
    assert quiet == [quiet[0]] and quiet[0].startswith(
        "[step 1/2] rollouts: 4 episodes in 1 group, 4 successes (1 already on disk from before the resume) in ")
