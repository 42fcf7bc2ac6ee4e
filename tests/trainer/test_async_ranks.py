"""Asynchronous training under several ranks (``rollout.mode: async`` with ``torchrun``, issue #40 step 3):
one buffer and one admission per run, each rank training its share of every step's batch.

Two gloo processes on the CPU train a few async steps of the tiny model on ``test/FirstLetter-v0``.
This file is also the ranks' program (``torchrun ... test_async_ranks.py CONFIG OUT``, the bottom of the
file): each rank runs the trainer and writes what it saw -- steps trained, data cursor, weight version,
digests of its gathered weights and of its engine's weights -- to ``OUT/rankR.json``. The test checks:

* both ranks trained every step, and ended on the same cursor, weight version and weights (the trained
  module's and the engine's);
* each step's batch is whole groups split between the ranks (``rollouts/step-N/trajectories.rankR.jsonl``),
  no sample on two ranks, none lost (every sample trained or counted untrained), no group in two steps;
* one buffer per run: one writer of ``rollouts/buffer/entries.jsonl`` (one entry token, no episode twice),
  and the admission bound over the run's groups, not a rank's: group ``j`` started only once
  ``floor(j / groups_per_step) - max_staleness`` steps had trained, so its first turn samples the weights
  of that step or later, and no more than ``(max_staleness + steps + 1) x groups_per_step`` groups started;
* the staleness figures of a step's line are the whole batch's (both ranks' samples), and the bound holds
  on every trained sample; rank 0 alone wrote ``steps.jsonl`` (one line per step) and ``async.json``;
* ``--resume`` with two more steps (still two ranks): rank 0 takes up the final checkpoint's buffered
  groups, which are trained (or listed dropped), no group in two steps, no finished episode sampled
  again, and both ranks end on the same weights.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from trainer_fixtures import letter_config, steps_of

RUN_TIMEOUT_S = 300  # a launch takes about 20 s here (two processes' imports included)
STEPS, GROUPS, GROUP_SIZE, STALENESS = 3, 4, 4, 1
TASKS = [f"train-{i}" for i in range(4)]  # test/FirstLetter-v0's training split


def _digest(state: dict[str, torch.Tensor]) -> str:
    h = hashlib.sha256()
    for key in sorted(state):
        h.update(key.encode())
        h.update(state[key].detach().to("cpu", torch.float32).contiguous().numpy().tobytes())
    return h.hexdigest()


def _rank_main(config_path: str, out_dir: str, *flags: str) -> int:
    """One rank: train ``config_path`` (with ``--resume`` among ``flags``) and write ``OUT/rankR.json``."""
    from letter_env import register_test_env

    from envhub.trainer import fsdp
    from envhub.trainer.async_loop import AsyncTrainer
    from envhub.trainer.config import load_config

    register_test_env()

    class Counting(AsyncTrainer):
        steps_run = 0

        def train_step(self):
            self.steps_run += 1
            return super().train_step()

    trainer = Counting(load_config(Path(config_path), []), resume="--resume" in flags)
    try:
        trainer.run()
        weights = _digest(fsdp.full_state_dict(trainer.models.model, trainer.dist))
        engine = trainer.models.engine
        seen = {"rank": trainer.dist.rank, "world_size": trainer.dist.world_size, "steps_run": trainer.steps_run,
                "step": trainer.state.step, "cursor": trainer.state.cursor,
                "weight_version": trainer.state.weight_version, "engine_version": engine.wait_weights(timeout=60),
                "weights": weights, "engine_weights": _digest(engine.model.state_dict()),
                "owns_buffer": trainer.buffer is not None, "ran_producer": trainer._stopped is not None}
    finally:
        trainer.close()
        fsdp.shutdown_distributed()
    path = Path(out_dir) / f"rank{seen['rank']}.json"
    path.write_text(json.dumps(seen))
    return 0


# ---- the test -----------------------------------------------------------------------------------------

def _torchrun(config, out, *flags):
    out.mkdir(parents=True, exist_ok=True)
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                           __file__, str(config), str(out), *flags], capture_output=True, text=True,
                          timeout=RUN_TIMEOUT_S, cwd=out, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    return [json.loads((out / f"rank{r}.json").read_text()) for r in (0, 1)]


def _rows(path):
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _first_version(record):
    versions = [int(v) for v in record["versions"]["weight_versions"] if v is not None]
    return versions[0] if versions else None


@pytest.mark.slow
def test_two_ranks_share_one_buffer_train_the_same_steps_and_resume(tmp_path, scratch_model):
    from envhub.trainer import fsdp
    from envhub.trainer.async_rollouts import STEP_KEYS
    from envhub.trainer.sampling import TaskOrder

    run = tmp_path / "run"
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(letter_config(
        run, scratch_model, steps=STEPS, checkpoint_every=2, keep_checkpoints=STEPS,
        rollout={"mode": "async", "max_staleness": STALENESS, "groups_per_step": GROUPS, "group_size": GROUP_SIZE,
                 "concurrency": 4})))
    ranks = _torchrun(config, tmp_path / "out")

    # both ranks trained every step and ended on the same state and weights
    assert [r["rank"] for r in ranks] == [0, 1] and {r["world_size"] for r in ranks} == {2}
    for key in ("steps_run", "step", "cursor", "weight_version", "weights", "engine_weights"):
        assert ranks[0][key] == ranks[1][key], (key, ranks)
    assert ranks[0]["steps_run"] == ranks[0]["step"] == STEPS and ranks[0]["cursor"] == STEPS * GROUPS
    assert all(r["engine_version"] == r["weight_version"] for r in ranks)  # each engine got every push
    assert [r["owns_buffer"] for r in ranks] == [True, False] and [r["ran_producer"] for r in ranks] == [True, False]

    # steps.jsonl: one line per step (rank 0's), with the async figures
    lines = steps_of(run)
    assert [line["step"] for line in lines] == list(range(1, STEPS + 1))
    versions = {0: 0, **{line["step"]: int(line["weight_version"]) for line in lines}}  # after each step
    assert int(lines[-1]["weight_version"]) >= 1, "nothing trained: the weight comparison would prove little"

    # each step's batch: whole groups, split between the ranks, no sample on two ranks and none lost
    seen_groups: set[str] = set()
    trained_records: list[dict] = []
    for line in lines:
        folder = run / "rollouts" / f"step-{line['step']:06d}"
        assert sorted(p.name for p in folder.iterdir()) == ["trajectories.rank0.jsonl", "trajectories.rank1.jsonl"]
        shares = [_rows(folder / f"trajectories.rank{r}.jsonl") for r in (0, 1)]
        trained_records += shares[0] + shares[1]
        ids = [{rec["episode_id"] for rec in share} for share in shares]
        assert all(len(i) == len(s) for i, s in zip(ids, shares, strict=True))
        assert not ids[0] & ids[1], "a sample on two ranks"
        groups = [{rec["group_id"] for rec in share} for share in shares]
        assert [len(g) for g in groups] == [GROUPS // 2] * 2 and not groups[0] & groups[1]
        assert all(len(share) == len(g) * GROUP_SIZE for share, g in zip(shares, groups, strict=True))  # whole
        assert not (groups[0] | groups[1]) & seen_groups, "a group in two steps"
        seen_groups |= groups[0] | groups[1]
        batch = ids[0] | ids[1]
        assert set(line["trained_episodes"]) | set(line["untrained_episodes"]) == batch  # none lost
        assert not set(line["trained_episodes"]) & set(line["untrained_episodes"])
        assert line["attempted"] == GROUPS * GROUP_SIZE
        assert set(STEP_KEYS) <= set(line)
        # the figures are the whole batch's: both ranks' samples
        lags = {rec["episode_id"]: versions[line["step"] - 1] - _first_version(rec)
                for share in shares for rec in share if _first_version(rec) is not None}
        assert line["async_version_lag_max"] == max(lags.values())
        assert abs(line["async_version_lag_mean"] - sum(lags.values()) / len(lags)) < 1e-9
        assert all(lags[e] <= STALENESS for e in line["trained_episodes"])
        dropped = sum(1 for e, lag in lags.items() if lag > STALENESS)
        assert line["async_stale_dropped"] <= dropped

    # one buffer per run: one writer, each episode once, and admission over the run's groups. The buffer
    # is compacted after each checkpoint (what no checkpoint names goes; the trained are in the step dirs),
    # so what was sampled is the step dirs' records and the buffer's, an episode in both the same record.
    entries = _rows(run / "rollouts" / "buffer" / "entries.jsonl")
    assert len({row["entry"].rsplit("@", 1)[1] for row in entries}) == 1, "more than one process wrote the buffer"
    assert 0 < len(entries) < len(trained_records), "the buffer was not compacted"
    sampled = {rec["episode_id"]: rec for rec in trained_records}
    for row in entries:
        record = row["record"]
        assert sampled.setdefault(record["episode_id"], record) == record, "an episode sampled twice"
    assert all(e in sampled for line in lines for e in line["trained_episodes"])
    order = TaskOrder(TASKS, env_id="test/FirstLetter-v0", seed=0, group_size=GROUP_SIZE,
                      dist=fsdp.DistInfo(0, 1, 0, torch.device("cpu"), None))
    index = {order.plans(j, 1)[0].group_id: j for j in range(8 * GROUPS * STEPS)}
    started = {index[record["group_id"]] for record in sampled.values()}
    assert len(started) <= (STALENESS + STEPS + 1) * GROUPS
    for record in sampled.values():
        j, first = index[record["group_id"]], _first_version(record)
        gate = max(j // GROUPS - STALENESS, 0)  # steps trained before group j may start
        assert first is None or first >= versions[gate], (j, first, versions)
    assert {index[g] for g in seen_groups} <= started
    checkpoints = sorted((run / "checkpoints").glob("step-*"))
    assert checkpoints and all((c / "async.json").is_file() for c in checkpoints)

    # --resume with more steps: rank 0 takes up the final checkpoint's buffer, both ranks train on
    pending = json.loads((run / "checkpoints" / f"step-{STEPS:06d}" / "async.json").read_text())["groups"]
    assert pending, "the checkpoint holds no buffered group: the resume would take up nothing"
    more = tmp_path / "more.yaml"
    more.write_text(yaml.safe_dump({**yaml.safe_load(config.read_text()), "steps": STEPS + 2}))
    resumed = _torchrun(more, tmp_path / "out-resumed", "--resume")
    assert [r["steps_run"] for r in resumed] == [2, 2] and {r["step"] for r in resumed} == {STEPS + 2}
    assert resumed[0]["weights"] == resumed[1]["weights"] and resumed[0]["engine_weights"] == resumed[1]["engine_weights"]
    assert [r["owns_buffer"] for r in resumed] == [True, False]
    lines = steps_of(run)
    assert [line["step"] for line in lines] == list(range(1, STEPS + 3))
    trained_groups: list[str] = []
    for step in range(1, STEPS + 3):
        folder = run / "rollouts" / f"step-{step:06d}"
        trained_groups += sorted({rec["group_id"] for r in (0, 1) for rec in _rows(folder / f"trajectories.rank{r}.jsonl")})
    assert len(trained_groups) == len(set(trained_groups)) == (STEPS + 2) * GROUPS, "a group in two steps, or lost"
    dropped = {row["group"] for row in _rows(run / "rollouts" / "buffer" / "dropped.jsonl")}
    assert all(order.plans(g["index"], 1)[0].group_id in trained_groups or g["index"] in dropped for g in pending)
    entries = _rows(run / "rollouts" / "buffer" / "entries.jsonl")
    assert len({row["entry"].rsplit("@", 1)[1] for row in entries}) <= 2  # one writer per launch: rank 0
    for step in (STEPS + 1, STEPS + 2):
        folder = run / "rollouts" / f"step-{step:06d}"
        trained_records += [rec for r in (0, 1) for rec in _rows(folder / f"trajectories.rank{r}.jsonl")]
    sampled = {}
    for record in [*trained_records, *(row["record"] for row in entries)]:
        assert sampled.setdefault(record["episode_id"], record) == record, \
            "a finished episode sampled again after the resume"


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    sys.exit(_rank_main(*sys.argv[1:]))
