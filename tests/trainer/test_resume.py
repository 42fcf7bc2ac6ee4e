"""Resume equals the uninterrupted run: 4 steps == 2 steps + resume + 2 steps, also after ``kill -9``
in the middle of a step. Same sampled tokens, same losses, same weights; every sample trained once."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch
import yaml
from safetensors.torch import load_file
from trainer_fixtures import TRAIN_SCRIPT, letter_config

from envhub.trainer.config import parse_config
from envhub.trainer.loop import train


def _steps(run):
    return [json.loads(line) for line in (run / "steps.jsonl").read_text().splitlines()]


def _tokens(run, step):
    path = run / "rollouts" / f"step-{step:06d}" / "trajectories.jsonl"
    records = [json.loads(line) for line in path.read_text().splitlines()]
    return {r["episode_id"]: (r["response_ids"], r["response_logprobs"]) for r in records}


def _weights(run):
    return load_file(str(run / "final" / "model.safetensors"))


def _assert_same_run(a, b):
    for step in (1, 2, 3, 4):
        assert _tokens(a, step) == _tokens(b, step), f"step {step} sampled other tokens"
    sa, sb = _steps(a), _steps(b)
    assert [s["step"] for s in sb] == [1, 2, 3, 4]
    for x, y in zip(sa, sb, strict=True):
        assert x["trained_episodes"] == y["trained_episodes"]
        assert abs(x["loss"] - y["loss"]) <= 1e-6, (x["step"], x["loss"], y["loss"])
    wa, wb = _weights(a), _weights(b)
    assert wa.keys() == wb.keys()
    for key in wa:
        torch.testing.assert_close(wa[key], wb[key], rtol=0, atol=1e-6)
    trained = [e for s in sb for e in s["trained_episodes"]]
    assert len(trained) == len(set(trained)), "a sample was trained twice"


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
    _assert_same_run(uninterrupted, run)
    every_planned = {e for s in (1, 2, 3, 4) for e in _tokens(run, s)}
    trained = {e for s in _steps(run) for e in s["trained_episodes"]}
    skipped = {e for s in _steps(run) for e in s["untrained_episodes"]}
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
    assert [s["step"] for s in _steps(run)] == [1, 2]
    done = subprocess.run([*cmd, "--resume"], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "resumed from step-000002" in done.stderr
    _assert_same_run(uninterrupted, run)
