"""A fixed-size set of bits backed by a Python integer.

Bit ``i`` corresponds to ``1 << i``.  Indexes may be negative, counting from
the end like list indexes (``-1`` is bit ``size - 1``).  The string form is
written most-significant bit first, like a binary literal.
"""

from __future__ import annotations

from itertools import islice
from typing import Iterable, Iterator, Optional


class BitSet:
    """A mutable bitset with a fixed number of bits."""

    __slots__ = ("_size", "_bits")

    def __init__(self, size: int, indexes: Iterable[int] = ()) -> None:
        """Create ``size`` cleared bits, then set each of ``indexes``."""
        if size < 0:
            raise ValueError("size must be non-negative")
        self._size = size
        self._bits = 0
        for index in indexes:
            self.set(index)

    @classmethod
    def from_int(cls, value: int, size: int) -> "BitSet":
        """Create a bitset from a non-negative integer that fits in ``size`` bits."""
        if value < 0 or value >> size:
            raise ValueError(f"value {value} does not fit in {size} bits")
        result = cls(size)
        result._bits = value
        return result

    @classmethod
    def from_string(cls, text: str) -> "BitSet":
        """Parse a string of ``0``/``1`` characters, most-significant bit first."""
        if any(ch not in "01" for ch in text):
            raise ValueError(f"invalid bit string {text!r}")
        return cls.from_int(int(text, 2) if text else 0, len(text))

    @property
    def size(self) -> int:
        return self._size

    def _normalize(self, index: int) -> int:
        if index < 0:
            index += self._size
        if not 0 <= index < self._size:
            raise IndexError(f"bit index out of range for size {self._size}")
        return index

    def _mask(self) -> int:
        return (1 << self._size) - 1

    def _same_size(self, other: "BitSet") -> None:
        if self._size != other._size:
            raise ValueError(f"size mismatch: {self._size} vs {other._size}")

    def _with_bits(self, bits: int) -> "BitSet":
        result = BitSet(self._size)
        result._bits = bits & self._mask()
        return result

    def test(self, index: int) -> bool:
        """Return whether bit ``index`` is set."""
        return bool(self._bits >> self._normalize(index) & 1)

    __getitem__ = test

    def set(self, index: int, value: bool = True) -> None:
        """Set bit ``index`` to ``value`` (default ``True``)."""
        index = self._normalize(index)
        if value:
            self._bits |= 1 << index
        else:
            self._bits &= ~(1 << index)

    __setitem__ = set

    def clear(self, index: int) -> None:
        """Clear bit ``index``."""
        self.set(index, False)

    def toggle(self, index: int) -> None:
        """Flip bit ``index``."""
        self._bits ^= 1 << self._normalize(index)

    def set_all(self) -> None:
        """Set every bit."""
        self._bits = self._mask()

    def clear_all(self) -> None:
        """Clear every bit."""
        self._bits = 0

    def count(self) -> int:
        """Number of set bits."""
        return bin(self._bits).count("1")

    def any(self) -> bool:
        """True if at least one bit is set."""
        return self._bits != 0

    def all(self) -> bool:
        """True if every bit is set (vacuously true for size 0)."""
        return self._bits == self._mask()

    def __iter__(self) -> Iterator[int]:
        """Iterate over the indexes of set bits in ascending order."""
        bits = self._bits
        index = 0
        while bits:
            if bits & 1:
                yield index
            bits >>= 1
            index += 1

    def __len__(self) -> int:
        """The fixed number of bits (not the number of set bits)."""
        return self._size

    def rank(self, index: int) -> int:
        """Number of set bits strictly below ``index`` (``0 <= index <= size``)."""
        if not 0 <= index <= self._size:
            raise IndexError("rank index out of range")
        return bin(self._bits & ((1 << index) - 1)).count("1")

    def select(self, k: int) -> int:
        """Index of the ``k``-th set bit (0-based).

        A negative ``k`` counts from the highest set bit (``-1`` is the last
        set bit).  Raises ``IndexError`` if ``k`` is out of range.
        """
        total = self.count()
        if k < 0:
            k += total
        if not 0 <= k < total:
            raise IndexError(f"select index out of range for {total} set bits")
        return next(islice(iter(self), k, None))

    def first_set(self) -> Optional[int]:
        """Lowest set index, or ``None`` if no bit is set."""
        if not self._bits:
            return None
        return (self._bits ^ (self._bits - 1)).bit_length() - 1

    def last_set(self) -> Optional[int]:
        """Highest set index, or ``None`` if no bit is set."""
        if not self._bits:
            return None
        return self._bits.bit_length() - 1

    def __and__(self, other: "BitSet") -> "BitSet":
        self._same_size(other)
        return self._with_bits(self._bits & other._bits)

    def __or__(self, other: "BitSet") -> "BitSet":
        self._same_size(other)
        return self._with_bits(self._bits | other._bits)

    def __xor__(self, other: "BitSet") -> "BitSet":
        self._same_size(other)
        return self._with_bits(self._bits ^ other._bits)

    def __sub__(self, other: "BitSet") -> "BitSet":
        """Set difference: bits set in ``self`` but not in ``other``."""
        self._same_size(other)
        return self._with_bits(self._bits & ~other._bits)

    def __invert__(self) -> "BitSet":
        return self._with_bits(~self._bits)

    def __lshift__(self, n: int) -> "BitSet":
        """Shift towards higher indexes; bits shifted past the end are lost.

        A negative ``n`` raises ``ValueError``."""
        return self._with_bits(self._bits << n)

    def __rshift__(self, n: int) -> "BitSet":
        """Shift towards lower indexes; bits shifted below 0 are lost.

        A negative ``n`` raises ``ValueError``."""
        return self._with_bits(self._bits >> n)

    def issubset(self, other: "BitSet") -> bool:
        """True if every bit set in ``self`` is also set in ``other``."""
        self._same_size(other)
        return self._bits & ~other._bits == 0

    def to_int(self) -> int:
        return self._bits

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, BitSet):
            return NotImplemented
        return self._size == other._size and self._bits == other._bits

    def __str__(self) -> str:
        return format(self._bits, f"0{self._size}b") if self._size else ""

    def __repr__(self) -> str:
        return f"BitSet({self._size}, {list(self)!r})"
