"""``Run``: one run directory's paths, identity, records and report, also as a sub-directory of another run."""

from __future__ import annotations

import json

import pytest

from envhub.run_dir import Run, RunFileError
from envhub.types import Outcome, TrajectoryRecord, Versions


def _record(episode_id: str) -> dict:
    return TrajectoryRecord(episode_id=episode_id, task_id="t", env_id="e", group_id="g", sample_index=0,
                            versions=Versions(envhub="0", env="e@0"), outcome=Outcome.SUCCESS).model_dump(mode="json")


def test_a_step_run_under_a_training_run_has_its_own_files(tmp_path):
    step = Run(tmp_path / "train").sub("rollouts", "step-000001")
    assert step.path == tmp_path / "train" / "rollouts" / "step-000001"
    assert step.trajectories_path == step.path / "trajectories.jsonl"
    assert not step.exists()
    step.ensure_writable()
    step.claim({"env_id": "e", "step": 1})
    with step.store() as store:
        store.append(_record("a"))
        store.append(_record("b"))
    step.write_report({"attempted": 2})
    assert [r.episode_id for r in step.records()] == ["a", "b"] and [r["episode_id"] for r in step.rows()] == ["a", "b"]
    assert step.report() == {"attempted": 2} and step.identity() == {"env_id": "e", "step": 1}
    assert sorted(p.name for p in step.path.iterdir()) == ["report.json", "run.json", "trajectories.jsonl"]
    assert Run.at(step.trajectories_path).path == step.path  # a JSONL file names its run too


def test_claiming_a_directory_of_another_run_is_refused_and_names_the_difference(tmp_path):
    run = Run(tmp_path)
    run.claim({"policy": "noop", "group_size": 2})
    run.claim({"group_size": 2, "policy": "noop"})  # the same run, resumed
    with pytest.raises(ValueError, match=r"another run \(different policy: 'noop' there, 'gold' now\)"):
        run.claim({"policy": "gold", "group_size": 2})
    (tmp_path / "run.json").write_text("{torn")
    with pytest.raises(ValueError, match=r"run\.json is unreadable"):
        run.claim({"policy": "noop", "group_size": 2})


def test_group_size_comes_from_the_report_then_the_identity(tmp_path):
    run = Run(tmp_path)
    assert run.group_size() is None
    run.claim({"group_size": 4})
    assert run.group_size() == 4
    run.write_report({"group_size": 8})
    assert run.group_size() == 8
    (tmp_path / "report.json").write_text("[1, 2]")
    assert run.group_size() == 4
    with pytest.raises(RunFileError, match=r"report\.json is not a JSON object"):
        run.report()


def test_a_directory_without_trajectories_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"no trajectories found at .*trajectories\.jsonl"):
        Run.at(tmp_path).require()
    (tmp_path / "trajectories.jsonl").write_text(json.dumps(_record("x")) + "\n")
    assert [r.episode_id for r in Run.at(tmp_path).require().records()] == ["x"]


def test_an_unwritable_directory_is_named(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(PermissionError, match="cannot write to output directory"):
        Run(blocker / "sub").ensure_writable()
