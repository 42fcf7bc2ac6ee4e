"""`envhub profile`: pass@k per task with the unbiased estimator, the curriculum list, the report's histogram."""

import itertools
import json
import subprocess
import sys

import pytest
from report_runs import ENV, MixedPolicy
from sandbox_fixtures import require_backend

from envhub.reports.html import write_report
from envhub.rollout.profile import pass_at_k, run_profile
from envhub.store import read_jsonl
from envhub.types import Outcome


@pytest.mark.parametrize(("n", "c", "k"), [(8, 0, 8), (8, 8, 8), (8, 1, 8), (10, 3, 2), (6, 2, 3), (5, 4, 1)])
def test_pass_at_k_is_the_fraction_of_k_subsets_with_a_success(n, c, k):
    samples = [True] * c + [False] * (n - c)
    subsets = list(itertools.combinations(range(n), k))
    exact = sum(any(samples[i] for i in s) for s in subsets) / len(subsets)
    assert pass_at_k(n, c, k) == pytest.approx(exact)


def test_pass_at_k_refuses_impossible_counts():
    for n, c, k in ((3, 4, 1), (3, 1, 4), (3, 1, 0)):
        with pytest.raises(ValueError):
            pass_at_k(n, c, k)


def test_profile_of_a_real_rollout(tmp_path):
    require_backend("bwrap")
    out = tmp_path / "profile"
    profile = run_profile(ENV, MixedPolicy(), out_dir=out, k=4, limit=6, concurrency=2,
                          env_kwargs={"sandbox": "bwrap"})
    records = list(read_jsonl(out / "trajectories.jsonl"))
    assert len(records) == 24 and profile["tasks_profiled"] == 6
    saved = json.loads((out / "profile.json").read_text())
    assert saved == json.loads(json.dumps(profile))
    for row in saved["tasks"]:
        mine = [r for r in records if r["task_id"] == row["task_id"]]
        scored = [r for r in mine if not Outcome(r["outcome"]).is_infra]
        wins = sum(r["outcome"] == "success" for r in scored)
        assert (row["samples"], row["n"], row["c"]) == (len(mine), len(scored), wins)
        assert row["pass@4"] == (pass_at_k(len(scored), wins, 4) if len(scored) >= 4 else None)
        assert row["informative"] == (0 < wins < len(scored))
    curriculum = json.loads((out / "curriculum.json").read_text())
    assert curriculum["task_ids"] == [t["task_id"] for t in saved["tasks"] if t["informative"]]
    assert profile["informative_tasks"] == len(curriculum["task_ids"]) > 0
    assert profile["undetermined_tasks"] > 0  # engine errors left some tasks with fewer than k scored samples
    files = write_report(out)
    assert "difficulty_histogram" in files.plots
    text = files.html.read_text()
    assert 'id="plot-difficulty_histogram"' in text and "curriculum.json" in text


def test_profile_cli_rejects_bad_input(tmp_path):
    run = subprocess.run([sys.executable, "-m", "envhub.cli", "profile", "envhub/Nope-v0", "--out", str(tmp_path)],
                         capture_output=True, text=True)
    assert run.returncode == 2 and "Nope-v0" in run.stderr
