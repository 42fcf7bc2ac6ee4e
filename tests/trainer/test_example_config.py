"""The documented example config runs end to end through the real command line with the real
SmolLM2-135M-Instruct (shrunk with ``--set`` to minutes), and its exported weights evaluate as
``--policy hf:RUN/final``."""

import json
import subprocess
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "train" / "computation-smollm2.yaml"
ENV_ARGS = ["--env-arg", 'kinds=["bigint"]', "--env-arg", "levels=[1]"]


def _envhub(*args, timeout=900):
    done = subprocess.run(["envhub", *args], capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done


@pytest.mark.slow
def test_example_config_trains_end_to_end(tmp_path):
    gold, run = tmp_path / "gold", tmp_path / "run"
    _envhub("rollout", "envhub/Computation-v0", "--policy", "gold", "--episodes", "8", "--split", "train",
            *ENV_ARGS, "--out", str(gold))
    done = _envhub("train", str(EXAMPLE), "--set", f"run_dir={run}", "--set", f"sft.runs=[{gold}]",
                   "--set", "sft.epochs=1", "--set", "sft.batch_size=4", "--set", "steps=1",
                   "--set", "rollout.groups_per_step=1", "--set", "rollout.group_size=2",
                   "--set", "sampling.max_new_tokens=96", "--set", "eval.episodes=2",
                   "--set", "env.budget={max_turns: 2, max_tool_calls: 2, max_format_errors: 0}")
    assert "sft: 8 examples (8 re-encoded from scripted runs)" in done.stderr
    assert "step 1/1" in done.stderr
    summary = json.loads((run / "summary.json").read_text())
    assert [e["tag"] for e in summary["evals"]] == ["before", "after-sft", "final"]
    assert all(e["split"] == "validation" and e["episodes"] == 2 for e in summary["evals"])
    step = json.loads((run / "steps.jsonl").read_text().splitlines()[0])
    assert step["attempted"] == 2 and step["outcomes"]["env_error"] == 0
    evaluated = tmp_path / "evaluated"
    _envhub("rollout", "envhub/Computation-v0", "--policy", f"hf:{run / 'final'}?max_new_tokens=8",
            "--episodes", "1", "--split", "validation", *ENV_ARGS, "--out", str(evaluated))
    record = json.loads((evaluated / "trajectories.jsonl").read_text().splitlines()[0])
    assert record["versions"]["model"] == str(run / "final") and record["response_ids"]
