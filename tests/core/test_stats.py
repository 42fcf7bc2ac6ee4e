"""The interval arithmetic of learning claims: Wilson intervals, paired comparisons, per-kind groups."""

import math

import pytest

from envhub.rollout.stats import by_group, paired, task_group, wilson
from envhub.types import Outcome, TrajectoryRecord, Versions


def _record(task_id: str, outcome: str) -> TrajectoryRecord:
    return TrajectoryRecord(episode_id=task_id, task_id=task_id, env_id="e", group_id=task_id, sample_index=0,
                            versions=Versions(envhub="0", env="e@0"), outcome=Outcome(outcome))


def test_wilson_matches_the_published_formula_and_stays_in_0_1():
    low, high = wilson(64, 128)
    assert (round(low, 4), round(high, 4)) == (0.4147, 0.5853)
    assert wilson(0, 128)[0] == 0.0 and 0.02 < wilson(0, 128)[1] < 0.03  # not degenerate at 0
    assert wilson(128, 128)[1] == 1.0 and wilson(128, 128)[0] > 0.97
    assert wilson(0, 0) == (0.0, 1.0)
    with pytest.raises(ValueError):
        wilson(5, 4)


def test_paired_counts_wins_and_losses_on_shared_episodes_only():
    first = {f"e{i}": i < 40 for i in range(100)}            # 40 of 100
    second = {f"e{i}": 10 <= i < 70 for i in range(100)}     # 60 of 100: 30 wins, 10 losses
    second["extra"] = True
    result = paired(first, second)
    assert (result["n"], result["wins"], result["losses"], result["ties"], result["unpaired"]) == (100, 30, 10, 60, 1)
    assert math.isclose(result["difference"], 0.2)
    half = 1.959963984540054 * math.sqrt(30 + 10 - 20 ** 2 / 100) / 100
    assert result["interval"] == pytest.approx([0.2 - half, 0.2 + half])
    assert result["interval"][0] > 0  # 30 wins against 10 losses: the gain is not noise
    same = paired(first, dict(first))
    assert same["difference"] == 0 and same["interval"] == [0.0, 0.0]


def test_groups_are_task_ids_without_their_index():
    assert task_group("comp-fraction-L1-343") == "comp-fraction-L1" and task_group("plain") == "plain"
    groups = by_group([_record("comp-date-L1-1", "success"), _record("comp-date-L1-2", "wrong_answer"),
                       _record("comp-bigint-L2-9", "success")])
    assert groups["comp-date-L1"]["n"] == 2 and groups["comp-date-L1"]["rate"] == 0.5
    assert groups["comp-bigint-L2"]["successes"] == 1 and list(groups) == ["comp-bigint-L2", "comp-date-L1"]
