"""Resume equals the uninterrupted run: 4 steps == 2 steps + resume + 2 steps, also after ``kill -9``
in the middle of a step. Same sampled tokens, same losses, same weights; every sample trained once."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import yaml
from trainer_fixtures import TRAIN_SCRIPT, assert_same_run, letter_config, sampled_tokens, steps_of

from envhub.trainer.config import parse_config
from envhub.trainer.loop import train


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory, scratch_model):
    run = tmp_path_factory.mktemp("full") / "run"
    train(parse_config(letter_config(run, scratch_model)), log=lambda line: None)
    return run


@pytest.mark.slow
def test_two_steps_then_resume_equals_four_steps(uninterrupted, tmp_path, scratch_model, one_torch_thread):
    run = tmp_path / "run"
    train(parse_config(letter_config(run, scratch_model, steps=2)), log=lambda line: None)
    assert json.loads((run / "checkpoints" / "step-000002" / "state.json").read_text())["step"] == 2
    with pytest.raises(Exception, match="--resume"):
        train(parse_config(letter_config(run, scratch_model)), log=lambda line: None)
    train(parse_config(letter_config(run, scratch_model)), resume=True, log=lambda line: None)
    assert_same_run(uninterrupted, run)
    every_planned = {e for s in (1, 2, 3, 4) for e in sampled_tokens(run, s)}
    trained = {e for s in steps_of(run) for e in s["trained_episodes"]}
    skipped = {e for s in steps_of(run) for e in s["untrained_episodes"]}
    assert trained | skipped == every_planned and not trained & skipped


@pytest.mark.slow
def test_kill_9_mid_step_then_resume_equals_four_steps(uninterrupted, tmp_path, scratch_model):
    run = tmp_path / "run"
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(letter_config(run, scratch_model)))
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, str(TRAIN_SCRIPT), str(config)]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    partial = run / "rollouts" / "step-000003" / "trajectories.jsonl"
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and proc.poll() is None:
        if partial.exists() and partial.read_text().count("\n") >= 3:
            break
        time.sleep(0.05)
    assert proc.poll() is None, proc.stdout.read().decode()
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert (run / "checkpoints" / "latest").read_text().strip() == "step-000002"
    assert [s["step"] for s in steps_of(run)] == [1, 2]
    done = subprocess.run([*cmd, "--resume"], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "resumed from step-000002" in done.stderr
    assert_same_run(uninterrupted, run)
