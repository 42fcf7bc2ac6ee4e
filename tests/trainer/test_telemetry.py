"""A training run's live series: Prometheus through prometheus-client, scraped while the run is
alive, and TensorBoard event files through the standard writer."""

import re
import urllib.request

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from trainer_fixtures import letter_config

from envhub.trainer.config import parse_config
from envhub.trainer.loop import Trainer


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
