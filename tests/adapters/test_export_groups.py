"""Every exporter writes GRPO groups whole and contiguous, in sample order, from a real run that was
played concurrently, interrupted and resumed (so the file holds each group's samples scattered).

slime and Miles find a group by position: ``_post_process_rewards`` in slime/ray/rollout.py
reshapes the batch's rewards to ``(-1, n_samples_per_prompt)`` when the batch has exactly
``n_samples_per_prompt * rollout_batch_size`` samples, and otherwise normalizes the whole batch as
one group; ``_convert_samples_to_train_data`` zeroes the loss mask of a ``remove_sample`` and keeps
it. :func:`slime_post_process_rewards` restates that documented logic (slime does not install
without GPUs) and runs on the exported samples.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest
import torch
from token_runs import smollm2_tokenizer

from envhub.adapters.export import FORMATS, export_run, load_records, read_export
from envhub.errors import EngineError
from envhub.types import OutcomeClass

ENV_ID = "envhub/Computation-v0"
GROUP = 3
EPISODES = 12
INFRA = {"env_error", "verifier_error", "engine_error"}


def slime_post_process_rewards(raw: list[float], n_samples_per_prompt: int, rollout_batch_size: int) -> list[float]:
    """slime's GRPO reward normalization (``rewards_normalization`` and ``grpo_std_normalization`` on)."""
    rewards = torch.tensor(raw, dtype=torch.float)
    if rewards.shape[-1] == n_samples_per_prompt * rollout_batch_size:
        rewards = rewards.reshape(-1, n_samples_per_prompt)
    else:  # "when samples count are not equal in each group"
        rewards = rewards.view(-1, rewards.shape[-1])
    rewards = rewards - rewards.mean(dim=-1, keepdim=True)
    rewards = rewards / (rewards.std(dim=-1, keepdim=True) + 1e-6)
    return rewards.flatten().tolist()


class _StaggeredEngine:
    """The scripted engine behind a per-call delay (outside its lock), so a group's samples finish
    out of order and interleave with the next group's."""

    def __init__(self, inner: Any, delay: Any) -> None:
        self.inner, self.delay = inner, delay

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def generate(self, prompt_ids: list[int], params: Any) -> Any:
        time.sleep(self.delay(prompt_ids))
        return self.inner.generate(prompt_ids, params)


