"""The judge's trust statistics on hand-computed numbers (the arithmetic is in the comments)."""

from __future__ import annotations

import itertools
import math
import random

import pytest

from envhub.rollout.stats import Z95
from envhub.verifiers.judge.stats import (
    Confusion,
    bootstrap_interval,
    cohen_kappa,
    confusion,
    kappa_of,
    majority,
    mean_difference,
    self_consistency,
    t975,
)


def _pairs(tp: int, fp: int, fn: int, tn: int) -> tuple[list[bool], list[bool]]:
    """Labels and verdicts that make the given table (label first, verdict second)."""
    cells = [(True, True)] * tp + [(False, True)] * fp + [(True, False)] * fn + [(False, False)] * tn
    return [a for a, _ in cells], [b for _, b in cells]


# --- confusion -----------------------------------------------------------------------------------


def test_confusion_counts_and_rates():
    labels = [True, True, True, False, False, True, False]
    verdicts = [True, False, True, True, False, True, False]
    c = confusion(labels, verdicts)
    # (T,T) x3 -> tp 3; (T,F) x1 -> fn 1; (F,T) x1 -> fp 1; (F,F) x2 -> tn 2
    assert (c.tp, c.fp, c.fn, c.tn, c.n) == (3, 1, 1, 2, 7)
    assert c.agreement == pytest.approx(5 / 7)  # (3 + 2) / 7
    assert c.base_rate == pytest.approx(4 / 7)  # (3 + 1) / 7 labelled good
    assert c.judge_rate == pytest.approx(4 / 7)  # (3 + 1) / 7 called good
    assert c.precision == pytest.approx(3 / 4)  # 3 / (3 + 1)
    assert c.recall == c.sensitivity == pytest.approx(3 / 4)  # 3 / (3 + 1)
    assert c.specificity == pytest.approx(2 / 3)  # 2 / (2 + 1)
    d = c.to_dict()
    assert d["tp"] == 3 and d["n"] == 7 and d["specificity"] == pytest.approx(2 / 3)


def test_confusion_undefined_rates_are_none():
    c = confusion([False, False], [False, False])  # no good labels, nothing called good
    assert (c.tn, c.n, c.agreement) == (2, 2, 1.0)
    assert c.precision is None and c.recall is None
    assert c.specificity == 1.0
    assert Confusion(tp=1, fp=0, fn=0, tn=0).specificity is None


def test_confusion_rejects_empty_and_mismatched():
    with pytest.raises(ValueError, match="no cases"):
        confusion([], [])
    with pytest.raises(ValueError, match="3 labels but 2 verdicts"):
        confusion([True, False, True], [True, False])


# --- Cohen's kappa -------------------------------------------------------------------------------


def test_kappa_classic_table():
    # tp=20 fp=5 fn=10 tn=15, n=50. po = 35/50 = 0.7. Label good 30/50 = 0.6, called good 25/50 = 0.5;
    # pe = 0.6*0.5 + 0.4*0.5 = 0.5; kappa = (0.7 - 0.5) / (1 - 0.5) = 0.4.
    # FCE variance: cells p11=.4 p12(fn)=.2 p21(fp)=.1 p22=.3, rows .6/.4, cols .5/.5, 1-kappa=.6.
    # A = .4*(1 - 1.1*.6)^2 + .3*(1 - .9*.6)^2 = .4*.1156 + .3*.2116 = .10972
    # B = .36*(.2*(.5+.4)^2 + .1*(.5+.6)^2) = .36*(.162 + .121) = .10188
    # C = (.4 - .5*.6)^2 = .01;  var = (.10972 + .10188 - .01) / (50 * .25) = .016128, se = .126996
    k = cohen_kappa(*_pairs(20, 5, 10, 15))
    assert (k.n, k.observed, k.expected) == (50, pytest.approx(0.7), pytest.approx(0.5))
    assert k.kappa == pytest.approx(0.4)
    se = math.sqrt(0.016128)
    assert k.low == pytest.approx(0.4 - Z95 * se, abs=1e-9)  # ~0.15109
    assert k.high == pytest.approx(0.4 + Z95 * se, abs=1e-9)  # ~0.64891
    assert k.low == pytest.approx(0.15109, abs=1e-5)
    assert k.reason is None


def test_kappa_perfect_chance_and_disagreement():
    perfect = cohen_kappa(*_pairs(10, 0, 0, 10))  # po 1, pe .5 -> 1; variance 0 -> [1, 1]
    assert (perfect.kappa, perfect.low, perfect.high) == (pytest.approx(1.0), 1.0, 1.0)
    chance = cohen_kappa(*_pairs(10, 10, 10, 10))  # po .5, pe .5*.5 + .5*.5 = .5 -> 0
    assert chance.kappa == pytest.approx(0.0)
    assert chance.low < 0 < chance.high
    worst = cohen_kappa(*_pairs(0, 10, 10, 0))  # po 0, pe .5 -> (0 - .5)/.5 = -1
    assert worst.kappa == pytest.approx(-1.0)
    assert worst.low >= -1.0 and worst.high <= 1.0
    # all labels good, judge says good half the time: po .5, pe 1*.5 + 0*.5 = .5 -> 0, defined
    assert cohen_kappa(*_pairs(5, 0, 5, 0)).kappa == pytest.approx(0.0)


