"""`envhub rollout --remote URL` drives an env served by `envhub serve`, with resumable output."""

import json
import subprocess
import sys

import pytest

from envhub.server.testing import serve_in_subprocess


@pytest.mark.slow
def test_remote_gold_rollout_through_the_cli(tmp_path):
    with serve_in_subprocess(["envhub/Computation-v0"]) as (url, _proc):
        cmd = [sys.executable, "-m", "envhub.cli", "rollout", "envhub/Computation-v0", "--remote", url,
               "--policy", "gold", "--episodes", "6", "--concurrency", "3", "--out", str(tmp_path), "--no-progress"]
        subprocess.run(cmd, check=True, capture_output=True, timeout=300)
        again = subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=300)
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["attempted"] == 6 and report["strict_success_rate"] == 1.0
    assert "resumed: 6 episodes" in again.stdout
    records = [json.loads(line) for line in (tmp_path / "trajectories.jsonl").read_text().splitlines()]
    assert len(records) == 6
    assert all(r["turns"][0]["tool_calls"][0]["name"] == "python" for r in records)
