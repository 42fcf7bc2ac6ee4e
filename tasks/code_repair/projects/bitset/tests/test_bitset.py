import pytest

from bitset import BitSet


def test_new_bitset_is_empty():
    bs = BitSet(10)
    assert len(bs) == 10
    assert bs.size == 10
    assert bs.count() == 0
    assert not bs.any()
    assert not bs.all()
    assert list(bs) == []
    assert bs.to_int() == 0


def test_constructor_with_indexes():
    bs = BitSet(8, [0, 3, -1])
    assert list(bs) == [0, 3, 7]
    assert bs.to_int() == 0b10001001


def test_negative_size_rejected():
    with pytest.raises(ValueError):
        BitSet(-1)


def test_zero_size():
    bs = BitSet(0)
    assert str(bs) == ""
    assert bs.all()
    assert not bs.any()
    assert bs.rank(0) == 0
    with pytest.raises(IndexError):
        bs.test(0)


def test_set_clear_toggle():
    bs = BitSet(5)
    bs.set(1)
    bs.set(4)
    assert list(bs) == [1, 4]
    bs.clear(1)
    assert list(bs) == [4]
    bs.clear(1)
    assert list(bs) == [4]
    bs.toggle(0)
    bs.toggle(4)
    assert list(bs) == [0]
    bs.set(2, False)
    assert list(bs) == [0]
    bs.set(2, True)
    assert list(bs) == [0, 2]


def test_item_access():
    bs = BitSet(4)
    bs[2] = True
    assert bs[2] is True
    assert bs[1] is False
    bs[2] = False
    assert bs.test(2) is False


@pytest.mark.parametrize("index, expected", [(-1, 5), (-6, 0), (0, 0), (5, 5), (-3, 3)])
def test_negative_indexes(index, expected):
    bs = BitSet(6)
    bs.set(index)
    assert list(bs) == [expected]
    assert bs.test(index)


@pytest.mark.parametrize("index", [6, 7, -7, 100])
def test_index_out_of_range(index):
    bs = BitSet(6)
    with pytest.raises(IndexError):
        bs.set(index)
    with pytest.raises(IndexError):
        bs.test(index)
    with pytest.raises(IndexError):
        bs.toggle(index)
    with pytest.raises(IndexError):
        bs.clear(index)


def test_set_all_clear_all():
    bs = BitSet(5)
    bs.set_all()
    assert bs.count() == 5
    assert bs.all()
    assert bs.to_int() == 0b11111
    bs.clear_all()
    assert bs.count() == 0
    assert bs.to_int() == 0


def test_any_all():
    bs = BitSet(3, [0, 1])
    assert bs.any()
    assert not bs.all()
    bs.set(2)
    assert bs.all()


@pytest.mark.parametrize(
    "value, size, expected",
    [(0, 0, []), (0b101, 3, [0, 2]), (0b101, 8, [0, 2]), (255, 8, list(range(8))), (1, 1, [0])],
)
def test_from_int(value, size, expected):
    assert list(BitSet.from_int(value, size)) == expected


@pytest.mark.parametrize("value, size", [(8, 3), (1, 0), (-1, 4), (256, 8)])
def test_from_int_errors(value, size):
    with pytest.raises(ValueError):
        BitSet.from_int(value, size)


def test_from_string_and_str_roundtrip():
    bs = BitSet.from_string("0110")
    assert list(bs) == [1, 2]
    assert bs.size == 4
    assert str(bs) == "0110"
    assert str(BitSet(5, [0])) == "00001"
    assert str(BitSet(3, [2])) == "100"
    assert BitSet.from_string("") == BitSet(0)


@pytest.mark.parametrize("text", ["012", "1 0", "abc", "-1", "+1", "1_0", " 10", "10\n"])
def test_from_string_invalid(text):
    with pytest.raises(ValueError):
        BitSet.from_string(text)


def test_binary_operations():
    a = BitSet.from_string("1100")
    b = BitSet.from_string("1010")
    assert str(a & b) == "1000"
    assert str(a | b) == "1110"
    assert str(a ^ b) == "0110"
    assert str(a - b) == "0100"
    assert str(b - a) == "0010"
    assert str(a) == "1100"


