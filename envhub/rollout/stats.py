"""The interval arithmetic of a learning claim: a rate with its 95 % interval, and the paired
comparison of two evaluations of the same planned episodes.

* :func:`wilson`: the Wilson score interval of ``k`` successes in ``n`` (it stays inside [0, 1] and
  is not degenerate at 0 or n, unlike the normal approximation);
* :func:`paired`: two evals of the same episodes (same tasks, same seeds: the same episode ids), as
  wins, losses and ties of the second against the first, and the difference of their success
  rates with its 95 % interval. The pairing removes the task-difficulty variance that two
  independent intervals would carry; the interval is the Wald interval of a paired difference,
  d +- z * sqrt(wins + losses - (wins - losses)^2 / n) / n (as McNemar's test reads the discordant pairs);
* :func:`spread`: a benchmark's rounds as their median and range;
* :func:`task_group`: a task id without its trailing index (``comp-fraction-L1-343`` ->
  ``comp-fraction-L1``), for a per-kind breakdown of any env whose ids are numbered.
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Iterable, Mapping
from typing import Any

from envhub.types import Outcome, TrajectoryRecord

Z95 = 1.959963984540054
_INDEX = re.compile(r"-\d+$")


def wilson(k: int, n: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval of ``k`` successes in ``n`` trials ((0, 1) when n is 0)."""
    if n <= 0:
        return 0.0, 1.0
    if not 0 <= k <= n:
        raise ValueError(f"wilson: {k} successes of {n} trials")
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def paired(first: Mapping[str, bool], second: Mapping[str, bool], z: float = Z95) -> dict[str, Any]:
    """``second`` against ``first`` on the episode ids both have (success by id): ``n`` pairs, ``wins``
    (second succeeded where first failed), ``losses``, ``ties``, the rates, their difference and its
    interval. Ids in only one of them are counted in ``unpaired``, never compared."""
    shared = sorted(set(first) & set(second))
    n = len(shared)
    wins = sum(1 for i in shared if second[i] and not first[i])
    losses = sum(1 for i in shared if first[i] and not second[i])
    diff = (wins - losses) / n if n else 0.0
    half = z * math.sqrt(max(wins + losses - (wins - losses) ** 2 / n, 0.0)) / n if n else 1.0
    return {"n": n, "wins": wins, "losses": losses, "ties": n - wins - losses,
            "first_rate": sum(first[i] for i in shared) / n if n else 0.0,
            "second_rate": sum(second[i] for i in shared) / n if n else 0.0,
            "difference": diff, "interval": [max(-1.0, diff - half), min(1.0, diff + half)],
            "unpaired": len(set(first) ^ set(second))}


def spread(values: list[float]) -> dict[str, Any]:
    """The median of ``values`` with their range: how far apart a benchmark's rounds were."""
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "values": values}


def task_group(task_id: str) -> str:
    """``task_id`` without a trailing ``-<number>``: the kind (and level) of a numbered task."""
    return _INDEX.sub("", task_id)


def by_group(records: Iterable[TrajectoryRecord]) -> dict[str, dict[str, Any]]:
    """Strict success per task group (:func:`task_group`) of eval records: n, successes, rate, interval."""
    counts: dict[str, list[int]] = {}
    for r in records:
        tally = counts.setdefault(task_group(r.task_id), [0, 0])
        tally[0] += 1
        tally[1] += r.outcome is Outcome.SUCCESS
    return {g: {"n": n, "successes": k, "rate": k / n, "interval": list(wilson(k, n))}
            for g, (n, k) in sorted(counts.items())}
