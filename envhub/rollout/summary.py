"""Run reports: outcome counts and the rates that matter, computed from trajectory records.

The headline is ``strict_success_rate = success / attempted``: infrastructure failures stay in
the denominator, so a flaky sandbox can never make a model look better than it is.
``success_rate_excluding_infra`` is shown beside it, never instead of it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

from envhub.types import Outcome, OutcomeClass

#: What :func:`slim` keeps of a record: everything a summary, a table row or a per-success cost reads.
SLIM_KEYS = ("episode_id", "task_id", "env_id", "group_id", "split", "outcome", "outcome_detail", "reward",
             "num_turns", "metrics", "policy")


def token_counts(rec: dict[str, Any]) -> tuple[int, int]:
    """(prompt + response tokens, sampled tokens) of a full record or of one :func:`slim` made."""
    if "token_counts" in rec:
        total, sampled = rec["token_counts"]
        return int(total), int(sampled)
    return (len(rec.get("prompt_ids", [])) + len(rec.get("response_ids", [])),
            int(sum(rec.get("response_mask", []))))


def slim(rec: dict[str, Any]) -> dict[str, Any]:
    """``rec`` without its transcript and token lists (their counts kept as ``token_counts``):
    :func:`summarize` gives the same numbers for it, at a small fraction of the memory."""
    out = {k: rec[k] for k in SLIM_KEYS if k in rec}
    out["token_counts"] = list(token_counts(rec))
    return out


def summarize(records: Iterable[dict[str, Any]], *, wall_seconds: float = 0.0) -> dict[str, Any]:
    recs = list(records)
    attempted = len(recs)
    by_outcome = Counter(r["outcome"] for r in recs)
    by_class = Counter(Outcome(r["outcome"]).outcome_class.value for r in recs)
    successes = by_outcome.get(Outcome.SUCCESS.value, 0)
    infra = by_class.get(OutcomeClass.INFRA_FAILURE.value, 0)
    counts = [token_counts(r) for r in recs]
    tokens = sum(t for t, _ in counts)
    sampled = sum(s for _, s in counts)
    tool_calls = sum(r.get("metrics", {}).get("tool_calls", 0) for r in recs)
    rewards = [r.get("reward", 0.0) for r in recs]
    by_task_kind: dict[str, Counter] = {}
    for r in recs:
        by_task_kind.setdefault(r.get("env_id", "?"), Counter())[r["outcome"]] += 1
    return {
        "attempted": attempted,
        "by_outcome": {o.value: by_outcome.get(o.value, 0) for o in Outcome},
        "by_class": {c.value: by_class.get(c.value, 0) for c in OutcomeClass},
        "strict_success_rate": successes / attempted if attempted else 0.0,
        "success_rate_excluding_infra": successes / (attempted - infra) if attempted > infra else 0.0,
        "mean_reward": sum(rewards) / attempted if attempted else 0.0,
        "tokens": tokens,
        "sampled_tokens": sampled,
        "tool_calls": tool_calls,
        "wall_seconds": wall_seconds,
        "episodes_per_second": attempted / wall_seconds if wall_seconds else 0.0,
        "tokens_per_success": tokens / successes if successes else None,
        "tool_calls_per_success": tool_calls / successes if successes else None,
        "by_env": {k: dict(v) for k, v in sorted(by_task_kind.items())},
    }


def render_table(report: dict[str, Any]) -> Any:
    """A rich Table of the report, for terminals."""
    from rich.table import Table

    table = Table(title=f"{report['attempted']} episodes", show_header=True)
    table.add_column("outcome")
    table.add_column("class")
    table.add_column("count", justify="right")
    for outcome in Outcome:
        n = report["by_outcome"][outcome.value]
        if n:
            table.add_row(outcome.value, outcome.outcome_class.value, str(n))
    table.add_section()
    table.add_row("strict success rate", "success / attempted", f"{report['strict_success_rate']:.3f}")
    table.add_row("success excl. infra", "", f"{report['success_rate_excluding_infra']:.3f}")
    table.add_row("mean reward", "", f"{report['mean_reward']:.3f}")
    table.add_row("tool calls", "", str(report["tool_calls"]))
    table.add_row("wall seconds", "", f"{report['wall_seconds']:.1f}")
    return table
