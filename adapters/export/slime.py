"""slime and Miles export: one ``Sample`` per episode, as ``Sample.to_dict()`` writes it.

Both projects (Miles is a fork of slime) train from ``slime.utils.types.Sample`` /
``miles.utils.types.Sample``: ``tokens`` is prompt + response, ``response_length`` counts the
response tokens, and ``loss_mask`` / ``rollout_log_probs`` cover only the response (their
lengths equal ``response_length``). ``status`` is one of ``completed``, ``truncated``,
``aborted`` or ``failed``. Each line of ``samples.jsonl`` loads with ``Sample.from_dict``;
``rollout_0.pt`` holds the same samples the way slime and Miles load recorded rollouts
(``--load-debug-rollout-data DIR/rollout_{rollout_id}.pt``: ``torch.load(path)["samples"]``, each
through ``Sample.from_dict``; written when torch is installed); ``prompts.jsonl`` is the run's
tasks as a prompt dataset for the online generate functions.

Samples are grouped: each group's samples are contiguous and in sample order, and every group is
whole, because slime and Miles find a group by position when they normalize rewards
(``reshape(-1, n_samples_per_prompt)``; a batch whose size does not fit is normalized as one
group). So infra failures are never dropped here: they are kept as ``remove_sample`` samples
(slime zeroes their loss and keeps the batch shape) whose reward is their group's mean, which
leaves the group's baseline as it would be without them; unfinished groups of an interrupted run
are left out whole.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from envhub.types import Outcome, OutcomeClass, TrajectoryRecord

from .common import (
    atomic_path,
    check_token_view,
    envhub_metadata,
    group_indices,
    read_jsonl_rows,
    task_prompt_messages,
    trainable_mask,
    write_jsonl_atomic,
)

#: envhub outcome -> slime ``Sample.Status`` value.
STATUS = {
    Outcome.SUCCESS: "completed",
    Outcome.WRONG_ANSWER: "completed",
    Outcome.FORMAT_ERROR: "completed",
    Outcome.BUDGET_EXHAUSTED: "truncated",
    Outcome.CONTEXT_OVERFLOW: "truncated",
    Outcome.ENGINE_ERROR: "aborted",
    Outcome.ENV_ERROR: "failed",
    Outcome.VERIFIER_ERROR: "failed",
}


def sample_status(outcome: Outcome) -> str:
    """Policy failures are *completed* samples with reward 0: the model's doing, so trainable.

    Truncations keep slime's ``truncated``; a model-server failure is ``aborted`` (slime's word
    for a request the engine gave up); env or verifier crashes are ``failed``.
    """
    return STATUS[outcome]


def to_sample_dict(rec: TrajectoryRecord, *, group_index: int, index: int, baseline: float = 0.0,
                   prompt_ids: list[int] | None = None) -> dict[str, Any]:
    """One record as a ``Sample`` dict. An infra failure is a ``remove_sample`` (slime zeroes its
    loss and keeps it in the batch) whose reward is ``baseline``, the mean reward of its group's
    other samples, so the group's reward mean -- GRPO's baseline -- is the same as without it.
    ``prompt_ids`` stand in for the prompt of an infra failure recorded without tokens (its
    group's prompt; the response is then empty)."""
    check_token_view(rec)
    infra = rec.outcome_class is OutcomeClass.INFRA_FAILURE
    prompt = list(rec.prompt_ids) if rec.prompt_ids or prompt_ids is None else list(prompt_ids)
    return {
        "group_index": group_index,
        "index": index,
        "prompt": task_prompt_messages(rec),
        "tokens": prompt + list(rec.response_ids),
        "response": "".join(t.action_text for t in rec.turns),
        "response_length": len(rec.response_ids),
        "label": None,  # envhub keeps answers hidden; the reward is already computed
        "reward": float(baseline if infra else rec.reward),
        "loss_mask": trainable_mask(rec),  # all 0 for an infra failure
        "weight_versions": [v for v in rec.versions.weight_versions if v is not None],
        "rollout_log_probs": list(rec.response_logprobs),
        "remove_sample": infra,  # never a gradient from our failures
        "status": sample_status(rec.outcome),
        "metadata": {"envhub": {**envhub_metadata(rec), "reward": float(rec.reward)}},
    }


def prompt_rows(records: Sequence[TrajectoryRecord]) -> list[dict[str, Any]]:
    """A prompt dataset (``--input-key prompt --metadata-key metadata``) of the run's tasks, for
    training online with :func:`envhub.adapters.slime.generate` / :mod:`envhub.adapters.miles`."""
    seen: set[tuple[str, str]] = set()
    rows = []
    for rec in records:
        if (rec.env_id, rec.task_id) not in seen:
            seen.add((rec.env_id, rec.task_id))
            rows.append({"prompt": task_prompt_messages(rec), "label": "",
                         "metadata": {"envhub": {"env_id": rec.env_id, "task_id": rec.task_id}}})
    return rows


def sample_rows(records: Sequence[TrajectoryRecord]) -> list[dict[str, Any]]:
    """``Sample`` dicts of grouped records (each group contiguous, in sample order: slime and Miles
    normalize rewards by position, ``reshape(-1, n_samples_per_prompt)``)."""
    groups = group_indices(records)
    members: dict[str, list[TrajectoryRecord]] = {}
    for rec in records:
        members.setdefault(rec.group_id, []).append(rec)
    rows = []
    for i, rec in enumerate(records):
        group = members[rec.group_id]
        valid = [r.reward for r in group if r.outcome_class is not OutcomeClass.INFRA_FAILURE]
        prompt = next((list(r.prompt_ids) for r in group if r.prompt_ids), None)
        rows.append(to_sample_dict(rec, group_index=groups[rec.group_id], index=i, prompt_ids=prompt,
                                   baseline=sum(valid) / len(valid) if valid else 0.0))
    return rows


def export_samples(records: Sequence[TrajectoryRecord], out: Path) -> list[Path]:
    rows = sample_rows(records)
    written = [write_jsonl_atomic(out / "samples.jsonl", rows),
               write_jsonl_atomic(out / "prompts.jsonl", prompt_rows(records))]
    try:
        import torch
    except ImportError:  # the JSONL carries the same samples
        return written
    with atomic_path(out / "rollout_0.pt") as tmp:
        torch.save({"rollout_id": 0, "samples": rows}, tmp)
    return [*written, out / "rollout_0.pt"]


def read_samples(out: Path) -> list[dict[str, Any]]:
    rows = []
    for row in read_jsonl_rows(out / "samples.jsonl"):
        meta = row["metadata"]["envhub"]
        n = row["response_length"]
        split = len(row["tokens"]) - n
        rows.append({
            **{k: meta[k] for k in ("episode_id", "task_id", "group_id", "sample_index", "outcome")},
            "prompt_ids": row["tokens"][:split], "response_ids": row["tokens"][split:],
            "response_mask": row["loss_mask"], "response_logprobs": row["rollout_log_probs"],
            "reward": meta["reward"],  # the recorded one (an infra sample's ``reward`` is its group's mean)
        })
    return rows
