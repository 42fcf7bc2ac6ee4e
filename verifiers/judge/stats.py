"""How far to trust a judge: agreement with labels, its interval, and the judge's agreement with itself.

Binary agreement (label good/bad against the judge's verdict good/bad), over ``n`` cases:

* :func:`confusion`: tp (good, called good), fp (bad, called good), fn (good, called bad), tn;
  agreement po = (tp + tn) / n, base rate = (tp + fn) / n, judge rate = (tp + fp) / n,
  precision = tp / (tp + fp), recall = tp / (tp + fn), specificity = tn / (tn + fp) (None at 0 / 0).
* :func:`cohen_kappa`: kappa = (po - pe) / (1 - pe), pe = base * judge + (1 - base) * (1 - judge).
  With cells p_ij (row i the label, column j the verdict) and margins p_i. (label), p_.j (verdict),
  the large-sample variance of Fleiss, Cohen & Everitt (1969) is
  var = (A + B - C) / (n (1 - pe)^2), A = sum_i p_ii (1 - (p_i. + p_.i)(1 - kappa))^2,
  B = (1 - kappa)^2 sum_{i != j} p_ij (p_.i + p_j.)^2, C = (kappa - pe (1 - kappa))^2;
  the 95 % interval is kappa +- Z95 sqrt(var), clipped to [-1, 1]. pe == 1 (one class on both
  sides) leaves kappa undefined: None, with the reason. One class on one side only (a judge that
  says the same of every case) makes kappa 0 by construction, and the variance formula a
  zero-width interval that means nothing: kappa 0 with no interval, and the reason.
* :func:`mean_difference`: mean m and sample sd s (n - 1) of paired deltas; the 95 % interval is
  m +- t(0.975, n - 1) s / sqrt(n). :func:`t975` is a table for df 1..30 and, beyond, the
  Cornish-Fisher expansion t = z + g1/df + g2/df^2 + g3/df^3 around z = Z95 (error < 1e-5 there).
* :func:`bootstrap_interval`: the 2.5 and 97.5 percentiles (linear interpolation between order
  statistics) of a statistic over ``rounds`` resamples of the cases with replacement.

Self-consistency over N cases, k samples each (:func:`self_consistency`): the majority
(:func:`majority`) is the most common parsed score, ties to the lower; agreement is the mean over
cases of (samples equal to the majority) / k, an unparseable sample never agreeing; a case is
unanimous when all k samples parsed and are equal. Fleiss' kappa over the cases with all k parsed:
n_ij samples of case i scoring j, P_i = (sum_j n_ij^2 - k) / (k (k - 1)), P = mean_i P_i,
p_j = sum_i n_ij / (N k), Pe = sum_j p_j^2, kappa = (P - Pe) / (1 - Pe); undefined (None, with the
reason) when k < 2, no case is complete, or Pe == 1.
"""

from __future__ import annotations

import math
import random
import statistics
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, TypeVar

from envhub.rollout.stats import Z95

T = TypeVar("T")

# t(0.975, df) for df 1..30.
# fmt: off
_T975 = (12.706205, 4.302653, 3.182446, 2.776445, 2.570582, 2.446912, 2.364624, 2.306004, 2.262157,
         2.228139, 2.200985, 2.178813, 2.160369, 2.144787, 2.131450, 2.119905, 2.109816, 2.100922,
         2.093024, 2.085963, 2.079614, 2.073873, 2.068658, 2.063899, 2.059539, 2.055529, 2.051831,
         2.048407, 2.045230, 2.042272)
# fmt: on


class _Record:
    def to_dict(self) -> dict[str, Any]:
        """The fields as a JSON-ready dict."""
        return asdict(self)  # type: ignore[call-overload]


def _ratio(num: int, den: int) -> float | None:
    return num / den if den else None


@dataclass(frozen=True)
class Confusion:
    """Counts of label (good/bad) against verdict (good/bad); n = tp + fp + fn + tn > 0."""

    tp: int
    fp: int
    fn: int
    tn: int

    @property
    def n(self) -> int:
        return self.tp + self.fp + self.fn + self.tn

    @property
    def agreement(self) -> float:
        return (self.tp + self.tn) / self.n

    @property
    def base_rate(self) -> float:
        return (self.tp + self.fn) / self.n

    @property
    def judge_rate(self) -> float:
        return (self.tp + self.fp) / self.n

    @property
    def precision(self) -> float | None:
        return _ratio(self.tp, self.tp + self.fp)

    @property
    def recall(self) -> float | None:
        return _ratio(self.tp, self.tp + self.fn)

    sensitivity = recall

    @property
    def specificity(self) -> float | None:
        return _ratio(self.tn, self.tn + self.fp)

    def to_dict(self) -> dict[str, Any]:
        keys = ("n", "agreement", "base_rate", "judge_rate", "precision", "recall", "specificity")
        return {**asdict(self), **{k: getattr(self, k) for k in keys}}


