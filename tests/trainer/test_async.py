"""Asynchronous training (``rollout.mode: async``, issue #40 step 1): rollouts keep running while the
trainer trains, through a bounded buffer with admission control and a staleness bound.

* bad configs are one line each of the real ``envhub train``, before any model loads;
* the engine samples from a snapshot of its own (no tensor of the trainer's), swapped between requests:
  a sample's logprobs are those of the weights of the version it records, not of the live module;
* the producer admits no more groups than the staleness bound and the buffer allow, and its own crash
  is the trainer's clear error, not a hang;
* whole runs on the real CLI (a timeout of over 10x their time is the hang guard): every trained
  sample lags at most ``max_staleness`` versions, the overtaken group is dropped and counted (or
  reweighted), a crashing env's episodes are outcomes, and ``max_staleness: 0`` trains the groups a
  synchronous run would, at lag 0.
"""

import json
import os
import subprocess
import sys
import threading
import time

import pytest
import torch
import yaml
from trainer_fixtures import TRAIN_SCRIPT, final_weights, letter_config, steps_of

from envhub.adapters.engines.base import SamplingParams
from envhub.adapters.engines.factory import LocalModel, make_engine
from envhub.adapters.engines.transformers_engine import score_tokens
from envhub.adapters.model_policy import ModelPolicy
from envhub.registry import make
from envhub.rollout.collect import EpisodeCollector
from envhub.trainer import fsdp
from envhub.trainer.async_rollouts import STEP_KEYS, AsyncRollouts, RolloutsFailed, turn_versions
from envhub.trainer.sampling import TaskOrder
from envhub.trainer.weight_sync import weight_sync_for
from envhub.types import TrajectoryRecord

ONE_PROCESS = fsdp.DistInfo(0, 1, 0, torch.device("cpu"), None)
TASKS = [f"train-{i}" for i in range(4)]  # test/FirstLetter-v0's training split
#: a whole run below takes about 10 s on this machine (imports included); the hang guard is 30x that
RUN_TIMEOUT_S = 300


def _async(**rollout):
    return {"mode": "async", **rollout}


def _write_config(tmp_path, model, **sections):
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(letter_config(tmp_path / "run", model, **sections)))
    return path


def _train(*args, timeout=60):
    return subprocess.run([sys.executable, str(TRAIN_SCRIPT), *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "OMP_NUM_THREADS": "1"})


def _records(run, step):
    path = run / "rollouts" / f"step-{step:06d}" / "trajectories.jsonl"
    return [TrajectoryRecord.model_validate_json(line) for line in path.read_text().splitlines()]


# ---- bad configs ------------------------------------------------------------------------------------

def _unloadable_model(tmp_path):
    model = tmp_path / "unloadable"
    model.mkdir()
    (model / "config.json").write_text("{}")  # a model that cannot load: its error would be another
    return model


@pytest.mark.parametrize(("rollout", "says"), [
    (_async(group_size=1), "rollout.group_size is 1: a group of one sample has zero variance"),
    (_async(max_staleness=-1), "rollout.max_staleness is -1: it is how many weight versions"),
    (_async(buffer_groups=1), "rollout.buffer_groups (1) is smaller than a batch (rollout.groups_per_step 2)"),
])
def test_a_bad_async_config_is_one_line_before_the_model_loads(tmp_path, rollout, says):
    done = _train(_write_config(tmp_path, _unloadable_model(tmp_path), rollout=rollout))
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr and done.stderr.startswith("error: this config would train nothing")
    said = [line for line in done.stderr.splitlines() if says in line]
    assert len(said) == 1 and said[0].startswith(f"  - {says}"), done.stderr
    assert not (tmp_path / "run").exists()


# ---- the engine's snapshot ----------------------------------------------------------------------------

def _load(model_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    return (AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).eval(),
            AutoTokenizer.from_pretrained(str(model_dir)))


def _scores(model, prompt, token_ids):
    return score_tokens(model, prompt + list(token_ids), len(prompt), temperature=1.0)


def _gap(a, b):
    return max(abs(x - y) for x, y in zip(a, b, strict=True))


