"""`envhub rollout --metrics-port`: a running rollout scraped over HTTP, parsed with
prometheus-client's own parser; the series exist with bounded label sets and sane values."""

import json
import re
import signal
import subprocess
import sys
import time
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families
from sandbox_fixtures import require_backend

from envhub.types import Outcome, OutcomeClass

ENV = "envhub/Computation-v0"
LABELS = {  # family -> the exact label names of its samples (histogram buckets add ``le``)
    "envhub_rollout_episodes": {"env", "outcome", "outcome_class"},
    "envhub_rollout_strict_success_ratio": {"env"},
    "envhub_rollout_success_ratio_excluding_infra": {"env"},
    "envhub_rollout_sampled_tokens": {"env"},
    "envhub_rollout_tokens_per_second": {"env"},
    "envhub_rollout_tool_calls": {"env"},
    "envhub_rollout_episodes_in_flight": {"env"},
    "envhub_rollout_episodes_planned": {"env"},
    "envhub_rollout_episode_seconds": {"env", "outcome_class"},
    "envhub_sandbox_pools": {"backend"},
    "envhub_sandbox_pool_size": {"backend"},
    "envhub_sandbox_pool_idle": {"backend"},
    "envhub_sandbox_pool_created": {"backend"},
    "envhub_sandbox_pool_reused": {"backend"},
    "envhub_sandbox_pool_replaced": {"backend"},
}


def _scrape(url: str) -> dict[str, list]:
    with urllib.request.urlopen(url, timeout=5) as resp:
        assert resp.headers["Content-Type"].startswith("text/plain")
        text = resp.read().decode()
    return {f.name: f.samples for f in text_string_to_metric_families(text)}, text


@pytest.mark.slow
def test_a_running_rollout_is_scraped(tmp_path):
    require_backend("bwrap")
    episodes = 3000  # far more than it runs: the test stops it with Ctrl-C once scraped mid-run
    proc = subprocess.Popen(
        [sys.executable, "-m", "envhub.cli", "rollout", ENV, "--policy", "gold", "--episodes", str(episodes),
         "--concurrency", "2", "--sandbox", "bwrap", "--no-progress", "--metrics-port", "0", "--env-arg", "sandbox_pool=3", "--out",
         str(tmp_path / "run")],
        stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    try:
        url = None
        for line in proc.stderr:
            if m := re.search(r"metrics: (http://\S+/metrics)", line):
                url = m.group(1)
                break
        assert url and url.startswith("http://127.0.0.1:")
        deadline = time.monotonic() + 60
        while True:
            families, text = _scrape(url)
            done = sum(s.value for s in families["envhub_rollout_episodes"])
            if done >= 10 or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert 10 <= done < episodes, "the scrape must come while the run goes on"
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=60)
    for name, labels in LABELS.items():
        assert name in families, name
        for sample in families[name]:
            assert set(sample.labels) - {"le"} == labels, (name, sample.labels)
    by_outcome = {s.labels["outcome"]: s for s in families["envhub_rollout_episodes"]}
    assert set(by_outcome) == {o.value for o in Outcome}  # infra outcomes are there, at 0
    for o in Outcome:
        assert by_outcome[o.value].labels["outcome_class"] == o.outcome_class.value
        assert by_outcome[o.value].labels["env"] == ENV
    assert by_outcome["success"].value == done  # gold: every finished episode succeeded
    value = {name: families[name][0].value for name in LABELS if len(families[name]) == 1}
    assert value["envhub_rollout_strict_success_ratio"] == 1.0
    assert value["envhub_rollout_episodes_planned"] == episodes
    # Started and not yet recorded: the worker threads may finish episodes faster than they are recorded.
    assert 0 <= value["envhub_rollout_episodes_in_flight"] <= episodes - done
    assert value["envhub_rollout_tool_calls"] == 2 * done
    classes = {s.labels["outcome_class"] for s in families["envhub_rollout_episode_seconds"]}
    assert classes == {c.value for c in OutcomeClass}
    pool = {s.labels["backend"]: s.value for s in families["envhub_sandbox_pool_size"]}
    pools = {s.labels["backend"]: s.value for s in families["envhub_sandbox_pools"]}
    assert set(pool) == {"bwrap"} and pools["bwrap"] >= 1 and pool["bwrap"] == 3 * pools["bwrap"]
    assert families["envhub_sandbox_pool_reused"][0].value > 0
    # Bounded: no task id, episode id or prompt text reaches the scrape.
    records = [json.loads(line) for line in (tmp_path / "run" / "trajectories.jsonl").read_text().splitlines()]
    assert records and not any(r["task_id"] in text or r["episode_id"] in text for r in records)
    assert records[0]["messages"][1]["content"][:20] not in text
    assert proc.returncode != 0 and len(records) < episodes  # Ctrl-C stopped it; what finished is on disk
