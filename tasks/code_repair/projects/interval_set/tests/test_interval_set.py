import pytest

from interval_set import IntervalSet


def test_empty_set():
    s = IntervalSet()
    assert list(s) == []
    assert len(s) == 0
    assert not s
    assert s.total_length() == 0
    assert 0 not in s


def test_add_single_and_membership_boundaries():
    s = IntervalSet([(2, 5)])
    assert list(s) == [(2, 5)]
    assert bool(s)
    assert 1 not in s
    assert 2 in s
    assert 4 in s
    assert 5 not in s


def test_add_keeps_disjoint_sorted():
    s = IntervalSet()
    s.add(10, 12)
    s.add(1, 3)
    s.add(5, 7)
    assert list(s) == [(1, 3), (5, 7), (10, 12)]
    assert len(s) == 3


def test_add_merges_adjacent():
    s = IntervalSet([(1, 3)])
    s.add(3, 5)
    assert list(s) == [(1, 5)]
    s.add(0, 1)
    assert list(s) == [(0, 5)]


def test_add_gap_of_one_not_merged():
    s = IntervalSet([(1, 3)])
    s.add(4, 6)
    assert list(s) == [(1, 3), (4, 6)]


def test_add_merges_overlapping_and_bridging():
    s = IntervalSet([(1, 3), (5, 7), (9, 11), (20, 22)])
    s.add(2, 10)
    assert list(s) == [(1, 11), (20, 22)]


def test_add_contained_interval_is_noop():
    s = IntervalSet([(0, 10)])
    s.add(3, 4)
    assert list(s) == [(0, 10)]


def test_add_covering_interval():
    s = IntervalSet([(3, 4), (6, 7)])
    s.add(0, 10)
    assert list(s) == [(0, 10)]


def test_add_empty_interval_ignored():
    s = IntervalSet()
    s.add(4, 4)
    assert list(s) == []


def test_add_validation():
    s = IntervalSet()
    with pytest.raises(ValueError):
        s.add(5, 4)
    with pytest.raises(TypeError):
        s.add(1.0, 4)
    with pytest.raises(TypeError):
        s.add(1, "4")
    with pytest.raises(TypeError):
        s.add(True, 4)


def test_remove_splits_interval():
    s = IntervalSet([(0, 10)])
    s.remove(3, 6)
    assert list(s) == [(0, 3), (6, 10)]
    assert 2 in s and 3 not in s and 5 not in s and 6 in s


def test_remove_prefix_and_suffix():
    s = IntervalSet([(0, 10)])
    s.remove(0, 2)
    assert list(s) == [(2, 10)]
    s.remove(8, 10)
    assert list(s) == [(2, 8)]


def test_remove_touching_bounds_is_noop():
    s = IntervalSet([(2, 5)])
    s.remove(0, 2)
    s.remove(5, 9)
    assert list(s) == [(2, 5)]


def test_remove_across_several_intervals():
    s = IntervalSet([(0, 3), (5, 8), (10, 13)])
    s.remove(2, 11)
    assert list(s) == [(0, 2), (11, 13)]


def test_remove_everything_and_validation():
    s = IntervalSet([(0, 3), (5, 8)])
    s.remove(6, 6)
    assert list(s) == [(0, 3), (5, 8)]
    s.remove(-5, 50)
    assert list(s) == []
    with pytest.raises(ValueError):
        s.remove(3, 1)


def test_find():
    s = IntervalSet([(0, 3), (5, 8)])
    assert s.find(0) == (0, 3)
    assert s.find(2) == (0, 3)
    assert s.find(3) is None
    assert s.find(4) is None
    assert s.find(5) == (5, 8)
    assert s.find(7) == (5, 8)
    assert s.find(8) is None
    assert s.find(-1) is None


def test_negative_points():
    s = IntervalSet([(-10, -5)])
    assert -10 in s
    assert -6 in s
    assert -5 not in s
    assert -11 not in s


@pytest.mark.parametrize(
    ("query", "expected"),
    [((3, 5), False), ((2, 4), True), ((0, 1), False), ((0, 2), True), ((9, 12), True), ((10, 12), False), ((4, 4), False)],
)
def test_overlaps(query, expected):
    s = IntervalSet([(1, 3), (5, 10)])
    assert s.overlaps(*query) is expected


def test_overlaps_validation():
    with pytest.raises(ValueError):
        IntervalSet([(0, 5)]).overlaps(5, 3)


def test_total_length():
    assert IntervalSet([(0, 3), (5, 8), (10, 11)]).total_length() == 7
    assert IntervalSet([(-4, 4)]).total_length() == 8


def test_span():
    assert IntervalSet([(4, 6), (-1, 2), (10, 20)]).span() == (-1, 20)
    with pytest.raises(ValueError):
        IntervalSet().span()


def test_gaps():
    s = IntervalSet([(2, 4), (6, 8)])
    assert s.gaps(0, 10) == [(0, 2), (4, 6), (8, 10)]
    assert s.gaps(2, 8) == [(4, 6)]
    assert s.gaps(3, 7) == [(4, 6)]
    assert s.gaps(4, 6) == [(4, 6)]
    assert s.gaps(2, 4) == []
    assert s.gaps(5, 5) == []
    assert IntervalSet().gaps(1, 3) == [(1, 3)]
    with pytest.raises(ValueError):
        s.gaps(5, 1)


def test_gaps_stops_at_hi():
    s = IntervalSet([(0, 1), (3, 4), (8, 9)])
    assert s.gaps(0, 6) == [(1, 3), (4, 6)]
    assert s.gaps(0, 3) == [(1, 3)]


def test_complement():
    s = IntervalSet([(2, 4)])
    assert list(s.complement(0, 6)) == [(0, 2), (4, 6)]
    assert list(IntervalSet([(0, 6)]).complement(0, 6)) == []


def test_union():
    a = IntervalSet([(0, 2), (10, 12)])
    b = IntervalSet([(2, 4), (20, 21)])
    assert list(a.union(b)) == [(0, 4), (10, 12), (20, 21)]
    assert list(a) == [(0, 2), (10, 12)]


def test_difference():
    a = IntervalSet([(0, 10)])
    b = IntervalSet([(2, 3), (5, 7)])
    assert list(a.difference(b)) == [(0, 2), (3, 5), (7, 10)]
    assert list(a) == [(0, 10)]


def test_intersection():
    a = IntervalSet([(0, 5), (8, 12), (20, 30)])
    b = IntervalSet([(3, 9), (11, 21), (29, 40)])
    assert list(a.intersection(b)) == [(3, 5), (8, 9), (11, 12), (20, 21), (29, 30)]
    assert list(b.intersection(a)) == [(3, 5), (8, 9), (11, 12), (20, 21), (29, 30)]


def test_intersection_touching_is_empty():
    a = IntervalSet([(0, 5)])
    b = IntervalSet([(5, 9)])
    assert list(a.intersection(b)) == []


def test_iteration_returns_copy():
    s = IntervalSet([(0, 2)])
    it = iter(s)
    s.add(5, 6)
    assert list(it) == [(0, 2)]


def test_equality_and_repr():
    assert IntervalSet([(0, 2), (2, 4)]) == IntervalSet([(0, 4)])
    assert IntervalSet([(0, 2)]) != IntervalSet([(0, 3)])
    assert IntervalSet() != [(0, 2)]
    assert repr(IntervalSet([(1, 2), (4, 5)])) == "IntervalSet([(1, 2), (4, 5)])"
