"""`envhub report`: what the HTML and the PNGs beside it hold for a real rollout, and bad input."""

import html
import re
import subprocess
import sys

import pytest
from report_runs import HOSTILE, mixed_rollout
from sandbox_fixtures import require_backend

from envhub.reports.html import load_run, write_report
from envhub.run_dir import RunFileError as RunDirError


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    require_backend("bwrap")
    out = tmp_path_factory.mktemp("report") / "run"
    return out, mixed_rollout(out).report


def test_html_is_self_contained_and_escapes_model_text(run):
    out, _ = run
    files = write_report(out, out / "site" / "r.html")
    text = files.html.read_text(encoding="utf-8")
    assert set(files.plots) >= {"outcome_mix", "reward_distribution", "success_by_difficulty", "success_by_family",
                                "time_split"}
    for name, path in files.plots.items():  # the same bytes inline and beside it
        assert path.parent == files.html.parent and path.name == f"r.{name}.png"
        assert path.read_bytes().startswith(b"\x89PNG")
    refs = re.findall(r'(?:src|href)="([^"]*)"', text)
    assert refs and all(r.startswith(("#", "data:image/png;base64,")) for r in refs)
    assert "<script" not in text.lower() and "<iframe" not in text.lower()
    assert html.escape(HOSTILE, quote=True)[:60] in text
    assert "default-src 'none'" in text
    assert not list(files.html.parent.glob(".*"))  # no temp file left from the atomic writes


def test_headline_and_sections_hold_the_required_numbers(run):
    out, report = run
    data = load_run(out)
    h = data.headline()
    assert h["attempted"] == report["attempted"] == 16
    assert h["infra_failures"] == report["by_class"]["infra_failure"] > 0
    assert h["policy_failures"] == report["by_class"]["policy_failure"] > 0
    assert h["strict_success_rate"] == report["strict_success_rate"]
    assert h["tool_calls_per_success"] == report["tool_calls"] / report["by_outcome"]["success"]
    assert h["seconds_per_success"] > 0
    assert set(data.by_difficulty()) <= {1, 2, 3, 4, 5} and all("computation" in f for f in data.by_family())
    split = data.time_split()
    assert split["sandbox"] > 0 and split["verifier"] > 0
    text = write_report(out).html.read_text(encoding="utf-8")
    for anchor in ("headline", "outcomes", "rewards", "difficulty", "family", "cost", "slowest", "failing",
                   "examples", "engine_error", "inference server unreachable (test)"):
        assert anchor in text


def test_bad_run_dirs_are_clear_errors(tmp_path):
    with pytest.raises(RunDirError, match="holds no run"):
        load_run(tmp_path)
    (tmp_path / "trajectories.jsonl").write_text('{"episode_id": "a"}\n')
    with pytest.raises(RunDirError, match="not a trajectory record"):
        load_run(tmp_path)
    (tmp_path / "trajectories.jsonl").write_text("not json\n")
    with pytest.raises(RunDirError, match=r"trajectories.jsonl:1: not JSON"):
        load_run(tmp_path)
    cli = subprocess.run([sys.executable, "-m", "envhub.cli", "report", str(tmp_path / "missing")],
                         capture_output=True, text=True)
    assert cli.returncode == 2 and "is not a directory" in cli.stderr
