"""What may enter a batch: the online token audit and the infra exclusion, through the loop's own
selection on real rollouts."""

import copy

import pytest
from trainer_fixtures import letter_config

from envhub.trainer.config import parse_config
from envhub.trainer.loop import Trainer, TrainingError
from envhub.types import Outcome, OutcomeClass, TrajectoryRecord, Versions


@pytest.fixture(scope="module")
def step_records(tmp_path_factory, scratch_model):
    run = tmp_path_factory.mktemp("sel") / "run"
    trainer = Trainer(parse_config(letter_config(run, scratch_model, rollout={"groups_per_step": 4, "group_size": 8,
                                                                             "concurrency": 8})),
                      log=lambda line: None)
    try:
        yield trainer, trainer.rollouts(1)
    finally:
        trainer.close()


def _ids(samples):
    return {s.episode_id for s in samples}


def test_faithful_records_pass_and_informative_groups_are_kept(step_records):
    trainer, records = step_records
    samples, stats = trainer.select(records)
    assert stats["audit_dropped"] == 0 and stats["excluded_infra"] == 0
    assert samples and len(samples) == stats["kept"] == 8 * (stats["groups"] - stats["zero_variance_groups"])
    for group in {s.episode_id.rsplit("-", 1)[0] for s in samples}:
        advantages = [s.advantage for s in samples if s.episode_id.startswith(group)]
        assert abs(sum(advantages)) < 1e-5 and any(a > 0 for a in advantages)


@pytest.mark.parametrize("tamper", [
    lambda r: r.response_logprobs.__setitem__(0, 0.5),           # a "sampled" token with logprob > 0
    lambda r: r.response_mask.__setitem__(-1, 0),                # a sampled token masked out
    lambda r: r.response_ids.__setitem__(0, r.response_ids[0] + 1),  # tokens that are not the turn's
])
def test_a_record_failing_the_audit_is_dropped_or_stops_the_run(step_records, tamper):
    trainer, records = step_records
    samples, _ = trainer.select(records)
    victim = next(r for r in records if r.episode_id in _ids(samples))
    tampered = copy.deepcopy(records)
    tamper(next(r for r in tampered if r.episode_id == victim.episode_id))
    kept, stats = trainer.select(tampered)
    assert stats["audit_dropped"] == 1 and victim.episode_id not in _ids(kept)
    trainer.config = trainer.config.model_copy(update={"audit_failure": "stop"})
    try:
        with pytest.raises(TrainingError, match=victim.episode_id):
            trainer.select(tampered)
    finally:
        trainer.config = trainer.config.model_copy(update={"audit_failure": "drop"})


def test_infra_outcomes_never_reach_a_batch_nor_shift_their_group(step_records):
    trainer, records = step_records
    samples, _ = trainer.select(records)
    group = next(iter({s.episode_id.rsplit("-", 1)[0] for s in samples}))
    members = [r for r in records if r.group_id == group]
    success = next(r for r in members if r.outcome == "success")
    tampered = copy.deepcopy(records)
    for r in tampered:
        if r.episode_id == success.episode_id:
            r.outcome, r.outcome_class, r.reward = Outcome.ENV_ERROR, OutcomeClass.INFRA_FAILURE, 0.0
    kept, stats = trainer.select(tampered)
    assert success.episode_id not in _ids(kept) and stats["excluded_infra"] == 1
    rest = [r for r in members if r.episode_id != success.episode_id]
    rewards = [r.reward for r in rest]
    if max(rewards) == min(rewards):
        assert not any(e.startswith(group) for e in _ids(kept))  # zero variance once the infra one is out
    else:
        mean = sum(rewards) / len(rewards)
        for s in kept:
            if s.episode_id.startswith(group):
                reward = next(r.reward for r in rest if r.episode_id == s.episode_id)
                assert (s.advantage > 0) == (reward > mean)


def test_step_counts_score_the_policy_on_its_own_episodes_only():
    from envhub.trainer.telemetry import rollout_counts

    scored = [("success", 1.0), ("wrong_answer", 0.0), ("env_error", 1.0)]  # an infra record's reward never counts
    records = [TrajectoryRecord(episode_id=f"e-{i}", task_id="t", env_id="e", group_id="g", sample_index=i,
                                versions=Versions(envhub="0", env="0"), outcome=outcome, reward=reward)
               for i, (outcome, reward) in enumerate(scored)]
    counts = rollout_counts(records)
    assert (counts["attempted"], counts["infra"], counts["success"], counts["reward_sum"]) == (3, 1, 1, 1.0)
    assert counts["reward_sum"] / (counts["attempted"] - counts["infra"]) == 0.5  # the step's reward_mean