def test_the_engine_samples_its_own_snapshot_while_the_trainer_updates(tmp_path, scratch_model, one_torch_thread):
    model, tokenizer = _load(scratch_model)
    engine = make_engine("transformers", model=LocalModel(model, tokenizer, seed=0), max_context=512)
    sync = weight_sync_for(engine, base_model_dir=scratch_model, staging_dir=tmp_path, staged=True)
    try:
        assert {p.data_ptr() for p in model.parameters()}.isdisjoint(p.data_ptr() for p in engine.model.parameters())
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
        batch = torch.tensor([tokenizer.encode("an update of the live module")])

        def update():
            model.train()
            loss = torch.nn.functional.cross_entropy(model(input_ids=batch).logits[0, :-1], batch[0, 1:])
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()

        update()
        snapshot = fsdp.full_state_dict(model, ONE_PROCESS)
        version_1 = {k: v.clone() for k, v in snapshot.items()}  # the engine owns what it was handed
        assert sync.push(snapshot, "1") == "1"
        stop = threading.Event()

        def train_on():
            while not stop.is_set():
                update()

        trainer = threading.Thread(target=train_on)
        trainer.start()  # the live module changes while the engine samples
        prompt = tokenizer.encode("Reply with one word.")
        try:
            results = engine.generate_many([prompt] * 4, SamplingParams(max_new_tokens=8, temperature=1.0))
        finally:
            stop.set()
            trainer.join()
        assert {r.weight_version for r in results} == {"1"}
        at_1, _ = _load(scratch_model)
        at_1.load_state_dict(version_1)
        for result in results:
            assert _gap(_scores(at_1, prompt, result.token_ids), result.logprobs) < 1e-4
            assert _gap(_scores(model.eval(), prompt, result.token_ids), result.logprobs) > 1e-3  # not the live one

        prefills = engine.stats["prefills"]
        long = engine.submit(prompt, SamplingParams(max_new_tokens=200, temperature=1.0))
        while engine.stats["prefills"] == prefills:  # until it runs
            time.sleep(0.001)
        sync.push(fsdp.full_state_dict(model, ONE_PROCESS), "2")
        assert not long.done(), "the request ended before the push: lengthen it"
        after = engine.submit(prompt, SamplingParams(max_new_tokens=2, temperature=1.0))
        first = long.result(timeout=60)
        assert first.weight_version == "1" and "weight_version_start" not in first.meta  # finished on its weights
        assert after.result(timeout=60).weight_version == "2" == engine.wait_weights(timeout=10)
    finally:
        engine.close()


# ---- the producer -------------------------------------------------------------------------------------

@pytest.fixture
def letter_collector(scratch_model):
    model, tokenizer = _load(scratch_model)
    engine = make_engine("transformers", model=LocalModel(model, tokenizer, seed=0), max_context=512)
    policy = ModelPolicy(engine, tokenizer, params=SamplingParams(max_new_tokens=2, temperature=1.0), max_context=512)
    collector = EpisodeCollector(lambda: make("test/FirstLetter-v0"), policy, concurrency=4)
    yield collector
    collector.close()
    engine.close()


def _groups(group_size=2):
    order = TaskOrder(TASKS, env_id="test/FirstLetter-v0", seed=0, group_size=group_size, dist=ONE_PROCESS)
    return lambda j: order.plans(j, 1)


def _settle(producer, started, timeout=60.0):
    """Until ``started`` groups have started and finished, then a while longer: no more may start."""
    deadline = time.monotonic() + timeout
    while producer.counts()["ready"] + producer.counts()["taken"] < started and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.3)  # an episode takes ~10 ms: a group over the bound would have started by now
    return producer.counts()


def test_admission_keeps_started_groups_within_the_staleness_bound_and_the_buffer(letter_collector,
                                                                                   one_torch_thread):
    producer = AsyncRollouts(letter_collector, _groups(), first_group=0, groups_per_step=2, max_staleness=1).start()
    try:
        assert _settle(producer, 4)["started"] == 4  # (max_staleness + 0 + 1) x groups_per_step
        taken = producer.take()
        assert len(taken.records) == 4 and len({r.group_id for r in taken.records}) == 2
        assert taken.queue_groups == 2
        assert _settle(producer, 4)["started"] == 4  # taking is not training: the bound stays
        producer.trained()
        assert _settle(producer, 6)["started"] == 6
    finally:
        producer.close()
    bounded = AsyncRollouts(letter_collector, _groups(), first_group=0, groups_per_step=2, max_staleness=3,
                            buffer_groups=3).start()
    try:
        assert _settle(bounded, 3)["started"] == 3  # the buffer, not the staleness bound (8), holds it
        bounded.take()
        assert _settle(bounded, 5)["started"] == 5
    finally:
        assert bounded.close() == {"buffered_groups": 3, "running_groups": 0}


def test_a_crashed_producer_is_the_trainers_error_not_a_hang(letter_collector, one_torch_thread):
    plan = _groups()

    def plan_group(j):
        if j == 2:
            raise RuntimeError("planning group 2 broke")
        return plan(j)

    producer = AsyncRollouts(letter_collector, plan_group, first_group=0, groups_per_step=1, max_staleness=1).start()
    try:
        producer.take()
        producer.trained()  # group 2 may start now: its planning raises on the producer's side
        t0 = time.monotonic()
        with pytest.raises(RolloutsFailed, match="planning group 2 broke"):
            for _ in range(2):
                producer.take()
        assert time.monotonic() - t0 < 30
    finally:
        producer.close()


# ---- whole runs -------------------------------------------------------------------------------------

def _versions_at_training(run):
    """Each step's trainer version when its batch was formed: the version the step before ended on."""
    lines = steps_of(run)
    return {line["step"]: int(before) for line, before in
            zip(lines, ["0"] + [line["weight_version"] for line in lines], strict=False)}