def test_invert_respects_size():
    bs = BitSet.from_string("0101")
    inv = ~bs
    assert str(inv) == "1010"
    assert inv.to_int() == 0b1010
    assert (~BitSet(3)).all()
    assert ~~bs == bs


def test_size_mismatch():
    a = BitSet(4)
    b = BitSet(5)
    for op in (lambda: a & b, lambda: a | b, lambda: a ^ b, lambda: a - b, lambda: a.issubset(b)):
        with pytest.raises(ValueError):
            op()


def test_shifts():
    bs = BitSet.from_string("0110")
    assert str(bs << 1) == "1100"
    assert str(bs << 2) == "1000"
    assert str(bs << 4) == "0000"
    assert str(bs >> 1) == "0011"
    assert str(bs >> 2) == "0001"
    assert str(bs >> 3) == "0000"
    assert str(bs << 0) == "0110"
    assert str(bs >> 0) == "0110"
    assert (bs << 3).to_int() == 0
    with pytest.raises(ValueError):
        bs << -1
    with pytest.raises(ValueError):
        bs >> -1


@pytest.mark.parametrize("index, expected", [(0, 0), (1, 1), (2, 1), (3, 1), (4, 2), (7, 2), (8, 3), (10, 4)])
def test_rank(index, expected):
    bs = BitSet(10, [0, 3, 7, 9])
    assert bs.rank(index) == expected


@pytest.mark.parametrize("index", [-1, 11])
def test_rank_out_of_range(index):
    with pytest.raises(IndexError):
        BitSet(10).rank(index)


def test_select():
    bs = BitSet(10, [0, 3, 7, 9])
    assert [bs.select(k) for k in range(4)] == [0, 3, 7, 9]
    with pytest.raises(IndexError):
        bs.select(4)
    with pytest.raises(IndexError):
        BitSet(3).select(0)
    with pytest.raises(IndexError):
        BitSet(3).select(-1)


@pytest.mark.parametrize("k, expected", [(-1, 9), (-2, 7), (-4, 0)])
def test_select_negative_counts_from_end(k, expected):
    assert BitSet(10, [0, 3, 7, 9]).select(k) == expected


def test_select_negative_out_of_range():
    with pytest.raises(IndexError):
        BitSet(10, [0, 3, 7, 9]).select(-5)


def test_rank_select_inverse():
    bs = BitSet(64, [1, 2, 5, 8, 13, 21, 34, 55, 63])
    for k in range(bs.count()):
        assert bs.rank(bs.select(k)) == k


def test_first_and_last_set():
    assert BitSet(8).first_set() is None
    assert BitSet(8).last_set() is None
    bs = BitSet(8, [2, 5])
    assert bs.first_set() == 2
    assert bs.last_set() == 5
    one = BitSet(8, [0])
    assert one.first_set() == 0
    assert one.last_set() == 0
    top = BitSet(8, [7])
    assert top.first_set() == 7


def test_issubset():
    small = BitSet.from_string("0100")
    big = BitSet.from_string("0110")
    assert small.issubset(big)
    assert not big.issubset(small)
    assert big.issubset(big)
    assert BitSet(4).issubset(small)


def test_equality_and_unhashable():
    assert BitSet(4, [1]) == BitSet.from_string("0010")
    assert BitSet(4, [1]) != BitSet(5, [1])
    assert BitSet(4, [1]) != BitSet(4, [2])
    assert BitSet(4) != 0
    with pytest.raises(TypeError):
        hash(BitSet(4))


def test_repr():
    assert repr(BitSet(6, [1, 4])) == "BitSet(6, [1, 4])"
    assert repr(BitSet(0)) == "BitSet(0, [])"


def test_iteration_large_sparse():
    bs = BitSet(200, [0, 64, 199])
    assert list(bs) == [0, 64, 199]
    assert bs.count() == 3
    assert bs.rank(200) == 3