def confusion(labels: Sequence[bool], verdicts: Sequence[bool]) -> Confusion:
    """The confusion counts of ``verdicts`` against ``labels`` (True = good), paired by position.
    Raises ValueError when they are empty or of different lengths."""
    if len(labels) != len(verdicts):
        raise ValueError(f"confusion: {len(labels)} labels but {len(verdicts)} verdicts")
    if not labels:
        raise ValueError("confusion: no cases (labels and verdicts are empty)")
    pairs = Counter((bool(a), bool(b)) for a, b in zip(labels, verdicts, strict=True))
    return Confusion(pairs[True, True], pairs[False, True], pairs[True, False], pairs[False, False])


@dataclass(frozen=True)
class Kappa(_Record):
    """Cohen's kappa with its 95 % interval; kappa, low and high are None when undefined (see reason)."""

    kappa: float | None
    low: float | None
    high: float | None
    observed: float
    expected: float
    n: int
    reason: str | None = None


def kappa_of(c: Confusion) -> Kappa:
    """Cohen's kappa of a confusion table, with the Fleiss-Cohen-Everitt (1969) 95 % interval."""
    n = c.n
    good, called = c.tp + c.fn, c.tp + c.fp
    po = c.agreement
    chance = good * called + (n - good) * (n - called)  # pe * n^2, exact in integers
    pe = chance / (n * n)
    if chance == n * n:
        reason = "labels and verdicts are all one class: chance agreement is 1, kappa is undefined"
        return Kappa(None, None, None, po, pe, n, reason)
    k = (po - pe) / (1 - pe)
    if called in (0, n) or good in (0, n):  # one side gave one class to every case: kappa is 0, no interval
        side = "the judge" if called in (0, n) else "the labels"
        return Kappa(k, None, None, po, pe, n, f"{side} gave one class to every case: kappa is {k:+.3f} "
                                               "by construction and carries no interval")
    rows, cols = (good / n, 1 - good / n), (called / n, 1 - called / n)
    cells = ((c.tp / n, c.fn / n), (c.fp / n, c.tn / n))
    a = sum(cells[i][i] * (1 - (rows[i] + cols[i]) * (1 - k)) ** 2 for i in (0, 1))
    b = (1 - k) ** 2 * sum(cells[i][j] * (cols[i] + rows[j]) ** 2 for i in (0, 1) for j in (0, 1) if i != j)
    var = max(a + b - (k - pe * (1 - k)) ** 2, 0.0) / (n * (1 - pe) ** 2)
    half = Z95 * math.sqrt(var)
    return Kappa(k, max(-1.0, k - half), min(1.0, k + half), po, pe, n)


def cohen_kappa(labels: Sequence[bool], verdicts: Sequence[bool]) -> Kappa:
    """Cohen's kappa of ``verdicts`` against ``labels`` (see :func:`kappa_of`); the interval is
    zero-width at perfect agreement. Raises ValueError as :func:`confusion` does."""
    return kappa_of(confusion(labels, verdicts))


@dataclass(frozen=True)
class Interval(_Record):
    """A mean with its 95 % interval; low/high None when the width is infinite (n == 1), all None at n == 0."""

    mean: float | None
    low: float | None
    high: float | None
    n: int
    sd: float | None


