"""``torchrun --nproc_per_node 2 -m envhub.trainer``: two gloo processes train what one process trains.

Each rank rolls out its share of the step's groups from its own unsharded engine copy, the loss is
normalized over both ranks' tokens and FSDP2 sums the gradients, so the weights after two steps
equal the single-process run's (up to the order of float additions); with LoRA too (the frozen base
sharded beside the adapter)."""

import json
import os
import subprocess
import sys

import pytest
import torch
import yaml
from safetensors.torch import load_file
from trainer_fixtures import TRAIN_SCRIPT, letter_config


def _train(cmd, config_path, tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run([*cmd, str(TRAIN_SCRIPT), str(config_path)], env=env, capture_output=True, text=True,
                          timeout=420, cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done


def _episodes(run):
    records = {}
    for path in sorted((run / "rollouts").glob("step-*/trajectories*.jsonl")):
        for line in path.read_text().splitlines():
            r = json.loads(line)
            records[r["episode_id"]] = (r["response_ids"], r["reward"])
    return records


@pytest.mark.slow
@pytest.mark.parametrize("lora", [None, {"r": 4, "alpha": 8.0}], ids=["full", "lora"])
def test_two_gloo_processes_train_like_one(tmp_path, scratch_model, lora):
    runs = {}
    for name, cmd in (("single", [sys.executable]),
                      ("fsdp", [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"])):
        run = tmp_path / name
        config = tmp_path / f"{name}.yaml"
        optim = {"lr": 1e-2} if lora else {}  # an adapter starts at B = 0: a larger step moves it measurably
        config.write_text(yaml.safe_dump(letter_config(run, scratch_model, steps=2, checkpoint_every=2, lora=lora,
                                                       optim=optim)))
        _train(cmd, config, tmp_path)
        runs[name] = run
    single, fsdp = runs["single"], runs["fsdp"]
    assert sorted(p.name for p in (fsdp / "rollouts" / "step-000001").iterdir()) == [
        "trajectories.rank0.jsonl", "trajectories.rank1.jsonl"]
    assert _episodes(single) == _episodes(fsdp)
    steps = {n: [json.loads(x) for x in (r / "steps.jsonl").read_text().splitlines()] for n, r in runs.items()}
    for a, b in zip(steps["single"], steps["fsdp"], strict=True):
        assert a["trained_episodes"] == b["trained_episodes"]
        assert abs(a["loss"] - b["loss"]) < 1e-5
    wa, wb = load_file(str(single / "final" / "model.safetensors")), load_file(str(fsdp / "final" / "model.safetensors"))
    moved = max(float((wa[k] - load_file(str(scratch_model / "model.safetensors"))[k]).abs().max()) for k in wa)
    assert moved > 1e-4, "training did not change the weights: the comparison would prove nothing"
    for key in wa:
        torch.testing.assert_close(wb[key], wa[key], rtol=1e-4, atol=1e-5)
