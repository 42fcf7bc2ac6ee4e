"""``envhub bench async`` at its smallest (1 round, 2 steps, tool latency 0 and 0.2 s) on the real CLI: the
table and the JSON have every figure of both modes, both modes trained the same number of samples, and
each latency gets its verdict line. The speed is not asserted (the figures are the bench's, not a test's).

Also the bench's env on its own: ``bench/SlowLetter-v0``'s ``look`` tool takes ``latency_s`` before it answers, then the answer is graded.
"""

import json
import os
import subprocess
import sys
import time

import pytest

from envhub.registry import make
from envhub.trainer.bench_async import AsyncBenchSettings
from envhub.trainer.bench_async_env import ENV_ID, register_bench_env
from envhub.types import Action


def test_the_bench_env_tool_takes_its_latency_then_answers():
    register_bench_env()
    env = make(ENV_ID, split="train", latency_s=0.2)
    try:
        env.reset(task_id="train-0")
        t0 = time.monotonic()
        step = env.step(Action(text="cat"))
        took = time.monotonic() - t0
    finally:
        env.close()
    assert step.done and step.reward == 1.0
    assert took >= 0.2
    assert [m.content for m in step.messages if m.role == "tool"] == ["'c'"]  # look's answer, after its wait
    with pytest.raises(ValueError, match="latency_s must be >= 0"):
        make(ENV_ID, split="train", latency_s=-1)


def test_bad_options_are_one_line():
    with pytest.raises(ValueError, match="steps must be >= 1, got 0"):
        AsyncBenchSettings(steps=0)
    with pytest.raises(ValueError, match="latencies must be one or more seconds >= 0"):
        AsyncBenchSettings(latencies=(-0.5,))


@pytest.mark.slow
def test_the_smallest_bench_trains_the_same_samples_in_both_modes(tmp_path):
    out = tmp_path / "bench.json"
    done = subprocess.run(
        [sys.executable, "-m", "envhub.cli", "bench", "async", "--rounds", "2", "--steps", "2", "--latency", "0",
         "--latency", "0.2", "--groups-per-step", "2", "--group-size", "4", "--eval-episodes", "4", "--normalize", "group",
         "--out", str(out),
         "--work-dir", str(tmp_path / "work")],
        capture_output=True, text=True, timeout=600, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(out.read_text())
    assert result["samples_per_run"] == 2 * 2 * 4
    assert [row["latency_s"] for row in result["latencies"]] == [0.0, 0.2]
    for row in result["latencies"]:
        assert [r["order"] for r in row["rounds"]] == [["sync", "async"], ["async", "sync"]]
        assert [r["seed"] for r in row["rounds"]] == [0, 1]  # each round its seed, both modes the same
        for number, seed in ((1, 0), (2, 1)):
            for mode in ("sync", "async"):
                config = json.loads((tmp_path / "work" / f"latency-{row['latency_s']:g}" / f"{mode}-{number}.json")
                                    .read_text())
                assert config["seed"] == seed
        for mode in ("sync", "async"):
            figures = row[mode]
            assert figures["trained_samples"] == [result["samples_per_run"]] * 2, (mode, figures)
            assert figures["updates"] == [2, 2]
            for key in ("samples_per_hour", "trainer_idle_ratio", "version_lag_mean"):
                assert set(figures[key]) == {"median", "min", "max", "values"} and len(figures[key]["values"]) == 2
                assert figures[key]["median"] >= 0
            assert 0 <= figures["trainer_idle_ratio"]["median"] <= 1
            assert figures["validation"]["episodes"] == 8 and 0 <= figures["validation"]["strict_success"] <= 1
        assert row["sync"]["version_lag_mean"]["median"] == 0
        assert row["async"]["version_lag_mean"]["max"] <= 1  # max_staleness 1, nothing dropped
        assert row["sync"]["stale_dropped"] == row["async"]["stale_dropped"] == 0
        assert row["speedup"]["median"] > 0 and isinstance(row["helped"], bool)
        assert "target" not in row  # the target is for a latency of 1 s or more
    lines = done.stdout.splitlines()
    assert lines[0].startswith("envhub bench async: model tiny, 2 steps x 2 groups x 4 samples")
    assert "importance weights normalized: group" in lines[0] and result["settings"]["normalize"] == "group"
    for mode in ("sync", "async"):  # both modes trained with the group-normalized weights (--normalize group)
        child = json.loads((tmp_path / "work" / "latency-0.2" / f"{mode}-2.out.json").read_text())
        assert all(step["is_group_tilt"] is not None for step in child["steps"]), mode
    table = [line.split() for line in lines if line.strip().split()[:1] in (["0s"], ["0.2s"])]
    assert [(row[0], row[1]) for row in table] == [("0s", "sync"), ("0s", "async"), ("0.2s", "sync"),
                                                    ("0.2s", "async")]
    assert all(row[-1] == "32" for row in table)  # trained samples, both modes, two rounds
    verdicts = [line for line in lines if line.startswith("latency ")]
    assert [v.split(":")[0] for v in verdicts] == ["latency 0 s", "latency 0.2 s"]
    for row, line in zip(result["latencies"], verdicts, strict=True):
        assert ("Async did NOT help here" in line) == (not row["helped"])


def test_the_verdict_names_why_async_did_not_help():
    from envhub.trainer.bench_async import verdict

    row = {"latency_s": 1.0, "speedup": {"median": 0.99, "min": 0.99, "max": 0.99},
           "async": {"version_lag_mean": {"median": 0.0}}, "validation_within_noise": True, "helped": False}
    assert "max_staleness 0: no sample may be trained a version late" in verdict(row, max_staleness=0)
    assert "the model's compute dominates the step" in verdict(row, max_staleness=1)
    assert "no tool latency" in verdict({**row, "latency_s": 0.0}, max_staleness=1)
