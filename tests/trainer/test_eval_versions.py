"""Validation evals are never reused across weight versions: an eval run again after the weights
changed (the final eval of a run resumed with more steps) samples its episodes anew; with the same
weights (an interrupted eval) the finished episodes are kept."""

import json

import pytest
from trainer_fixtures import letter_config

from envhub.trainer.config import parse_config
from envhub.trainer.loop import Trainer, train


def _rows(run, tag):
    return [json.loads(line) for line in (run / "eval" / tag / "trajectories.jsonl").read_text().splitlines()]


def _versions(run, tag):
    return {v for r in _rows(run, tag) for v in r["versions"]["weight_versions"]}


def _report(run, tag):
    return json.loads((run / "eval" / tag / "report.json").read_text())


def test_an_eval_is_rerun_when_the_weight_version_changed(tmp_path, scratch_model, one_torch_thread):
    run = tmp_path / "run"
    config = parse_config(letter_config(run, scratch_model, env={"validation_split": "validation"},
                                        eval={"episodes": 4}, steps=0))
    trainer = Trainer(config, log=lambda line: None)
    try:
        trainer.evaluate("final")
        assert _versions(run, "final") == {"0"} and len(_rows(run, "final")) == 4
        trainer.evaluate("final")  # the same weights: every episode is kept
        assert _report(run, "final")["skipped_already_done"] == 4
        trainer.state.weight_version = "1"
        trainer.models.publish("1")
        result = trainer.evaluate("final")
        assert _versions(run, "final") == {"1"} and len(_rows(run, "final")) == 4
        report = _report(run, "final")
        assert report["skipped_already_done"] == 0 and report["weight_version"] == "1"
        assert result["weight_version"] == "1"
    finally:
        trainer.close()


@pytest.mark.slow
def test_final_eval_after_resume_with_more_steps_uses_the_new_weights(tmp_path, scratch_model, one_torch_thread):
    run = tmp_path / "run"
    sections = {"env": {"validation_split": "validation"}, "eval": {"episodes": 4}}
    train(parse_config(letter_config(run, scratch_model, steps=2, **sections)), log=lambda line: None)
    before = json.loads((run / "checkpoints" / "step-000002" / "state.json").read_text())["weight_version"]
    assert _versions(run, "final") == {before}
    train(parse_config(letter_config(run, scratch_model, steps=4, **sections)), resume=True, log=lambda line: None)
    after = json.loads((run / "checkpoints" / "step-000004" / "state.json").read_text())["weight_version"]
    assert after != before  # steps 3 and 4 updated the weights
    assert _versions(run, "final") == {after} and _report(run, "final")["step"] == 4
    final = [e for e in map(json.loads, (run / "evals.jsonl").read_text().splitlines()) if e["tag"] == "final"]
    assert [(e["step"], e["weight_version"]) for e in final] == [(4, after)]
