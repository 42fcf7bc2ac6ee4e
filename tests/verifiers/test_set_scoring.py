"""Partial credit for set answers: stuffing in extra candidates never beats a precise answer.

A "precise" answer names only gold items (at least one); a "stuffed" one names at least one item
outside the gold set. The properties are checked over many generated gold sets, candidate pools
and answers, through ``set_score`` and through ``SetMatch`` on answer text as a model writes it.
"""

from __future__ import annotations

import itertools
import random

from envhub.types import Task
from envhub.verifiers import SetMatch
from envhub.verifiers.checks import f1_score, set_score

CASES = 3000


def _case(rng: random.Random) -> tuple[set[str], list[str]]:
    """A gold set and the pool of candidates it hides in (gold included)."""
    pool = [f"c{i}" for i in range(rng.randint(2, 12))]
    gold = set(rng.sample(pool, rng.randint(1, min(6, len(pool) - 1))))
    return gold, pool


def _answers(rng: random.Random, pool: list[str], n: int = 20) -> list[set[str]]:
    return [set(rng.sample(pool, rng.randint(1, len(pool)))) for _ in range(n)]


def test_no_stuffed_answer_beats_any_precise_one():
    rng = random.Random(0)
    checked = 0
    for _ in range(CASES):
        gold, pool = _case(rng)
        precise = [set(c) for k in range(1, len(gold) + 1) for c in itertools.combinations(sorted(gold), k)]
        weakest_precise = min(set_score(p, gold) for p in precise)
        assert weakest_precise > 0
        for answer in [*_answers(rng, pool), set(pool)]:  # the whole pool: "every candidate"
            if answer - gold:
                assert set_score(answer, gold) <= weakest_precise, (gold, answer)
                checked += 1
    assert checked > CASES * 10


def test_adding_a_wrong_candidate_never_helps_and_a_right_one_always_does():
    rng = random.Random(1)
    for _ in range(CASES):
        gold, pool = _case(rng)
        wrong = [c for c in pool if c not in gold]
        for answer in _answers(rng, pool, 5):
            for extra in wrong:
                assert set_score(answer | {extra}, gold) <= set_score(answer, gold)
                assert set_score(answer | {extra}, gold) <= set_score(answer & gold, gold)
            if not answer - gold:
                for missing in gold - answer:
                    assert set_score(answer | {missing}, gold) > set_score(answer, gold)


def test_only_the_gold_set_scores_one_and_f1_would_have_paid_for_stuffing():
    rng = random.Random(2)
    stuffing_paid = 0
    for _ in range(CASES):
        gold, pool = _case(rng)
        assert set_score(gold, gold) == 1.0
        for answer in _answers(rng, pool, 5):
            assert (set_score(answer, gold) == 1.0) is (answer == gold)
            # the F1 this replaces: the gold set plus one wrong candidate got 2g / (2g + 1)
            if answer - gold and gold <= answer and f1_score(answer, gold) > 0.6:
                stuffing_paid += 1
                assert set_score(answer, gold) == 0.0
    assert stuffing_paid > 100


def test_set_match_scores_answer_text_the_same_way():
    rng = random.Random(3)
    check = SetMatch()
    for _ in range(500):
        gold, pool = _case(rng)
        task = Task(task_id="t", family="retrieval", split="test", prompt="?", hidden={"answer": sorted(gold)})
        for answer in _answers(rng, pool, 4):
            items = [c.upper() if rng.random() < 0.3 else c for c in rng.sample(sorted(answer), len(answer))]
            text = rng.choice([", ", ",", "; ", "\n"]).join(items)
            graded = check(task, {"answer": text}, None)
            assert graded.score == set_score(answer, gold), (gold, text)
            assert graded.passed is (answer == gold)
            assert graded.details["extra"] == len(answer - gold)
