"""The exact McNemar p-value of a paired comparison, and the evidence graded in words by p and by the
number of discordant pairs (what the run's last lines and the report's verdict say)."""

import pytest

from envhub.rollout.evidence import evidence, grade, mcnemar_p, paired_line, with_evidence


@pytest.mark.parametrize(("wins", "losses", "p"), [
    (7, 2, 2 * (1 + 9 + 36) / 2**9),   # 9 discordant pairs
    (9, 0, 2 / 2**9),
    (0, 9, 2 / 2**9),
    (5, 5, 1.0),
    (0, 0, 1.0),
    (1, 0, 1.0),
    (30, 12, None),
])
def test_the_exact_mcnemar_p_is_the_two_sided_binomial_test_at_one_half(wins, losses, p):
    scipy_stats = pytest.importorskip("scipy.stats")
    got = mcnemar_p(wins, losses)
    if p is not None:
        assert got == pytest.approx(p, rel=1e-12)
    if wins + losses:
        assert got == pytest.approx(scipy_stats.binomtest(wins, wins + losses, 0.5).pvalue, rel=1e-9)
    with pytest.raises(ValueError):
        mcnemar_p(-1, 2)


def test_nine_discordant_pairs_are_weak_evidence_and_say_how_few_they_are():
    found = evidence(7, 2)
    assert (found.grade, found.discordant) == ("weak", 9)
    assert found.sentence == ("weak evidence of a gain: 7 wins against 2 losses in 9 discordant pairs, exact McNemar "
                              "p = 0.18; only 9 discordant pairs: too few for strong evidence")
    assert evidence(9, 0).grade == "moderate"  # p = 0.0039, but on 9 pairs: never strong
    assert evidence(2, 7).words == "weak evidence of a loss"


def test_the_grades_follow_p_and_the_number_of_pairs():
    assert evidence(30, 12).grade == "strong" and evidence(30, 12).sentence.endswith("p = 0.0079")
    assert evidence(20, 10).grade == "weak"      # p = 0.099
    assert evidence(22, 10).grade == "weak"      # p = 0.0501
    assert evidence(23, 10).grade == "moderate"  # p = 0.035
    assert evidence(12, 10).words == "no evidence of a difference"
    assert evidence(0, 0).sentence == ("no evidence either way: the two evals agree on every paired episode "
                                       "(exact McNemar p = 1)")
    assert evidence(4, 0).sentence.endswith("4 discordant pairs cannot reach p < 0.05 however they split")
    assert grade(0.001, 9) == "moderate" and grade(0.001, 10) == "strong" and grade(0.2, 50) == "none"


def test_the_console_line_of_a_paired_comparison():
    pair = {"first": "before", "second": "final", "n": 32, "wins": 7, "losses": 2, "ties": 23,
            "first_rate": 0.25, "second_rate": 0.40625, "difference": 0.15625, "interval": [0.012, 0.3], "unpaired": 0}
    line = paired_line(pair)
    assert line == ("paired: final against before on the same 32 episodes: strict success 0.250 -> 0.406 (+0.156, "
                    "95% interval [+0.012, +0.300]); weak evidence of a gain: 7 wins against 2 losses in 9 discordant "
                    "pairs, exact McNemar p = 0.18; only 9 discordant pairs: too few for strong evidence")
    full = with_evidence(pair)
    assert full["mcnemar_p"] == pytest.approx(0.1796875) and full["evidence"] == "weak"
    assert line.endswith(full["evidence_sentence"])
    assert paired_line({**pair, "n": 0}) == "paired: final against before: no episode in common, nothing to compare"
