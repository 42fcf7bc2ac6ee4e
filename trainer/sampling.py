"""Where a step's groups come from (stage 1 of a step) and which of them carry a learning signal:

* :func:`training_tasks`: the tasks the run draws from -- the split's, or the ``envhub profile``
  curriculum's -- checked before any model loads (:func:`check_prompt` once it has);
* :class:`TaskOrder`: the data cursor's task order, a seeded shuffle of those tasks epoch after
  epoch. Group ``j`` of the run is the ``j``-th of it, planned by
  :func:`envhub.rollout.episodes.plan_group` (the one recipe of episode ids), so a resumed run draws
  exactly the tasks, episode ids and sampling seeds the uninterrupted one would have;
* :func:`informative_groups`: the groups whose trained members' rewards differ;
* :func:`dynamic_sampling`: more groups from the task order while a step has too few informative
  ones.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from envhub.rollout.episodes import EpisodePlan, plan_group
from envhub.trainer import fsdp, preflight
from envhub.trainer.config import AlgorithmConfig, TrainConfig
from envhub.trainer.samples import AUDIT_FAILED, STALE
from envhub.types import TrajectoryRecord

if TYPE_CHECKING:
    from envhub.adapters.model_policy import ModelPolicy
    from envhub.env import Env

#: ``draw(offset, count)``: the records of ``count`` more groups, ``offset`` groups past the step's
#: first in the task order, and their audited classes.
Draw = Callable[[int, int], tuple[list[TrajectoryRecord], list[str]]]


def training_tasks(config: TrainConfig, env_factory: Callable[[], Env]) -> list[str]:
    """The task ids the run draws from: those of ``env.curriculum`` in the training split when it is
    set, else the split's. Before any model loads: PreflightError (one line) when the env cannot be
    made or its split listed, and when there are no tasks."""
    env = preflight.open_env(config, env_factory)
    try:
        split_ids = preflight.split_tasks(config, env)
        curriculum: list[str] = []
        if config.env.curriculum is not None:
            listed = json.loads(Path(config.env.curriculum).read_text(encoding="utf-8"))
            known = set(split_ids)
            curriculum = [t for t in listed.get("task_ids", []) if t in known]
        problems = preflight.check_tasks(config, split_ids, curriculum)
    finally:
        env.close()
    preflight.raise_if(problems)
    return curriculum or split_ids


def check_prompt(config: TrainConfig, env_factory: Callable[[], Env], policy: ModelPolicy) -> None:
    """PreflightError when the policy cannot render a turn of the env (its model is loaded)."""
    preflight.raise_if(preflight.check_rendering(env_factory(), policy.render_prompt, policy.encode,
                                                 policy.max_context, config.sampling.max_new_tokens))


class TaskOrder:
    """The run's groups in order: group ``j`` samples the ``j``-th task of ``tasks`` shuffled epoch
    by epoch (seeded by the env id, the run's seed and the epoch). This rank plans every
    ``world_size``-th group, whole groups only (advantages are per group)."""

    def __init__(self, tasks: list[str], *, env_id: str, seed: int, group_size: int,
                 dist: fsdp.DistInfo) -> None:
        self.tasks, self.env_id, self.seed = tasks, env_id, seed
        self.group_size, self.dist = group_size, dist
        self._index: dict[str, int] = {}  # group id -> its place in the task order

    def task_of_group(self, j: int) -> str:
        epoch, i = divmod(j, len(self.tasks))
        order = list(self.tasks)
        random.Random(f"{self.env_id}/{self.seed}/{epoch}").shuffle(order)
        return order[i]

    def plans(self, start: int, count: int) -> list[EpisodePlan]:
        """This rank's episodes of the ``count`` groups from group ``start`` of the task order."""
        plans: list[EpisodePlan] = []
        for j in range(start + self.dist.rank, start + count, self.dist.world_size):
            group = plan_group(self.env_id, self.task_of_group(j), j, seed=self.seed,
                               group_size=self.group_size, stream="train")
            self._index.update((plan.group_id, j) for plan in group)
            plans += group
        return plans

    def informative(self, records: list[TrajectoryRecord], classes: list[str],
                    cfg: AlgorithmConfig) -> list[str]:
        """The informative group ids (:func:`informative_groups`) over every rank, in the task
        order."""
        mine = informative_groups(records, classes, cfg)
        ranked = fsdp.all_gather_lists([f"{self._index[g]:012d} {g}" for g in mine], self.dist)
        return [item.split(" ", 1)[1] for item in sorted(ranked)]


def informative_groups(records: Sequence[TrajectoryRecord], classes: Sequence[str],
                       cfg: AlgorithmConfig) -> list[str]:
    """The group ids of ``records`` (in their order) that carry a learning signal: at least two
    trained members (outcome class not excluded, audit passed, not stale) whose rewards differ."""
    rewards: dict[str, set[float]] = {}
    members: dict[str, int] = {}
    excluded = {*cfg.exclude_classes, AUDIT_FAILED, STALE}
    for record, cls in zip(records, classes, strict=True):
        rewards.setdefault(record.group_id, set())
        if cls not in excluded:
            rewards[record.group_id].add(float(record.reward))
            members[record.group_id] = members.get(record.group_id, 0) + 1
    return [g for g, seen in rewards.items() if members.get(g, 0) >= 2 and len(seen) > 1]


def dynamic_sampling(records: list[TrajectoryRecord], classes: list[str], config: TrainConfig,
                     order: TaskOrder,
                     draw: Draw) -> tuple[list[TrajectoryRecord], list[str], dict[str, int]]:
    """Dynamic sampling (DAPO; veRL's ``filter_groups``): while fewer than ``groups_per_step``
    groups are informative (:meth:`TaskOrder.informative`, over every rank), ``draw`` more groups
    from the task order -- as many as the informative rate so far says are needed, at most
    ``groups_per_step`` a round and ``max_extra_rounds`` rounds. Informative groups past the first
    ``groups_per_step`` are left untrained, so the step's batch is the same size whenever it can
    be. Returns the records to select from, their classes and the counts for ``steps.jsonl``."""
    r = config.rollout
    wanted, drawn, rounds = r.groups_per_step, r.groups_per_step, 0
    informative = order.informative(records, classes, config.algorithm)
    while r.dynamic_sampling and len(informative) < wanted and rounds < r.max_extra_rounds:
        rate = len(informative) / drawn
        more = int(min(wanted, -(-(wanted - len(informative)) // rate) if rate else wanted))
        extra, extra_classes = draw(drawn, more)
        records, classes = records + extra, classes + extra_classes
        drawn, rounds = drawn + more, rounds + 1
        informative = order.informative(records, classes, config.algorithm)
    surplus = set(informative[wanted:])
    kept = [i for i, record in enumerate(records) if record.group_id not in surplus]
    counts = {"groups_drawn": drawn, "sampling_rounds": rounds,
              "informative_groups": len(informative), "surplus_groups": len(surplus)}
    return [records[i] for i in kept], [classes[i] for i in kept], counts
