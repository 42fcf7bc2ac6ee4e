import json

import pytest

from envhub.types import (
    EpisodeMetrics,
    LayerResult,
    Message,
    Outcome,
    OutcomeClass,
    ToolCall,
    TrajectoryRecord,
    Turn,
    Verdict,
    Versions,
)


def test_outcome_values_and_classes_are_exactly_the_design_taxonomy():
    expected = {
        "success": "success",
        "wrong_answer": "policy_failure",
        "format_error": "policy_failure",
        "budget_exhausted": "truncation",
        "context_overflow": "truncation",
        "env_error": "infra_failure",
        "verifier_error": "infra_failure",
        "engine_error": "infra_failure",
    }
    assert {o.value: o.outcome_class.value for o in Outcome} == expected
    assert {c.value for c in OutcomeClass} == {"success", "policy_failure", "truncation", "infra_failure"}
    assert Outcome.ENV_ERROR.is_infra and not Outcome.WRONG_ANSWER.is_infra
    assert Outcome.BUDGET_EXHAUSTED.is_truncation


def _record() -> TrajectoryRecord:
    return TrajectoryRecord(
        episode_id="g-0", task_id="t", env_id="envhub/X-v0", group_id="g", sample_index=0,
        versions=Versions(envhub="0.1.0", env="x@1", weight_versions=["w1", None]),
        sampling_params={"temperature": 0.7},
        messages=[Message(role="user", content="héllo \n\t ✓"),
                  Message(role="assistant", content="x", tool_calls=[ToolCall(name="a", arguments={"k": [1]})])],
        turns=[Turn(index=0, action_text="x", token_ids=[1, 2], logprobs=[-0.5, -0.25])],
        prompt_ids=[5, 6], response_ids=[1, 2, 9], response_mask=[1, 1, 0],
        response_logprobs=[-0.5, -0.25, 0.0], num_turns=1, reward=1.0,
        verdict=Verdict(reward=1.0, outcome=Outcome.SUCCESS,
                        layers=[LayerResult(layer="gate", name="g", score=1.0, passed=True)]),
        outcome=Outcome.SUCCESS, metrics=EpisodeMetrics(tool_calls=2),
    )


def test_trajectory_record_json_round_trip_is_stable():
    rec = _record()
    text = rec.model_dump_json()
    back = TrajectoryRecord.model_validate_json(text)
    assert back == rec
    assert back.model_dump_json() == text
    data = json.loads(text)
    assert data["schema_version"] == 1
    assert data["outcome_class"] == "success"
    for key in ("prompt_ids", "response_ids", "response_mask", "response_logprobs", "num_turns", "verdict",
                "outcome_detail", "metrics", "versions", "sampling_params", "group_id", "sample_index"):
        assert key in data


def test_unknown_fields_are_rejected():
    data = json.loads(_record().model_dump_json())
    data["surprise"] = 1
    with pytest.raises(ValueError, match="surprise"):
        TrajectoryRecord.model_validate(data)
