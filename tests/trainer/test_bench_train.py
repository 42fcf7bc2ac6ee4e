"""``envhub bench train``: our trainer and TRL's GRPOTrainer measured in one run, each in its own
subprocess. The figures are never asserted (they depend on the machine); what is asserted is that
both sides ran on the same prompts and lengths and that the ratios come from the measured figures."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from envhub.trainer.bench import BenchSettings, ChildError, failed, main, ratios, run_child, table
from envhub.trainer.checkpoint import latest_checkpoint

pytest.importorskip("trl")


@pytest.mark.slow
def test_bench_runs_both_sides_and_computes_the_ratios(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    proc = subprocess.run(
        [sys.executable, "-m", "envhub.trainer.bench", "--mode", "single", "--warmup", "1", "--steps", "1", "--rounds", "2",
         "--max-new-tokens", "4", "--micro-batch-size", "4", "--memory-steps", "2", "--memory-from", "1", "--out", str(out),
         "--work-dir", str(tmp_path / "work")],
        capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = json.loads(out.read_text())
    assert "memory: RSS" in proc.stdout
    assert "multi" not in result

    single = result["single"]
    rounds = single["rounds"]
    assert [r["order"] for r in rounds] == [["ours", "trl"], ["trl", "ours"]]  # the order alternates
    for side in ("ours", "trl"):
        for r in rounds:
            figures = r[side]
            assert len(figures["step_seconds"]) == 2  # 1 warmup + 1 measured
            assert figures["seconds_per_step"] == statistics.median(figures["step_seconds"][1:]) > 0
            assert figures["peak_rss_mb"] > 0 and all(m > 0 for m in figures["rss_mb_after_step"])
            assert 0 < figures["completion_tokens_mean"] <= 4
            assert figures["does"]
        pooled = single[side]
        assert pooled["measured_steps"] == 2
        assert pooled["seconds_per_step"] == statistics.median(r[side]["step_seconds"][1] for r in rounds)
        assert pooled["peak_rss_mb"] == statistics.median(r[side]["peak_rss_mb"] for r in rounds)
    # the same prompts, token for token in length: TRL's string prompts are rendered as our policy renders them
    assert single["ours"]["prompt_tokens_mean"] == single["trl"]["prompt_tokens_mean"] > 0
    assert single["completions_per_step"] == result["settings"]["completions_per_step"] == 8
    for r in rounds:
        assert r["ratio"] == ratios(r["ours"], r["trl"])
    per_round = [r["ratio"]["time"] for r in rounds]
    assert single["ratio"]["time"] == statistics.median(per_round)
    assert single["ratio_spread"]["time"] == {"median": statistics.median(per_round), "min": min(per_round),
                                              "max": max(per_round), "values": per_round}
    assert "median of 2 round(s)" in proc.stdout and "ours/trl" in proc.stdout and "trl/ours" in proc.stdout

    memory = result["memory"]
    assert memory["steps"] == 2 and len(memory["rss_mb_by_step"]) == 2
    assert memory["rss_from_mb"] == memory["rss_mb_by_step"][0] > 0
    assert memory["growth_pct"] == pytest.approx(
        100 * (memory["rss_to_mb"] - memory["rss_from_mb"]) / memory["rss_from_mb"])
    first, last = memory["rss_mb_by_step"][0], statistics.median(memory["rss_mb_by_step"])  # windows of 1 and 2 steps
    assert memory["window_growth_pct"] == pytest.approx(100 * (last - first) / first)
    for number in (1, 2):  # measured steps never save
        assert latest_checkpoint(tmp_path / "work" / "single" / f"ours-run-{number}") is None


@pytest.mark.slow
def test_bench_lora_times_the_adapter_run_against_full_fine_tuning(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    proc = subprocess.run(
        [sys.executable, "-m", "envhub.trainer.bench", "--lora", "--lora-r", "4", "--mode", "single", "--warmup", "0",
         "--steps", "1", "--rounds", "2", "--max-new-tokens", "4", "--memory-steps", "0", "--out", str(out),
         "--work-dir", str(tmp_path / "work")],
        capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    single = json.loads(out.read_text())["single"]
    assert single["sides"] == ["lora", "full"] and "trl" not in single
    assert [r["order"] for r in single["rounds"]] == [["lora", "full"], ["full", "lora"]]
    for r in single["rounds"]:
        assert r["ratio"] == ratios(r["lora"], r["full"])
        assert "LoRA adapter (r=4)" in r["lora"]["does"] and "LoRA" not in r["full"]["does"]
    assert "lora/full, median of 2 round(s)" in proc.stdout and "target" not in proc.stdout.split("lora/full")[1]
    config = json.loads((tmp_path / "work" / "single" / "spec-1.json").read_text())
    assert config["lora_config"]["lora"] == {"r": 4, "alpha": 8.0} and "lora" not in config["ours_config"]


@pytest.mark.parametrize("argv, message", [
    (["--steps", "0"], "steps must be >= 1"),
    (["--group-size", "1"], "group_size must be >= 2"),
    (["--rounds", "0"], "rounds must be >= 1"),
    (["--memory-steps", "5", "--memory-from", "10"], "memory_steps (5) must be above memory_from (10)"),
    (["--temperature", "0"], "temperature must be > 0"),
    (["--lora", "--lora-r", "0"], "lora_r must be >= 1"),
])
def test_bad_options_are_refused_before_anything_runs(argv: list[str], message: str,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    assert message in capsys.readouterr().err


def test_ratios_are_ours_over_trl() -> None:
    ours, trl = {"seconds_per_step": 1.0, "peak_rss_mb": 300.0}, {"seconds_per_step": 4.0, "peak_rss_mb": 1200.0}
    assert ratios(ours, trl) == {"time": 0.25, "memory": 0.25}
    assert BenchSettings(prompts=3, group_size=4).completions == 12


def test_a_failed_child_is_reported_with_its_output(tmp_path: Path) -> None:
    argv = [sys.executable, "-c", "print('boom from the child'); raise SystemExit(3)"]
    with pytest.raises(ChildError, match=r"exited 3; its output .* ends:\n(.|\n)*boom from the child"):
        run_child(argv, {}, tmp_path / "child.log")
    assert run_child([sys.executable, "-c", "x = bytearray(64 << 20)"], {}, tmp_path / "ok.log") > 64


def test_a_failed_mode_keeps_the_other_figures_and_says_why() -> None:
    settings = {**BenchSettings().__dict__, "completions_per_step": 8, "model_dir": "m"}
    result = {"settings": settings, "single": {"error": "ours exited -9 (SIGKILL: out of memory?)"}}
    assert failed(result) == ["single"]
    assert any("single-turn: FAILED: ours exited -9" in line for line in table(result))
