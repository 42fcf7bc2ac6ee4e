"""How much a paired comparison of two evals says: the exact McNemar test and the evidence in words.

Two evals of the same planned episodes (:func:`envhub.rollout.stats.paired`) differ only on their
discordant pairs: ``wins`` (episodes only the later model solved) and ``losses`` (only the earlier
one). Under "no difference" each discordant pair is a win or a loss with probability 1/2, so the
exact two-sided McNemar p-value is the binomial test of ``wins`` in ``n = wins + losses`` at p = 1/2
(:func:`mcnemar_p`). :func:`evidence` grades it into words, by p and by n: fewer than
:data:`FEW_PAIRS` discordant pairs are never strong evidence (one episode more either way moves p
several-fold), and with 5 or fewer no split of them reaches p < 0.05.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

Grade = Literal["none", "weak", "moderate", "strong"]
#: below this many discordant pairs the evidence is at most moderate, whatever p says
FEW_PAIRS = 10


def mcnemar_p(wins: int, losses: int) -> float:
    """The exact two-sided McNemar p-value: ``min(1, 2 * P(X <= min(wins, losses)))`` for
    ``X ~ Binomial(wins + losses, 1/2)``; 1.0 without discordant pairs."""
    if wins < 0 or losses < 0:
        raise ValueError(f"mcnemar_p: counts must be >= 0, got {wins} and {losses}")
    n = wins + losses
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(min(wins, losses) + 1))
    return min(1.0, 2 * tail / 2**n)


def grade(p_value: float, discordant: int) -> Grade:
    """``strong``: p < 0.01 with at least :data:`FEW_PAIRS` discordant pairs; ``moderate``: p < 0.05
    (or p < 0.01 on fewer pairs); ``weak``: p < 0.2; else ``none``."""
    if discordant == 0 or p_value >= 0.2:
        return "none"
    if p_value < 0.01 and discordant >= FEW_PAIRS:
        return "strong"
    return "moderate" if p_value < 0.05 else "weak"


@dataclass(frozen=True)
class Evidence:
    """What ``wins`` against ``losses`` discordant pairs say: :attr:`p_value`, :attr:`grade`,
    :attr:`words` (``weak evidence of a gain``) and :attr:`sentence` (the words with the counts, p
    and, on few pairs, how few)."""

    wins: int
    losses: int
    p_value: float
    grade: Grade

    @property
    def discordant(self) -> int:
        return self.wins + self.losses

    @property
    def words(self) -> str:
        if self.discordant == 0:
            return "no evidence either way"
        if self.grade == "none":
            return "no evidence of a difference"
        return f"{self.grade} evidence of a {'gain' if self.wins > self.losses else 'loss'}"

    @property
    def sentence(self) -> str:
        n = self.discordant
        if n == 0:
            return f"{self.words}: the two evals agree on every paired episode (exact McNemar p = 1)"
        text = (f"{self.words}: {self.wins} win{'s' * (self.wins != 1)} against {self.losses} "
                f"loss{'es' * (self.losses != 1)} in {n} discordant pair{'s' * (n != 1)}, "
                f"exact McNemar p = {self.p_value:.2g}")
        if mcnemar_p(n, 0) >= 0.05:
            return f"{text}; {n} discordant pairs cannot reach p < 0.05 however they split"
        if n < FEW_PAIRS:
            return f"{text}; only {n} discordant pairs: too few for strong evidence"
        return text


def evidence(wins: int, losses: int) -> Evidence:
    """The exact McNemar p-value of ``wins`` against ``losses`` and its grade (see the module)."""
    p = mcnemar_p(wins, losses)
    return Evidence(wins, losses, p, grade(p, wins + losses))


def with_evidence(pair: dict[str, Any]) -> dict[str, Any]:
    """A paired comparison (:func:`envhub.rollout.stats.paired`) with ``mcnemar_p``, ``evidence`` (the
    grade) and ``evidence_sentence`` added."""
    found = evidence(int(pair["wins"]), int(pair["losses"]))
    return {**pair, "mcnemar_p": found.p_value, "evidence": found.grade, "evidence_sentence": found.sentence}


def paired_line(pair: dict[str, Any]) -> str:
    """The console line of a paired comparison of evals ``pair["second"]`` against ``pair["first"]``."""
    head = f"paired: {pair['second']} against {pair['first']}"
    if not pair.get("n"):
        return f"{head}: no episode in common, nothing to compare"
    low, high = pair["interval"]
    found = evidence(int(pair["wins"]), int(pair["losses"]))
    return (f"{head} on the same {pair['n']} episodes: strict success {pair['first_rate']:.3f} -> "
            f"{pair['second_rate']:.3f} ({pair['difference']:+.3f}, 95% interval [{low:+.3f}, {high:+.3f}]); "
            f"{found.sentence}")
