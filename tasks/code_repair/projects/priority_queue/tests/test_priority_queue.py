import random

import pytest

from priority_queue import EmptyQueueError, PriorityQueue


def test_push_pop_in_priority_order():
    pq = PriorityQueue()
    for item, prio in [("c", 3), ("a", 1), ("e", 5), ("b", 2), ("d", 4)]:
        pq.push(item, prio)
    assert len(pq) == 5
    assert [pq.pop() for _ in range(5)] == [("a", 1), ("b", 2), ("c", 3), ("d", 4), ("e", 5)]
    assert len(pq) == 0
    assert not pq


def test_constructor_accepts_pairs():
    pq = PriorityQueue([("x", 2), ("y", 1)])
    assert pq.peek() == ("y", 1)
    assert "x" in pq
    assert "z" not in pq
    assert bool(pq)


def test_equal_priorities_are_fifo():
    pq = PriorityQueue()
    for item in ["first", "second", "third", "fourth", "fifth", "sixth"]:
        pq.push(item, 7)
    pq.push("urgent", 1)
    assert pq.drain() == ["urgent", "first", "second", "third", "fourth", "fifth", "sixth"]


def test_negative_and_float_priorities():
    pq = PriorityQueue([("a", 0.5), ("b", -2), ("c", 0), ("d", -2.5)])
    assert pq.drain() == ["d", "b", "c", "a"]


def test_pop_and_peek_empty_raise():
    pq = PriorityQueue()
    with pytest.raises(EmptyQueueError):
        pq.pop()
    with pytest.raises(EmptyQueueError):
        pq.peek()
    with pytest.raises(IndexError):
        pq.pop()


def test_peek_does_not_remove():
    pq = PriorityQueue([("a", 3), ("b", 1)])
    assert pq.peek() == ("b", 1)
    assert pq.peek() == ("b", 1)
    assert len(pq) == 2


def test_push_duplicate_rejected():
    pq = PriorityQueue([("a", 1)])
    with pytest.raises(ValueError):
        pq.push("a", 0)
    assert pq.priority("a") == 1
    assert len(pq) == 1


def test_priority_lookup():
    pq = PriorityQueue([("a", 4), ("b", 9)])
    assert pq.priority("a") == 4
    assert pq.priority("b") == 9
    with pytest.raises(KeyError):
        pq.priority("zzz")


def test_decrease_key_moves_item_forward():
    pq = PriorityQueue([("a", 5), ("b", 6), ("c", 7), ("d", 8)])
    pq.decrease_key("d", 1)
    assert pq.peek() == ("d", 1)
    assert pq.priority("d") == 1
    assert pq.is_valid_heap()
    assert pq.drain() == ["d", "a", "b", "c"]


def test_decrease_key_keeps_original_tie_order():
    pq = PriorityQueue()
    pq.push("a", 5)
    pq.push("b", 3)
    pq.decrease_key("a", 3)
    assert pq.drain() == ["a", "b"]


def test_decrease_key_equal_priority_allowed():
    pq = PriorityQueue([("a", 2), ("b", 2)])
    pq.decrease_key("b", 2)
    assert pq.drain() == ["a", "b"]


def test_decrease_key_errors():
    pq = PriorityQueue([("a", 2)])
    with pytest.raises(ValueError):
        pq.decrease_key("a", 3)
    assert pq.priority("a") == 2
    with pytest.raises(KeyError):
        pq.decrease_key("missing", 1)


def test_update_both_directions_and_insert():
    pq = PriorityQueue([("a", 1), ("b", 2), ("c", 3), ("d", 4), ("e", 5)])
    pq.update("a", 10)
    assert pq.is_valid_heap()
    assert pq.peek() == ("b", 2)
    pq.update("e", 0)
    assert pq.is_valid_heap()
    pq.update("new", 3)
    assert pq.is_valid_heap()
    assert pq.drain() == ["e", "b", "c", "new", "d", "a"]


def test_update_increase_deep_item():
    pq = PriorityQueue([(i, i) for i in range(15)])
    pq.update(1, 100)
    assert pq.is_valid_heap()
    assert pq.drain() == [0] + list(range(2, 15)) + [1]


def test_remove_returns_priority():
    pq = PriorityQueue([("a", 1), ("b", 2), ("c", 3), ("d", 4), ("e", 5), ("f", 6)])
    assert pq.remove("b") == 2
    assert "b" not in pq
    assert pq.is_valid_heap()
    assert pq.remove("f") == 6
    assert pq.is_valid_heap()
    assert pq.drain() == ["a", "c", "d", "e"]
    with pytest.raises(KeyError):
        pq.remove("b")


def test_remove_last_and_only_item():
    pq = PriorityQueue([("only", 1)])
    assert pq.remove("only") == 1
    assert len(pq) == 0
    pq.push("x", 1)
    pq.push("y", 2)
    assert pq.remove("y") == 2
    assert pq.peek() == ("x", 1)