def _snapshots(run, scratch_model):
    """The weights of each checkpointed weight version (and the initial model's, version 0)."""
    models = {0: _load(scratch_model)[0]}
    for state in sorted((run / "checkpoints").glob("step-*/state.json")):
        model = _load(scratch_model)[0]
        model.load_state_dict(torch.load(state.parent / "model.pt", weights_only=True))
        models[int(json.loads(state.read_text())["weight_version"])] = model
    return models


@pytest.mark.slow
@pytest.mark.parametrize("stale_samples", ["drop", "reweight"])
def test_an_async_run_holds_the_staleness_bound(tmp_path, scratch_model, stale_samples):
    run, steps = tmp_path / "run", 8
    held = {"crash_task": "train-3", "held_task": "train-1", "steps_file": str(run / "steps.jsonl"),
            "until_version": 3}
    algorithm = {"mismatch": {"mode": "decoupled"}} if stale_samples == "reweight" else {}
    config = _write_config(tmp_path, scratch_model, env={"id": "test/HeldLetter-v0", "args": held},
                           rollout=_async(max_staleness=1, stale_samples=stale_samples, group_size=8,
                                          concurrency=12),
                           algorithm=algorithm, steps=steps, checkpoint_every=2, keep_checkpoints=steps)
    done = _train(config, timeout=RUN_TIMEOUT_S)
    assert done.returncode == 0, done.stdout + done.stderr
    lines, at = steps_of(run), _versions_at_training(run)
    assert [line["step"] for line in lines] == list(range(1, steps + 1))
    stale_seen, trained_any = 0, False
    for line in lines:
        assert set(STEP_KEYS) <= set(line), line
        records = _records(run, line["step"])
        assert len({r.group_id for r in records}) == 2 and len(records) == 16  # a batch of whole groups
        trained = set(line["trained_episodes"])
        trained_any |= bool(trained)
        lags = {r.episode_id: at[line["step"]] - turn_versions(r)[0] for r in records if turn_versions(r)}
        infra = {r.episode_id for r in records if r.outcome_class.value == "infra_failure"}  # excluded: never stale
        stale = {e for e, lag in lags.items() if lag > 1 and e not in infra}
        if stale_samples == "drop":
            assert all(lags[e] <= 1 for e in trained), line["step"]  # the bound, on every trained sample
            assert line["async_stale_dropped"] == len(stale) and not stale & trained
        else:  # kept: trained unless their group carries no signal
            assert line["async_stale_reweighted"] == len(stale) and line["async_stale_dropped"] == 0
            rewards = {g: {r.reward for r in records if r.group_id == g} for g in {r.group_id for r in records}}
            assert all(e in trained for r in records if r.episode_id in stale and len(rewards[r.group_id]) > 1
                       for e in [r.episode_id])
        stale_seen += len(stale)
        assert line["async_version_lag_max"] == max(lags.values(), default=0)
        crashed = [r for r in records if r.task_id == "train-3"]
        assert all(r.outcome.value == "env_error" and r.episode_id not in trained for r in crashed)
    assert stale_seen >= 8, "the held group should have been overtaken and trained stale"
    assert trained_any and sum(line["optimizer_steps"] for line in lines) >= 1
    assert sum(line["outcomes"]["env_error"] for line in lines) >= 8  # the crashing env's episodes, as outcomes
    initial, final = _load(scratch_model)[0].state_dict(), final_weights(run)
    assert any(not torch.equal(initial[k], final[k]) for k in final), "the weights did not change"
    if stale_samples == "drop":  # each sample's logprobs are those of its version's snapshot
        snapshots, final_version = _snapshots(run, scratch_model), int(lines[-1]["weight_version"])
        checked = 0
        for line in lines:
            for record in _records(run, line["step"]):
                for turn in record.turns:
                    version = int(turn.weight_version)
                    if version in snapshots:
                        scored = _scores(snapshots[version], record.prompt_ids, turn.token_ids)
                        assert _gap(scored, turn.logprobs) < 1e-4
                        checked += 1
                        if version != final_version:
                            live = _scores(snapshots[final_version], record.prompt_ids, turn.token_ids)
                            assert _gap(live, turn.logprobs) > 1e-4
        assert checked >= 16


@pytest.mark.slow
def test_max_staleness_0_trains_what_a_sync_run_would_at_lag_0(tmp_path, scratch_model):
    run = tmp_path / "run"
    done = _train(_write_config(tmp_path, scratch_model, rollout=_async(max_staleness=0), steps=3),
                  timeout=RUN_TIMEOUT_S)
    assert done.returncode == 0, done.stdout + done.stderr
    order = TaskOrder(TASKS, env_id="test/FirstLetter-v0", seed=0, group_size=4, dist=ONE_PROCESS)
    at = _versions_at_training(run)
    for line in steps_of(run):
        step, records = line["step"], _records(run, line["step"])
        assert {r.episode_id for r in records} == {p.episode_id for p in order.plans((step - 1) * 2, 2)}
        assert {at[step] - turn_versions(r)[0] for r in records} == {0}
        assert line["async_version_lag_max"] == 0 and line["async_stale_dropped"] == 0
        assert line["async_queue_groups"] == 0 and line["async_versions_spanned_mean"] == 0