def _play(out: Path, *, interrupt: bool) -> None:
    """Each task's k-th call: a success, a wrong answer or an engine failure (infra), by k mod 3;
    with ``interrupt``, Ctrl-C lands once two groups are half on disk."""
    from envhub.adapters.engines import SamplingParams
    from envhub.adapters.engines.scripted import ScriptedEngine
    from envhub.adapters.model_policy import ModelPolicy
    from envhub.registry import make
    from envhub.rollout.runner import plan_episodes, run_rollouts

    tok = smollm2_tokenizer()
    env = make(ENV_ID, split="train")
    try:
        plans = plan_episodes(ENV_ID, env.tasks.task_ids("train"), episodes=EPISODES, group_size=GROUP)
        tasks = {p.task_id: env.tasks.get(p.task_id) for p in plans}
        gold = {tid: env.gold_actions(t)[-1].text for tid, t in tasks.items()}
    finally:
        env.close()
    calls: Counter[str] = Counter()
    lock = threading.Lock()
    local = threading.local()  # the call's k, from the delay to the reply (one episode's thread)

    def task_of(prompt: str) -> str:
        return next(tid for tid, t in tasks.items() if t.prompt in prompt)

    def nth_call(prompt_ids: list[int]) -> float:
        tid = task_of(tok.decode(prompt_ids))
        with lock:
            calls[tid] += 1
            local.k = (calls[tid] - 1) % GROUP
        return 0.15 * local.k

    def respond(prompt: str) -> str:
        tid, k = task_of(prompt), local.k
        if k == 2:
            raise EngineError("scripted engine: simulated server failure")
        return gold[tid] if k == 0 else '<tool_call>{"name": "answer", "arguments": {"answer": "0"}}</tool_call>'

    engine = _StaggeredEngine(ScriptedEngine(tok, respond, logprob=-0.25), nth_call)
    policy = ModelPolicy(engine, tok, params=SamplingParams(max_new_tokens=96, temperature=1.0),
                         name="scripted-model", model_id="scripted", tokenizer_id="smollm2-135m")
    stored: list[Any] = []

    def on_episode(record: Any) -> None:
        partial = [g for g, n in Counter(r.group_id for r in stored).items() if n < GROUP]
        if interrupt and len(partial) >= 2:
            raise KeyboardInterrupt  # what Ctrl-C does: the episodes in flight are not kept
        stored.append(record)

    run_rollouts(ENV_ID, policy, out_dir=out, episodes=EPISODES, group_size=GROUP, concurrency=4,
                 on_episode=on_episode)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(a copy of the interrupted run, the same run resumed to the end)."""
    import shutil

    out = tmp_path_factory.mktemp("grouped") / "run"
    with pytest.raises(KeyboardInterrupt):
        _play(out, interrupt=True)
    interrupted = out.parent / "interrupted"
    shutil.copytree(out, interrupted)
    _play(out, interrupt=False)  # resume: the missing episodes are appended at the end
    return interrupted, out


def _groups_in_order(rows: list[dict[str, Any]]) -> list[tuple[str, list[int]]]:
    """[(group_id, [sample_index, ...])] for each run of equal group ids in export order."""
    return [(g, [r["sample_index"] for r in rs]) for g, rs in itertools.groupby(rows, key=lambda r: r["group_id"])]


def _expected_members(records: list[Any], fmt: str, include_infra: bool) -> dict[str, list[int]]:
    keep_infra = include_infra or FORMATS[fmt].infra_in_place
    out: dict[str, list[int]] = defaultdict(list)
    for rec in sorted(records, key=lambda r: r.sample_index):
        if keep_infra or rec.outcome_class is not OutcomeClass.INFRA_FAILURE:
            out[rec.group_id].append(rec.sample_index)
    return dict(out)


def test_the_run_is_scattered_interrupted_and_mixed(runs: tuple[Path, Path]) -> None:
    interrupted, resumed = runs
    records = load_records(resumed)
    assert len(records) == EPISODES and len(load_records(interrupted)) < EPISODES
    file_order = [r.group_id for r in records]
    assert len(_groups_in_order([{"group_id": g, "sample_index": 0} for g in file_order])) > EPISODES // GROUP
    assert {r.outcome_class for r in records} >= {OutcomeClass.SUCCESS, OutcomeClass.INFRA_FAILURE}


@pytest.mark.parametrize("fmt", sorted(FORMATS))
@pytest.mark.parametrize("include_infra", [False, True])
def test_every_export_holds_whole_contiguous_groups_in_sample_order(runs: tuple[Path, Path], tmp_path: Path,
                                                                    fmt: str, include_infra: bool) -> None:
    for run in runs:
        records = load_records(run)
        by_group: dict[str, list[Any]] = defaultdict(list)
        for rec in records:
            by_group[rec.group_id].append(rec)
        finished = {g: rs for g, rs in by_group.items() if len(rs) == GROUP}
        # an interrupted run has written no report.json yet: the export is told the group size
        size = GROUP if run.name == "interrupted" else None
        result = export_run(run, fmt, tmp_path / run.name, include_infra=include_infra, group_size=size)
        order = _groups_in_order(read_export(tmp_path / run.name, fmt))
        assert len({g for g, _ in order}) == len(order), "a group is split in the export"
        expected = _expected_members([r for rs in finished.values() for r in rs], fmt, include_infra)
        assert dict(order) == expected  # whole, each in sample order, unfinished groups left out
        assert result.incomplete_groups == sum(len(rs) for g, rs in by_group.items() if g not in finished)
    assert result.incomplete_groups == 0 and len(order) == EPISODES // GROUP  # the resumed run: all of it


@pytest.mark.parametrize("fmt", ["slime", "miles"])
def test_slimes_positional_normalization_sees_each_group_and_an_unbiased_baseline(
        runs: tuple[Path, Path], tmp_path: Path, fmt: str) -> None:
    import json

    _, resumed = runs
    export_run(resumed, fmt, tmp_path)  # the default: --exclude-infra
    samples = [json.loads(line) for line in (tmp_path / "samples.jsonl").read_text().splitlines()]
    records = {r.episode_id: r for r in load_records(resumed)}
    n_groups = EPISODES // GROUP
    assert len(samples) == GROUP * n_groups  # infra samples stay, so the batch has slime's shape
    advantages = slime_post_process_rewards([s["reward"] for s in samples], GROUP, n_groups)
    for row in range(n_groups):
        block = samples[row * GROUP:(row + 1) * GROUP]
        assert len({s["metadata"]["envhub"]["group_id"] for s in block}) == 1  # one reshape row = one group
        assert [s["metadata"]["envhub"]["sample_index"] for s in block] == list(range(GROUP))
        assert [s["group_index"] for s in block] == [row] * GROUP
        recs = [records[s["metadata"]["envhub"]["episode_id"]] for s in block]
        valid = [r.reward for r in recs if r.outcome_class is not OutcomeClass.INFRA_FAILURE]
        mean = sum(s["reward"] for s in block) / GROUP
        assert mean == pytest.approx(sum(valid) / len(valid) if valid else 0.0)  # our failures move no baseline
        for s, rec, adv in zip(block, recs, advantages[row * GROUP:(row + 1) * GROUP], strict=True):
            infra = rec.outcome.value in INFRA
            assert s["remove_sample"] is infra and (not infra or set(s["loss_mask"]) <= {0})
            assert s["metadata"]["envhub"]["reward"] == rec.reward
            if infra:
                assert adv == pytest.approx(0.0, abs=1e-4)
            elif rec.reward > mean:
                assert adv > 0  # a success beats its own group's baseline, not the batch's
