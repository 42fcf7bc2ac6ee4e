"""Run reports: outcome counts and the rates that matter, computed from trajectory records.

The headline is ``strict_success_rate = success / attempted``: infrastructure failures stay in
the denominator, so a flaky sandbox can never make a model look better than it is.
``success_rate_excluding_infra`` is shown beside it, never instead of it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

from envhub.types import Outcome, OutcomeClass, TrajectoryRecord


def token_counts(rec: TrajectoryRecord) -> tuple[int, int]:
    """(prompt + response tokens, sampled tokens) of a record."""
    return len(rec.prompt_ids) + len(rec.response_ids), sum(rec.response_mask)


class Tally:
    """The running counts of :func:`summarize`, one record at a time: a reader that cannot hold
    every record (a long training run's) adds each as it reads it."""

    def __init__(self) -> None:
        self.by_outcome: Counter[Outcome] = Counter()
        self.by_env: dict[str, Counter[str]] = {}
        self.tokens = 0
        self.sampled_tokens = 0
        self.tool_calls = 0
        self.rewards: list[float] = []
        #: wall seconds summed over the episodes
        self.episode_seconds = 0.0

    def add(self, rec: TrajectoryRecord) -> None:
        self.by_outcome[rec.outcome] += 1
        self.by_env.setdefault(rec.env_id, Counter())[rec.outcome.value] += 1
        tokens, sampled = token_counts(rec)
        self.tokens += tokens
        self.sampled_tokens += sampled
        self.tool_calls += rec.metrics.tool_calls
        self.rewards.append(rec.reward)
        self.episode_seconds += rec.metrics.wall_seconds

    def summary(self, *, wall_seconds: float = 0.0) -> dict[str, Any]:
        attempted = len(self.rewards)
        by_class = Counter({c: 0 for c in OutcomeClass})
        for outcome, n in self.by_outcome.items():
            by_class[outcome.outcome_class] += n
        successes = self.by_outcome[Outcome.SUCCESS]
        infra = by_class[OutcomeClass.INFRA_FAILURE]
        return {
            "attempted": attempted,
            "by_outcome": {o.value: self.by_outcome[o] for o in Outcome},
            "by_class": {c.value: by_class[c] for c in OutcomeClass},
            "strict_success_rate": successes / attempted if attempted else 0.0,
            "success_rate_excluding_infra": successes / (attempted - infra) if attempted > infra else 0.0,
            "mean_reward": sum(self.rewards) / attempted if attempted else 0.0,
            "tokens": self.tokens,
            "sampled_tokens": self.sampled_tokens,
            "tool_calls": self.tool_calls,
            "wall_seconds": wall_seconds,
            "episodes_per_second": attempted / wall_seconds if wall_seconds else 0.0,
            "tokens_per_success": self.tokens / successes if successes else None,
            "tool_calls_per_success": self.tool_calls / successes if successes else None,
            "by_env": {k: dict(v) for k, v in sorted(self.by_env.items())},
        }


def tally(records: Iterable[TrajectoryRecord]) -> Tally:
    counts = Tally()
    for rec in records:
        counts.add(rec)
    return counts


def summarize(records: Iterable[TrajectoryRecord], *, wall_seconds: float = 0.0) -> dict[str, Any]:
    return tally(records).summary(wall_seconds=wall_seconds)


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