def test_kappa_undefined_on_one_class():
    k = cohen_kappa([True] * 6, [True] * 6)  # pe = 1*1 + 0*0 = 1
    assert k.kappa is None and k.low is None and k.high is None
    assert k.observed == 1.0 and k.expected == 1.0
    assert "undefined" in k.reason
    assert kappa_of(Confusion(0, 0, 0, 4)).kappa is None
    with pytest.raises(ValueError):
        cohen_kappa([], [])
    with pytest.raises(ValueError):
        cohen_kappa([True], [True, False])


def test_kappa_interval_is_clipped():
    k = cohen_kappa(*_pairs(2, 0, 0, 1))  # tiny n: the FCE interval would run past 1
    assert k.kappa == pytest.approx(1.0) and k.high == 1.0
    k = cohen_kappa(*_pairs(0, 2, 1, 0))  # po 0; pe = (1/3)(2/3) + (2/3)(1/3) = 4/9 -> -0.8
    assert k.kappa == pytest.approx(-0.8)
    assert k.low >= -1.0


# --- t interval ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("df", "value"),
    [
        (1, 12.706),
        (2, 4.303),
        (5, 2.571),
        (10, 2.228),
        (29, 2.045),
        (30, 2.042),
        (31, 2.0395),
        (40, 2.0211),
        (60, 2.0003),
        (120, 1.9799),
        (1000, 1.9623),
    ],
)
def test_t975_known_values(df, value):
    assert t975(df) == pytest.approx(value, abs=6e-4 if df <= 30 else 1e-4)


def test_t975_decreases_to_z_and_rejects_zero():
    values = [t975(df) for df in range(1, 200)]
    assert all(a > b for a, b in itertools.pairwise(values))
    assert t975(10**6) == pytest.approx(Z95, abs=1e-5)
    with pytest.raises(ValueError, match="at least 1"):
        t975(0)


def test_mean_difference_hand_computed():
    # deltas 1, 2, 3, 4, 5: mean 3; squared deviations 4+1+0+1+4 = 10; sd = sqrt(10/4) = 1.5811
    # half = t(.975, 4) * 1.5811 / sqrt(5) = 2.776445 * 0.707107 = 1.963243
    iv = mean_difference([1, 2, 3, 4, 5])
    assert (iv.n, iv.mean) == (5, pytest.approx(3.0))
    assert iv.sd == pytest.approx(math.sqrt(2.5))
    assert iv.low == pytest.approx(3 - 1.963243, abs=1e-5)
    assert iv.high == pytest.approx(3 + 1.963243, abs=1e-5)
    # two deltas 0 and 1: mean .5, sd sqrt(.5), half = 12.706205 * sqrt(.5) / sqrt(2) = 6.353103
    two = mean_difference([0.0, 1.0])
    assert (two.low, two.high) == (pytest.approx(0.5 - 6.353103), pytest.approx(0.5 + 6.353103))


def test_mean_difference_edges():
    assert mean_difference([]).to_dict() == {"mean": None, "low": None, "high": None, "n": 0, "sd": None}
    one = mean_difference([0.25])
    assert (one.mean, one.low, one.high, one.n, one.sd) == (0.25, None, None, 1, None)
    flat = mean_difference([0.5, 0.5, 0.5])
    assert (flat.mean, flat.low, flat.high, flat.sd) == (0.5, 0.5, 0.5, 0.0)
    with pytest.raises(ValueError, match="finite"):
        mean_difference([1.0, float("nan")])


# --- bootstrap -----------------------------------------------------------------------------------


def _kappa_stat(pairs):
    return cohen_kappa([a for a, _ in pairs], [b for _, b in pairs]).kappa


def test_bootstrap_brackets_analytic_kappa():
    rng = random.Random(7)
    labels = [rng.random() < 0.5 for _ in range(200)]
    verdicts = [lab if rng.random() < 0.8 else not lab for lab in labels]  # judge right ~80 %
    analytic = cohen_kappa(labels, verdicts)
    pairs = list(zip(labels, verdicts, strict=True))
    low, high = bootstrap_interval(pairs, _kappa_stat, rounds=500, seed=1)
    assert low < analytic.kappa < high
    # the two intervals roughly agree on width (same sampling error, two ways of estimating it)
    ratio = (high - low) / (analytic.high - analytic.low)
    assert 0.7 < ratio < 1.4
    assert bootstrap_interval(pairs, _kappa_stat, rounds=500, seed=1) == (low, high)
    assert bootstrap_interval(pairs, _kappa_stat, rounds=500, seed=2) != (low, high)