def t975(df: int) -> float:
    """The 0.975 quantile of Student's t with ``df`` >= 1 degrees of freedom."""
    if df < 1:
        raise ValueError(f"t975: degrees of freedom must be at least 1, got {df}")
    if df <= len(_T975):
        return _T975[df - 1]
    z = Z95
    g1 = (z**3 + z) / 4
    g2 = (5 * z**5 + 16 * z**3 + 3 * z) / 96
    g3 = (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / 384
    return z + g1 / df + g2 / df**2 + g3 / df**3


def mean_difference(deltas: Sequence[float]) -> Interval:
    """The mean of paired score changes with its t interval. n == 0: everything None; n == 1: the
    mean with low/high None (the interval is unbounded); all deltas equal: a zero-width interval.
    Raises ValueError on a non-finite delta."""
    values = [float(d) for d in deltas]
    if any(not math.isfinite(v) for v in values):
        raise ValueError("mean_difference: deltas must be finite numbers")
    n = len(values)
    if n == 0:
        return Interval(None, None, None, 0, None)
    mean = math.fsum(values) / n
    if n == 1:
        return Interval(mean, None, None, 1, None)
    sd = statistics.stdev(values)
    half = t975(n - 1) * sd / math.sqrt(n)
    return Interval(mean, mean - half, mean + half, n, sd)


def _percentile(ordered: Sequence[float], q: float) -> float:
    pos = q * (len(ordered) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def bootstrap_interval(
    values: Sequence[T],
    statistic: Callable[[Sequence[T]], float | None],
    *,
    rounds: int = 2000,
    seed: int = 0,
) -> tuple[float, float]:
    """The 95 % percentile-bootstrap interval of ``statistic`` over ``values`` (the cases, e.g.
    (label, verdict) pairs), resampled with replacement ``rounds`` times; the same seed gives the
    same interval. Resamples where the statistic is None (undefined) are dropped. Raises ValueError
    on empty values, rounds < 1, or a statistic undefined on every resample."""
    if not values:
        raise ValueError("bootstrap_interval: no values to resample")
    if rounds < 1:
        raise ValueError(f"bootstrap_interval: rounds must be at least 1, got {rounds}")
    rng = random.Random(seed)
    n = len(values)
    stats = [statistic([values[rng.randrange(n)] for _ in range(n)]) for _ in range(rounds)]
    ordered = sorted(s for s in stats if s is not None)
    if not ordered:
        raise ValueError("bootstrap_interval: the statistic is undefined on every resample")
    return _percentile(ordered, 0.025), _percentile(ordered, 0.975)


def majority(scores: Sequence[int | None]) -> int | None:
    """The most common parsed (non-None) score, a tie going to the lowest tied score; None if none parsed."""
    counts = Counter(s for s in scores if s is not None)
    if not counts:
        return None
    top = max(counts.values())
    return min(s for s, c in counts.items() if c == top)


@dataclass(frozen=True)
class Consistency(_Record):
    """A judge's agreement with itself over ``cases`` cases of ``k`` samples each (see the module doc)."""

    cases: int
    k: int
    agreement: float
    unanimous: float
    fleiss_kappa: float | None
    fleiss_cases: int
    unparseable: int
    reason: str | None = None


def _fleiss(rows: Sequence[Sequence[int]], k: int) -> tuple[float | None, str | None]:
    if k < 2:
        return None, "Fleiss' kappa needs at least 2 samples per case"
    if not rows:
        return None, "no case has all its samples parsed"
    per_case = [Counter(r) for r in rows]
    p_bar = statistics.fmean((sum(c * c for c in cnt.values()) - k) / (k * (k - 1)) for cnt in per_case)
    totals = sum(per_case, Counter())
    if len(totals) == 1:
        return None, "every parsed sample has the same score: chance agreement is 1, kappa is undefined"
    pe = sum((t / (len(rows) * k)) ** 2 for t in totals.values())
    return (p_bar - pe) / (1 - pe), None


def self_consistency(samples: Sequence[Sequence[int | None]]) -> Consistency:
    """Agreement of k judge samples per case (a score, or None when unparseable). Raises ValueError
    on no cases, no samples, or cases with different numbers of samples."""
    if not samples:
        raise ValueError("self_consistency: no cases")
    k = len(samples[0])
    if k == 0:
        raise ValueError("self_consistency: cases have no samples")
    if any(len(s) != k for s in samples):
        raise ValueError(f"self_consistency: every case needs the same number of samples ({k})")
    shares, unanimous, complete, unparseable = [], 0, [], 0
    for case in samples:
        top = majority(case)
        shares.append(sum(1 for s in case if s is not None and s == top) / k)
        missing = sum(1 for s in case if s is None)
        unparseable += missing
        if not missing:
            complete.append([s for s in case if s is not None])
            unanimous += len(set(case)) == 1
    kappa, reason = _fleiss(complete, k)
    agreement, share_unanimous = statistics.fmean(shares), unanimous / len(samples)
    return Consistency(len(samples), k, agreement, share_unanimous, kappa, len(complete), unparseable, reason)
