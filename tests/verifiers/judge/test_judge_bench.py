"""``envhub bench judge`` at its smallest: both sides judge the same real cases with a real tiny
model, and the figures and the printed table say what was measured (not how fast it was)."""

from __future__ import annotations

from typer.testing import CliRunner

from envhub.adapters.engines.tiny import build_tiny_model
from envhub.cli import app
from envhub.judges import close_shared_judge_engines
from envhub.verifiers.judge.bench import JudgeBenchSettings, run_bench


def test_the_judge_bench_measures_both_sides_on_the_same_cases(one_torch_thread):
    lines: list[str] = []
    try:
        result = run_bench(JudgeBenchSettings(judge=f"hf:{build_tiny_model()}", tasks=1, rounds=2, concurrency=2),
                           out=lines.append)
    finally:
        close_shared_judge_engines()
    assert result["cases"] == 2  # the gold and the suite's wrong answer of one task
    assert [r["order"] for r in result["rounds"]] == [["one", "concurrent"], ["concurrent", "one"]]
    for r in result["rounds"]:
        assert r["one"] > 0 and r["concurrent"] > 0 and r["ratio"] == r["concurrent"] / r["one"]
    assert result["ratio"]["values"] == [r["ratio"] for r in result["rounds"]]
    assert result["judge"]["model"].startswith("hf:") and any("concurrent / one at a time" in line for line in lines)
    said = any("Batching did NOT help" in line for line in lines)
    assert said == (result["ratio"]["median"] < 1.2)  # said exactly when it did not help


def test_the_command_refuses_bad_settings_in_one_line():
    ran = CliRunner().invoke(app, ["bench", "judge", "--rounds", "0"])
    assert ran.exit_code == 2 and "must be at least 1" in ran.output
