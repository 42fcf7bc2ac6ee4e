"""Fault injection: 5 % of the sandboxes of a 300-episode docker rollout are killed at random while it
runs. Every episode is accounted for, each lost one is an infra outcome that says what happened
(never a policy failure scored 0), none of them could enter a training batch, and no container is
left behind."""

import os
import random
import threading
import time
from collections import Counter

import pytest
import torch
from sandbox_fixtures import require_backend

from envhub.policies import make_policy
from envhub.rollout.runner import run_rollouts
from envhub.sandboxes import close_all
from envhub.sandboxes.docker_backend import docker_client, owned_containers
from envhub.sandboxes.dockerapi import LABEL_PID
from envhub.store import read_jsonl
from envhub.types import Outcome

EPISODES = 300
KILLS = EPISODES // 20


def _ours():
    return [c for c in owned_containers() if c.labels.get(LABEL_PID) == str(os.getpid())]


@pytest.mark.docker
@pytest.mark.slow
def test_killing_5_percent_of_sandboxes_loses_only_those_episodes(tmp_path):
    require_backend("docker")
    client = docker_client()
    killed: list[str] = []
    stop = threading.Event()

    def killer() -> None:
        rng = random.Random(7)
        while not stop.is_set() and len(killed) < KILLS:
            running = [c for c in _ours() if c.state == "running" and c.id not in killed]
            if running:
                victim = rng.choice(running)
                try:
                    client.api.kill(victim.id)
                    killed.append(victim.id)
                except Exception:  # it was removed meanwhile: pick another
                    pass
            time.sleep(rng.uniform(0.02, 0.15))

    thread = threading.Thread(target=killer, daemon=True)
    thread.start()
    try:
        result = run_rollouts("envhub/Computation-v0", make_policy("gold"), out_dir=tmp_path, episodes=EPISODES,
                              concurrency=4, env_kwargs={"sandbox": "docker", "sandbox_pool": 2})
    finally:
        stop.set()
        thread.join(timeout=10)
    assert len(killed) == KILLS, f"only {len(killed)} sandboxes could be killed while the run lasted"
    records = list(read_jsonl(result.trajectories))
    assert len(records) == EPISODES == len({r["episode_id"] for r in records})
    outcomes = Counter(r["outcome"] for r in records)
    report = result.report
    by_class = report["by_class"]
    assert report["attempted"] == EPISODES == sum(by_class.values())
    assert by_class["success"] + by_class["policy_failure"] + by_class["truncation"] + by_class["infra_failure"] \
        == EPISODES
    # gold solves every task: anything else was caused by a kill, and must be infra with its reason
    lost = [r for r in records if r["outcome"] != "success"]
    print(f"\n{KILLS} sandboxes killed: {dict(outcomes)}; " + "; ".join(r["outcome_detail"][:90] for r in lost[:3]))
    assert 0 < len(lost) <= 2 * KILLS, outcomes
    assert all(Outcome(r["outcome"]).is_infra for r in lost), outcomes
    assert report["by_outcome"]["env_error"] + report["by_outcome"]["verifier_error"] == len(lost)
    assert all(r["outcome_detail"] for r in lost)
    from envhub.trainer.grpo import select_samples

    classes = [Outcome(r["outcome"]).outcome_class.value for r in records]
    groups = torch.arange(len(records)) // 2
    rewards = torch.tensor([float(r["reward"]) for r in records])
    keep, _, stats = select_samples(classes, rewards, groups, [False] * len(records), drop_zero_variance=False)
    assert not any(keep[i] for i, r in enumerate(records) if r in lost)
    assert stats["excluded_infra"] == len(lost)
    close_all()
    deadline = time.monotonic() + 15
    while _ours() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert _ours() == []
