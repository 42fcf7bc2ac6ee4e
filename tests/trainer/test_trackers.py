"""Experiment trackers (``loggers:``): a real ``envhub train`` run logs to TensorBoard, W&B (offline),
MLflow (its local SQLite store) and trackio (its local store), and each tracker's own reader gives
back every step's fields, the evals, the config and the run directory; a tracker that raises mid-run
costs one warning and the run finishes; ``tensorboard: true`` still works and old run dirs resume."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from trainer_fixtures import TRAIN_SCRIPT, letter_config

from envhub.trainer import checkpoint
from envhub.trainer.config import parse_config
from envhub.trainer.loop import Trainer
from envhub.trainer.preflight import PreflightError, check_config
from envhub.trainer.trackers import NAMES, TensorBoardTracker, Trackers, missing_packages, tracker_names

ALL = ["tensorboard", "wandb", "mlflow", "trackio"]


def _offline_env(tmp_path: Path) -> dict[str, str]:
    """The trackers' environment of a test: nothing leaves the machine, every store is under tmp."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("WANDB_", "MLFLOW_", "TRACKIO_"))}
    (tmp_path / "wandb").mkdir()
    return {**env, "WANDB_MODE": "offline", "WANDB_DIR": str(tmp_path / "wandb"), "WANDB_ERROR_REPORTING": "false",
            "TRACKIO_DIR": str(tmp_path / "trackio"), "MLFLOW_DISABLE_TELEMETRY": "true", "DO_NOT_TRACK": "true",
            "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _run(cmd: list[str], env: dict[str, str]) -> str:
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.slow
def test_a_real_run_logs_the_same_fields_to_every_tracker(tmp_path, scratch_model):
    run = tmp_path / "run"
    config_path = tmp_path / "config.yaml"
    config_path.write_text(yaml.safe_dump(letter_config(
        run, scratch_model, env={"validation_split": "validation"}, eval={"episodes": 4}, steps=2,
        loggers=ALL)))
    env = _offline_env(tmp_path)
    done = subprocess.run([sys.executable, str(TRAIN_SCRIPT), str(config_path)], env=env, capture_output=True,
                          text=True, timeout=500)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "trackers: tensorboard, wandb, mlflow, trackio" in done.stderr
    assert "warning: the" not in done.stderr
    run_dir = str(run.resolve())
    rewards = {s["step"]: s["reward_mean"] for s in _jsonl(run / "steps.jsonl")}
    evals = {e["step"]: e["strict_success"] for e in _jsonl(run / "evals.jsonl")}
    assert sorted(rewards) == [1, 2] and sorted(evals) == [0, 2]  # the evals before and after
    saved = json.loads((run / "config.json").read_text())

    # TensorBoard: its event files, read by its own accumulator
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run / "tensorboard"))
    events.Reload()
    assert {e.step: e.value for e in events.Scalars("train/reward_mean")} == pytest.approx(rewards)
    assert {e.step: e.value for e in events.Scalars("eval/strict_success")} == pytest.approx(evals)
    texts = {tag: events.Tensors(tag)[0].tensor_proto.string_val[0].decode() for tag in events.Tags()["tensors"]}
    assert texts["run_dir/text_summary"] == run_dir
    assert json.loads(texts["config/text_summary"].replace("\n    ", "\n")) == saved

    # MLflow: the run's local SQLite store through MlflowClient
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{run_dir}/mlflow.db")
    (found,) = client.search_runs([client.get_experiment_by_name("envhub").experiment_id])
    assert found.data.tags["envhub.run_dir"] == run_dir and found.info.run_name == "run"
    assert found.info.status == "FINISHED"
    assert found.data.params["optim.lr"] == str(saved["optim"]["lr"])
    assert found.data.params["loggers"] == str(ALL)
    history = client.get_metric_history(found.info.run_id, "train/reward_mean")
    assert {m.step: m.value for m in history} == pytest.approx(rewards)
    history = client.get_metric_history(found.info.run_id, "eval/strict_success")
    assert {m.step: m.value for m in history} == pytest.approx(evals)
    artifact = client.download_artifacts(found.info.run_id, "config.json", str(tmp_path))
    assert json.loads(Path(artifact).read_text()) == saved
    assert (run / "mlflow-artifacts").is_dir()

    # W&B offline: the run's .wandb log, read back by wandb's own reader (`wandb leet inspect`)
    (offline,) = (tmp_path / "wandb" / "wandb").glob("offline-run-*")
    out = _run([sys.executable, "-m", "wandb", "leet", "inspect", "--json", str(offline)], env)
    records = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    (started,) = [r["run"] for r in records if r.get("type") == "run"]
    assert started["display_name"] == "run" and run_dir in started["notes"]
    config: dict = {}
    for r in records:
        if r.get("type") in ("run", "config"):
            config.update((r.get("run", r).get("config") or {}).get("update", {}))
    assert config["envhub_run_dir"] == run_dir
    assert config["optim"]["lr"] == saved["optim"]["lr"] and config["loggers"] == ALL
    rows: dict[int, dict] = {}
    for r in records:
        if r.get("type") == "history":
            rows.setdefault(int(r["history"]["step"].get("num", 0)), {}).update(r["history"]["item"])
    assert {s: rows[s]["train/reward_mean"] for s in rewards} == pytest.approx(rewards)
    assert {s: rows[s]["eval/strict_success"] for s in evals} == pytest.approx(evals)

    # trackio: its local store through its own Api and storage
    out = _run([sys.executable, "-c", "import json, trackio; runs = list(trackio.Api().runs('envhub')); print(json.dumps("
                  "[{'name': r.name, 'config': r.config, 'logs': trackio.SQLiteStorage.get_logs('envhub', run_id=r.id)}"
                  " for r in runs]))"], env)
    (logged,) = json.loads(out.splitlines()[-1])
    assert logged["name"] == "run" and logged["config"]["envhub_run_dir"] == run_dir
    assert logged["config"]["optim"]["lr"] == saved["optim"]["lr"]
    logs = logged["logs"]
    assert {r["step"]: r["train/reward_mean"] for r in logs if "train/reward_mean" in r} == pytest.approx(rewards)
    assert {r["step"]: r["eval/strict_success"] for r in logs if "eval/strict_success" in r} == pytest.approx(evals)


