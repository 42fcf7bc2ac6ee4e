"""The one rule that sorts a finished Verifiers episode into envhub's taxonomy: before the agent's
first turn nothing is its fault; after it, only the framework's own plumbing may be infra."""

from __future__ import annotations

import pytest

from envhub.tasks.verifiers_v1.outcomes import verdict_of
from envhub.types import Outcome


def _failed(kind: str) -> dict:
    return {"ok": False, "errors": [{"type": kind, "message": "it broke"}], "reward": None, "rewards": {}}


@pytest.mark.parametrize(("kind", "before", "after"), [
    ("ProviderError", Outcome.ENGINE_ERROR, Outcome.ENGINE_ERROR),
    ("ToolsetError", Outcome.ENV_ERROR, Outcome.ENV_ERROR),
    ("InterceptionError", Outcome.ENV_ERROR, Outcome.ENV_ERROR),
    ("TaskError", Outcome.ENV_ERROR, Outcome.WRONG_ANSWER),
    ("HarnessError", Outcome.ENV_ERROR, Outcome.WRONG_ANSWER),
    ("SandboxError", Outcome.ENV_ERROR, Outcome.WRONG_ANSWER),
    ("SomethingNew", Outcome.ENV_ERROR, Outcome.WRONG_ANSWER),
    ("TimeoutError", Outcome.BUDGET_EXHAUSTED, Outcome.BUDGET_EXHAUSTED),
])
def test_failures_before_and_after_the_agents_first_turn(kind: str, before: Outcome, after: Outcome):
    assert verdict_of(_failed(kind), acted=False, success_reward=1.0).outcome is before
    late = verdict_of(_failed(kind), acted=True, success_reward=1.0)
    assert late.outcome is after and late.reward == 0.0 and kind in late.detail


@pytest.mark.parametrize(("reward", "outcome", "kept"), [
    (1.0, Outcome.SUCCESS, 1.0), (2.5, Outcome.SUCCESS, 2.5), (0.4, Outcome.WRONG_ANSWER, 0.4),
    ("nan", Outcome.WRONG_ANSWER, 0.0), (None, Outcome.WRONG_ANSWER, 0.0),
])
def test_the_weighted_reward_decides_a_scored_episode(reward, outcome: Outcome, kept: float):
    trace = {"ok": True, "errors": [], "reward": reward, "rewards": {"correct": reward}}
    verdict = verdict_of(trace, acted=True, success_reward=1.0)
    assert verdict.outcome is outcome and verdict.reward == kept


def test_a_cap_or_deadline_is_a_truncation():
    capped = {"ok": True, "errors": [], "reward": 1.0, "stop_condition": "max_turns", "is_truncated": True}
    assert verdict_of(capped, acted=True, success_reward=1.0).outcome is Outcome.BUDGET_EXHAUSTED
    late = {"ok": False, "errors": [], "is_timeout": True}
    assert verdict_of(late, acted=True, success_reward=1.0).outcome is Outcome.BUDGET_EXHAUSTED


def test_an_unscored_policy_outcome_earns_the_declared_floor_and_infra_earns_0():
    """A taskset whose rewards go below 0: a reward function that crashed on the agent's answer must
    not pay more than the taskset's own worst score."""
    late = verdict_of(_failed("TaskError"), acted=True, success_reward=1.0, floor=-5.0)
    assert late.outcome is Outcome.WRONG_ANSWER and late.reward == -5.0
    capped = {"ok": True, "errors": [], "reward": None, "stop_condition": "max_turns"}
    assert verdict_of(capped, acted=True, success_reward=1.0, floor=-5.0).reward == -5.0
    infra = verdict_of(_failed("ToolsetError"), acted=True, success_reward=1.0, floor=-5.0)
    assert infra.outcome is Outcome.ENV_ERROR and infra.reward == 0.0
    scored = {"ok": True, "errors": [], "reward": -2.0, "rewards": {"r": -2.0}}
    assert verdict_of(scored, acted=True, success_reward=1.0, floor=-5.0).reward == -2.0
