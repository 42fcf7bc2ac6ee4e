"""From a step's trajectory records to its training samples (stages 3 and 4 of a step):

* :func:`audit_trajectory`: the token-record invariants of one trajectory, as ``envhub audit`` checks
  them, plus the trainer's own (its chat template, its context);
* :func:`training_samples`: infra outcomes and audit failures out, zero-variance groups dropped,
  group-relative advantages (:mod:`envhub.trainer.grpo`), as :class:`~envhub.trainer.batch.TrainingSample` s.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from envhub.adapters.audit import check_record
from envhub.trainer import grpo
from envhub.trainer.batch import TrainingSample
from envhub.trainer.config import AlgorithmConfig
from envhub.types import TrajectoryRecord

#: The class of a record whose trajectory failed the token audit: never trained.
AUDIT_FAILED = "audit_failed"
#: The class of an async sample more weight versions behind the trainer than ``rollout.max_staleness``
#: with ``stale_samples: drop``: never trained (:mod:`envhub.trainer.async_rollouts`).
STALE = "stale"


def audit_trajectory(record: TrajectoryRecord, tokenizer: Any, *, chat_template_hash: str | None,
                     max_context: int) -> list[str]:
    """The audit's problems with one trajectory record (none: it may enter a batch): the token-record
    invariants, plus: recorded with ``chat_template_hash`` and no longer than ``max_context``."""
    problems = [f"{i.check}: {i.detail}" for i in check_record(record, tokenizer)]
    if record.versions.chat_template_hash != chat_template_hash:
        problems.append("chat template: recorded with another chat template than the trainer's")
    if len(record.prompt_ids) + len(record.response_ids) > max_context:
        problems.append("length: longer than rollout.max_context")
    return problems


def training_samples(records: Sequence[TrajectoryRecord], classes: Sequence[str], cfg: AlgorithmConfig, *,
                     weight_version: str) -> tuple[list[TrainingSample], dict[str, Any]]:
    """The samples of ``records`` (each of outcome class ``classes[i]``, :data:`AUDIT_FAILED` or
    :data:`STALE`) and the selection's statistics (see :func:`envhub.trainer.grpo.select_samples`), with
    the audit's drops and the weight-version lag of the samples behind ``weight_version``."""
    dropped, lag = list(classes).count(AUDIT_FAILED), 0
    for record in records:
        versions = [int(v) for v in record.versions.weight_versions if v is not None]
        if versions:
            lag = max(lag, int(weight_version) - min(versions))
    if not records:
        return [], {"audit_dropped": 0, "kept": 0}
    groups = {g: i for i, g in enumerate(dict.fromkeys(r.group_id for r in records))}
    rewards = torch.tensor([float(r.reward) for r in records], device="cpu")  # host-side bookkeeping
    index = torch.tensor([groups[r.group_id] for r in records], device="cpu")
    truncated = [r.outcome.is_truncation for r in records]
    keep, weight, stats = grpo.select_samples(
        list(classes), rewards, index, truncated, exclude_classes=(*cfg.exclude_classes, AUDIT_FAILED, STALE),
        drop_zero_variance=cfg.drop_zero_variance, mask_truncated=cfg.mask_truncated)
    kept = keep.nonzero().flatten().tolist()
    advantages = grpo.group_advantages(rewards[kept], index[kept], std_normalize=cfg.std_normalize) \
        if kept else torch.zeros(0, device="cpu")
    samples = []
    for i, advantage in zip(kept, advantages.tolist(), strict=True):
        r = records[i]
        if sum(r.response_mask) > 0:
            samples.append(TrainingSample(r.episode_id, r.prompt_ids, r.response_ids, r.response_mask,
                                          r.response_logprobs, float(advantage), float(weight[i]), r.group_id))
    return samples, {**stats, "audit_dropped": dropped, "weight_version_lag": lag}