class FailingTracker(TensorBoardTracker):
    """A tracker whose disk fills at step 2: it raises there and is never called again."""

    name = "failing"

    def __init__(self, run_dir: Path) -> None:
        super().__init__(run_dir)
        self.calls: list[str] = []

    def log_step(self, step: int, scalars: dict[str, float]) -> None:
        self.calls.append(f"step {step}")
        if step == 2:
            raise OSError("no space left on device")
        super().log_step(step, scalars)

    def log_eval(self, step: int, tag: str, scalars: dict[str, float]) -> None:
        self.calls.append(f"eval {tag}")
        super().log_eval(step, tag, scalars)

    def close(self) -> None:
        self.calls.append("close")
        super().close()


@pytest.mark.slow
def test_a_tracker_failing_mid_run_costs_one_warning_and_the_run_finishes(tmp_path, scratch_model,
                                                                        one_torch_thread):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    lines: list[str] = []
    config = parse_config(letter_config(tmp_path / "run", scratch_model, env={"validation_split": "validation"},
                                        eval={"episodes": 2}, steps=4, loggers=["tensorboard"]))
    trainer = Trainer(config, log=lines.append)
    failing = FailingTracker(tmp_path / "failing")
    try:
        trainer.telemetry.trackers.trackers.append(failing)
        summary = trainer.run()
    finally:
        trainer.close()
    assert summary["steps"] == 4
    warnings = [line for line in lines if line.startswith("warning:")]
    assert warnings == ["warning: the failing tracker failed in log_step (OSError: no space left on device); "
                        "the run goes on without it"]
    assert failing.calls == ["eval before", "step 1", "step 2", "close"]  # skipped after it raised
    kept = EventAccumulator(str(tmp_path / "run" / "tensorboard"))
    kept.Reload()
    assert [e.step for e in kept.Scalars("train/reward_mean")] == [1, 2, 3, 4]  # the others go on
    assert [e.step for e in kept.Scalars("eval/strict_success")] == [0, 4]
    dropped = EventAccumulator(str(tmp_path / "failing" / "tensorboard"))
    dropped.Reload()
    assert [e.step for e in dropped.Scalars("train/reward_mean")] == [1]


def test_a_tracker_failing_to_close_is_a_warning_too(tmp_path):
    class CloseFails(FailingTracker):
        def close(self) -> None:
            super().close()
            raise RuntimeError("service gone")

    lines: list[str] = []
    trackers = Trackers([CloseFails(tmp_path)], lines.append)
    trackers.log_step(1, {"train/x": 1.0})
    trackers.close()
    trackers.close()
    assert lines == ["warning: the failing tracker failed in close (RuntimeError: service gone); "
                     "the run goes on without it"]


def test_tensorboard_true_is_an_alias_and_names_are_checked(tmp_path):
    base = letter_config(tmp_path / "run", tmp_path)
    assert tracker_names(parse_config({**base, "tensorboard": True})) == ["tensorboard"]
    assert tracker_names(parse_config({**base, "tensorboard": True, "loggers": ["mlflow", "tensorboard"]})) \
        == ["mlflow", "tensorboard"]
    assert tracker_names(parse_config({**base, "loggers": "wandb"})) == ["wandb"]
    assert tracker_names(parse_config(base)) == []
    with pytest.raises(ValueError, match=r"loggers: .*unknown tracker\(s\) \['wandbb'\]; "
                                         r"valid: tensorboard, wandb, mlflow, trackio"):
        parse_config({**base, "loggers": ["wandbb"]})
    assert list(NAMES) == ALL and missing_packages(ALL) == []  # every extra is installed here


def test_a_missing_package_is_refused_before_the_model_loads(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "trackio", None)  # Python's own "not installed": its import fails
    config = parse_config(letter_config(tmp_path / "run", tmp_path / "no-model", loggers=["trackio"]))
    assert "loggers: trackio needs the trackio package (pip install 'envhub[trackio]')" in check_config(config)
    with pytest.raises(PreflightError, match=r"envhub\[trackio\]"):
        Trainer(config, log=lambda line: None)  # refused before resolving the (missing) model
    with pytest.raises(ValueError, match=r"pip install 'envhub\[trackio\]'"):
        Trackers.open(["trackio"], tmp_path, lambda line: None)


def test_old_run_dirs_resume_and_loggers_may_change_on_resume(tmp_path):
    config = parse_config(letter_config(tmp_path / "run", tmp_path))
    old = {k: v for k, v in config.dump().items() if k != "loggers"}  # a config.json from before loggers
    assert parse_config(old) == config
    assert checkpoint.run_differences(old, config.dump()) == []
    with_trackers = parse_config({**old, "loggers": ["wandb", "mlflow"], "tensorboard": True}).dump()
    assert checkpoint.run_differences(old, with_trackers) == []
    assert checkpoint.run_differences(with_trackers, config.dump()) == []