def test_remove_requires_sift_up():
    # Removing a node deep in one subtree may move a small last element into
    # a position where it must travel upwards.
    pq = PriorityQueue([("r", 0), ("a", 10), ("b", 1), ("a1", 11), ("a2", 12), ("b1", 2), ("b2", 3)])
    pq.remove("a1")
    assert pq.is_valid_heap()
    assert pq.peek() == ("r", 0)
    assert pq.drain() == ["r", "b", "b1", "b2", "a", "a2"]


def test_nsmallest_is_non_destructive():
    pq = PriorityQueue([("a", 3), ("b", 1), ("c", 2)])
    assert pq.nsmallest(2) == [("b", 1), ("c", 2)]
    assert pq.nsmallest(0) == []
    assert pq.nsmallest(10) == [("b", 1), ("c", 2), ("a", 3)]
    assert len(pq) == 3
    with pytest.raises(ValueError):
        pq.nsmallest(-1)


def test_copy_is_independent_and_keeps_ties():
    pq = PriorityQueue([("a", 1), ("b", 1), ("c", 0)])
    clone = pq.copy()
    clone.pop()
    clone.push("z", -1)
    assert len(pq) == 3
    assert "z" not in pq
    assert pq.drain() == ["c", "a", "b"]
    assert clone.drain() == ["z", "a", "b"]


def test_merge_orders_self_before_other_on_ties():
    left = PriorityQueue([("l1", 2), ("l2", 1)])
    right = PriorityQueue([("r1", 1), ("r2", 2), ("r3", 0)])
    merged = left.merge(right)
    assert merged.drain() == ["r3", "l2", "r1", "l1", "r2"]
    assert len(left) == 2
    assert len(right) == 3


def test_merge_with_empty():
    pq = PriorityQueue([("a", 1)])
    assert pq.merge(PriorityQueue()).drain() == ["a"]
    assert PriorityQueue().merge(pq).drain() == ["a"]


def test_merge_rejects_shared_items():
    with pytest.raises(ValueError):
        PriorityQueue([("a", 1), ("b", 1)]).merge(PriorityQueue([("b", 5)]))


def test_drain_empties_queue():
    pq = PriorityQueue([("a", 2), ("b", 1)])
    assert pq.drain() == ["b", "a"]
    assert pq.drain() == []


def test_repr():
    pq = PriorityQueue([("a", 2), ("b", 1)])
    assert repr(pq) == "PriorityQueue([('b', 1), ('a', 2)])"


def test_is_valid_heap_detects_corruption():
    pq = PriorityQueue([("a", 1), ("b", 2), ("c", 3)])
    assert pq.is_valid_heap()
    pq._heap[0][0] = 99
    assert not pq.is_valid_heap()
    pq2 = PriorityQueue([("a", 1), ("b", 2)])
    pq2._index["b"] = 0
    assert not pq2.is_valid_heap()


def test_randomized_against_sorted_reference():
    rng = random.Random(1234)
    pq = PriorityQueue()
    reference = {}
    for step in range(300):
        op = rng.random()
        if op < 0.5 or not reference:
            item = f"i{step}"
            prio = rng.randint(0, 20)
            pq.push(item, prio)
            reference[item] = (prio, step)
        elif op < 0.7:
            item = rng.choice(sorted(reference))
            prio = rng.randint(0, 20)
            pq.update(item, prio)
            reference[item] = (prio, reference[item][1])
        elif op < 0.85:
            item = rng.choice(sorted(reference))
            assert pq.remove(item) == reference.pop(item)[0]
        else:
            item, prio = pq.pop()
            expected = min(reference, key=lambda k: reference[k])
            assert item == expected
            assert prio == reference.pop(item)[0]
        assert pq.is_valid_heap()
        assert len(pq) == len(reference)
    expected_order = sorted(reference, key=lambda k: reference[k])
    assert pq.drain() == expected_order


def test_copy_and_merge_keep_insertion_order_not_item_order():
    pq = PriorityQueue([("zeta", 1), ("alpha", 1), ("mid", 1)])
    assert pq.copy().drain() == ["zeta", "alpha", "mid"]
    other = PriorityQueue([("y", 1), ("b", 1)])
    assert pq.merge(other).drain() == ["zeta", "alpha", "mid", "y", "b"]


def test_is_valid_heap_checks_every_parent():
    pq = PriorityQueue([(i, i) for i in range(7)])
    assert pq.is_valid_heap()
    pq._heap[5][0] = 1.5  # parent (index 2) has priority 2
    assert not pq.is_valid_heap()
    pq2 = PriorityQueue([(i, i) for i in range(7)])
    pq2._heap[1][0] = -1  # child of the root
    assert not pq2.is_valid_heap()
