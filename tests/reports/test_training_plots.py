"""The training report's plots stay readable: a series identical to another is one line naming both,
and panels with nothing recorded are left out (named in the figure's title) instead of drawn empty."""

import struct
from pathlib import Path

from envhub.reports.training import TrainingData
from envhub.reports.training_plots import (
    HEALTH,
    health_over_steps,
    health_panels,
    lag_over_steps,
    merged_series,
)


def _data(steps: list[dict]) -> TrainingData:
    return TrainingData(kind="training", run_dir=Path("run"), run={}, summary={}, records=[], tasks={}, steps=steps)


def _png_size(png: bytes) -> tuple[int, int]:
    return struct.unpack(">II", png[16:24])


def test_identical_series_are_one_line_that_names_both() -> None:
    data = _data([{"step": 1, "reward_mean": 0.5, "strict_success": 0.5, "success_excluding_infra": 0.75},
                  {"step": 2, "reward_mean": 1.0, "strict_success": 1.0, "success_excluding_infra": 1.0}])
    lines = merged_series(data, {"reward mean": "reward_mean", "strict success": "strict_success",
                                 "success excl. infra": "success_excluding_infra", "kl": "kl"})
    assert lines == [("reward mean = strict success", [1, 2], [0.5, 1.0]),
                     ("success excl. infra", [1, 2], [0.75, 1.0])]


def test_health_draws_only_the_recorded_panels_and_names_the_rest() -> None:
    data = _data([{"step": s, "entropy": 0.3 / s, "grad_norm": 1.0 + s} for s in (1, 2, 3)])
    shown, missing = health_panels(data)
    assert list(shown) == ["entropy", "grad norm"]
    assert missing == [t for t in HEALTH if t not in ("entropy", "grad norm")]
    width, height = _png_size(health_over_steps(data))
    assert (width, height) == (700, 270)  # two panels in one row, not a 2 x 3 wall


def test_a_run_that_recorded_nothing_gets_no_health_or_lag_plot() -> None:
    data = _data([{"step": 1, "reward_mean": 0.0}])
    assert health_panels(data) == ({}, list(HEALTH))
    assert health_over_steps(data) is None and lag_over_steps(data) is None
    assert lag_over_steps(_data([{"step": 1, "weight_version_lag": 0}])).startswith(b"\x89PNG")