def test_bootstrap_percentiles_and_errors():
    assert bootstrap_interval([3.0], lambda xs: xs[0], rounds=10) == (3.0, 3.0)
    low, high = bootstrap_interval(list(range(100)), lambda xs: sum(xs) / len(xs), rounds=400)
    # mean 49.5, se = sd/sqrt(n) = 29.01/10 = 2.9; the 95 % interval ~ 49.5 +- 5.7
    assert 42 < low < 46 < 53 < high < 57
    with pytest.raises(ValueError, match="no values"):
        bootstrap_interval([], len)
    with pytest.raises(ValueError, match="rounds"):
        bootstrap_interval([1], len, rounds=0)
    with pytest.raises(ValueError, match="undefined on every resample"):
        bootstrap_interval([1, 2], lambda xs: None, rounds=5)


# --- majority and self-consistency ---------------------------------------------------------------


def test_majority():
    assert majority([5, None, 4, 5]) == 5
    assert majority([3, 1, 3, 1]) == 1  # tie 2-2 goes to the lower score
    assert majority([4, 2, 3]) == 2  # three-way tie -> lowest
    assert majority([None, 7, None]) == 7
    assert majority([None, None]) is None
    assert majority([]) is None


def test_self_consistency_hand_computed():
    # k=3: P_i = (sum n_ij^2 - 3) / 6: [1,1,1] -> 1, [0,0,0] -> 1, [1,1,0] -> (4+1-3)/6 = 1/3, [0,0,1] -> 1/3
    # P = (1 + 1 + 1/3 + 1/3)/4 = 2/3; p_1 = (3+0+2+1)/12 = .5, p_0 = .5, Pe = .5; kappa = (2/3 - .5)/.5 = 1/3
    c = self_consistency([[1, 1, 1], [0, 0, 0], [1, 1, 0], [0, 0, 1]])
    assert (c.cases, c.k, c.fleiss_cases, c.unparseable) == (4, 3, 4, 0)
    assert c.agreement == pytest.approx(5 / 6)  # (1 + 1 + 2/3 + 2/3) / 4
    assert c.unanimous == pytest.approx(0.5)
    assert c.fleiss_kappa == pytest.approx(1 / 3)
    assert c.reason is None


def test_self_consistency_with_unparseable():
    # shares: [1,1,None] -> 2/3, [2,2,2] -> 1, [None]*3 -> 0; mean 5/9. Only [2,2,2] is complete -> Pe = 1
    c = self_consistency([[1, 1, None], [2, 2, 2], [None, None, None]])
    assert c.unparseable == 4
    assert c.agreement == pytest.approx(5 / 9)
    assert c.unanimous == pytest.approx(1 / 3)
    assert (c.fleiss_kappa, c.fleiss_cases) == (None, 1)
    assert "undefined" in c.reason
    assert self_consistency([[None, None]]).reason == "no case has all its samples parsed"
    single = self_consistency([[3], [4]])  # k=1: always self-agreeing, no kappa
    assert (single.agreement, single.unanimous, single.fleiss_kappa) == (1.0, 1.0, None)


def test_fleiss_kappa_published_example():
    # Fleiss (1971) as on Wikipedia: 10 subjects, 14 raters, 5 categories; P = .378, Pe = .213, kappa = .210
    table = [
        [0, 0, 0, 0, 14],
        [0, 2, 6, 4, 2],
        [0, 0, 3, 5, 6],
        [0, 3, 9, 2, 0],
        [2, 2, 8, 1, 1],
        [7, 7, 0, 0, 0],
        [3, 2, 6, 3, 0],
        [2, 5, 3, 2, 2],
        [6, 5, 2, 1, 0],
        [0, 2, 2, 3, 7],
    ]
    samples = [[j for j, count in enumerate(row) for _ in range(count)] for row in table]
    c = self_consistency(samples)
    assert c.fleiss_kappa == pytest.approx(0.210, abs=5e-4)


def test_self_consistency_rejects_bad_shapes():
    with pytest.raises(ValueError, match="no cases"):
        self_consistency([])
    with pytest.raises(ValueError, match="no samples"):
        self_consistency([[], []])
    with pytest.raises(ValueError, match="same number of samples"):
        self_consistency([[1, 2], [1]])


def test_a_judge_with_one_verdict_for_every_case_has_kappa_zero_and_no_interval():
    # 6 good, 54 bad labels; the judge says bad to all: po = 54/60 = 0.9, pe = 0.9 * 1 + 0.1 * 0 = 0.9,
    # kappa = 0 -- and the large-sample interval would be [0, 0], which says nothing: none is given
    labels = [True] * 6 + [False] * 54
    k = cohen_kappa(labels, [False] * 60)
    assert k.kappa == pytest.approx(0.0) and k.low is None and k.high is None
    assert "the judge gave one class to every case" in k.reason
    flipped = cohen_kappa([True] * 10, [True] * 7 + [False] * 3)  # the labels one class, the judge not
    assert flipped.kappa == pytest.approx(0.0) and flipped.low is None and "the labels" in flipped.reason
