"""A training run's live series: Prometheus through prometheus-client, scraped while the run is
alive, and TensorBoard event files through the standard writer; an async run's step records add
their async keys to both (and to the other trackers), a sync run's add none."""

import os
import re
import urllib.request

import pytest
from report_training_runs import fixture_training_run
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from trainer_fixtures import letter_config

from envhub.trainer.async_metrics import ASYNC_METRICS
from envhub.trainer.config import parse_config
from envhub.trainer.loop import Trainer
from envhub.trainer.telemetry import Telemetry


def test_metrics_and_tensorboard_of_a_running_trainer(tmp_path, scratch_model, one_torch_thread):
    lines = []
    config = parse_config(letter_config(tmp_path / "run", scratch_model, metrics_port=0, tensorboard=True))
    trainer = Trainer(config, log=lines.append)
    try:
        for _ in range(2):
            record = trainer.train_step()
            trainer.telemetry.on_step(record)
        url = next(re.search(r"http://\S+/metrics", line).group(0) for line in lines if "metrics:" in line)
        text = urllib.request.urlopen(url, timeout=10).read().decode()
    finally:
        trainer.close()
    series = {line.split(" ")[0]: float(line.split(" ")[1]) for line in text.splitlines()
              if line and not line.startswith("#")}
    env = 'env="test/FirstLetter-v0"'
    assert series[f"envhub_train_step{{{env}}}"] == 2
    assert series[f"envhub_train_weight_version{{{env}}}"] == float(record["weight_version"])
    assert series[f"envhub_train_strict_success_ratio{{{env}}}"] == record["strict_success"]
    assert {f'envhub_train_step_seconds{{{env},phase="{p}"}}' for p in ("rollout", "verify", "train", "weight_sync")} \
        <= series.keys()
    finished = sum(v for k, v in series.items() if k.startswith("envhub_rollout_episodes_total{"))
    assert finished == 16  # 2 steps x 2 groups x 4 samples
    assert all("episode" not in k.split("{", 1)[-1] and "task" not in k for k in series)  # bounded labels
    assert sum(1 for line in lines if line.startswith("step ")) == 2
    events = EventAccumulator(str(tmp_path / "run" / "tensorboard"))
    events.Reload()
    rewards = events.Scalars("train/reward_mean")
    assert [e.step for e in rewards] == [1, 2]
    assert "train/time/rollout_s" in events.Tags()["scalars"]


def _scrape(lines: list[str]) -> dict[str, float]:
    url = next(re.search(r"http://\S+/metrics", line).group(0) for line in lines if "metrics:" in line)
    text = urllib.request.urlopen(url, timeout=10).read().decode()
    return {line.split(" ")[0]: float(line.split(" ")[1]) for line in text.splitlines()
            if line and not line.startswith("#")}


@pytest.mark.parametrize("asynchronous", [True, False], ids=["async", "sync"])
def test_async_keys_reach_prometheus_and_the_trackers_only_from_an_async_run(tmp_path, monkeypatch, asynchronous):
    from mlflow.tracking import MlflowClient

    for key in [k for k in os.environ if k.startswith("MLFLOW_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
    steps = fixture_training_run(tmp_path / "fixture", asynchronous=asynchronous)
    run, lines = tmp_path / "run", []
    config = parse_config({"run_dir": str(run), "model": "tiny", "env": {"id": "test/FirstLetter-v0"},
                           "loggers": ["tensorboard", "mlflow"]})
    telemetry = Telemetry(env_id="test/FirstLetter-v0", run_dir=run, total_steps=len(steps), metrics_port=0,
                          enabled=True, log=lines.append, config=config)
    try:
        for step in steps:
            telemetry.on_step(step)
        series = _scrape(lines)
    finally:
        telemetry.close()
    env, last = 'env="test/FirstLetter-v0"', steps[-1]
    events = EventAccumulator(str(run / "tensorboard"))
    events.Reload()
    client = MlflowClient(tracking_uri=f"sqlite:///{run.resolve()}/mlflow.db")
    (found,) = client.search_runs([client.get_experiment_by_name("envhub").experiment_id])
    assert series[f"envhub_train_step{{{env}}}"] == len(steps)
    if not asynchronous:
        assert not any("async" in name for name in series)
        assert not any("async" in tag for tag in events.Tags()["scalars"])
        assert not any("async" in key for key in found.data.metrics)
        return
    for metric in ASYNC_METRICS:
        assert series[f"{metric.prometheus}{{{env}}}"] == pytest.approx(last[metric.key]), metric.prometheus
        expected = {s["step"]: s[metric.key] for s in steps}
        assert {e.step: e.value for e in events.Scalars(f"train/{metric.key}")} == pytest.approx(expected)
        history = client.get_metric_history(found.info.run_id, f"train/{metric.key}")
        assert {m.step: m.value for m in history} == pytest.approx(expected)
    assert all(name.split("{")[1] == f"{env}}}" for name in series if "_async_" in name)  # env, the one label


def test_every_key_the_async_loop_records_has_its_sinks():
    from envhub.trainer.async_rollouts import LOOP_KEYS, STEP_KEYS

    assert sorted(m.key for m in ASYNC_METRICS) == sorted(STEP_KEYS + LOOP_KEYS)
