"""Small exact matrices over :class:`fractions.Fraction`.

All entries are stored as ``Fraction`` so that determinants, inverses and
solutions of linear systems are exact.
"""

from __future__ import annotations

from fractions import Fraction
from typing import List, Sequence, Tuple, Union

Number = Union[int, Fraction]


class ShapeError(ValueError):
    """Raised when matrix dimensions are invalid or incompatible."""


class SingularMatrixError(ArithmeticError):
    """Raised when inverting or solving with a singular matrix."""


class Matrix:
    """An immutable rectangular matrix with at least one row and column."""

    def __init__(self, rows: Sequence[Sequence[Number]]) -> None:
        """Build a matrix from a sequence of equal-length rows.

        Raises :class:`ShapeError` for empty input or ragged rows.
        """
        if not rows or not rows[0]:
            raise ShapeError("matrix must have at least one row and one column")
        width = len(rows[0])
        for row in rows:
            if len(row) != width:
                raise ShapeError("all rows must have the same length")
        self._rows: Tuple[Tuple[Fraction, ...], ...] = tuple(
            tuple(Fraction(x) for x in row) for row in rows
        )

    @classmethod
    def identity(cls, n: int) -> "Matrix":
        """Return the ``n x n`` identity matrix; ``n < 1`` raises :class:`ShapeError`."""
        return cls([[1 if i == j else 0 for j in range(n)] for i in range(n)])

    @classmethod
    def zeros(cls, rows: int, cols: int) -> "Matrix":
        """Return a ``rows x cols`` matrix of zeros (both must be positive)."""
        return cls([[0] * cols for _ in range(rows)])

    @property
    def shape(self) -> Tuple[int, int]:
        """``(rows, columns)``."""
        return len(self._rows), len(self._rows[0])

    @property
    def is_square(self) -> bool:
        rows, cols = self.shape
        return rows == cols

    def __getitem__(self, index: Tuple[int, int]) -> Fraction:
        i, j = index
        return self._rows[i][j]

    def to_lists(self) -> List[List[Fraction]]:
        """Return the entries as a list of row lists."""
        return [list(row) for row in self._rows]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Matrix):
            return NotImplemented
        return self._rows == other._rows

    def __hash__(self) -> int:
        return hash(self._rows)

    def __repr__(self) -> str:
        body = ", ".join("[" + ", ".join(str(x) for x in row) + "]" for row in self._rows)
        return f"Matrix([{body}])"

    def _require_same_shape(self, other: "Matrix") -> None:
        if self.shape != other.shape:
            raise ShapeError(f"shape mismatch: {self.shape} vs {other.shape}")

    def _require_square(self) -> int:
        rows, cols = self.shape
        if rows != cols:
            raise ShapeError(f"matrix is not square: {self.shape}")
        return rows

    def __add__(self, other: "Matrix") -> "Matrix":
        self._require_same_shape(other)
        return Matrix([[a + b for a, b in zip(r, s)] for r, s in zip(self._rows, other._rows)])

    def __sub__(self, other: "Matrix") -> "Matrix":
        self._require_same_shape(other)
        return Matrix([[a - b for a, b in zip(r, s)] for r, s in zip(self._rows, other._rows)])

    def scale(self, factor: Number) -> "Matrix":
        """Multiply every entry by ``factor``."""
        return Matrix([[x * factor for x in row] for row in self._rows])

    def __matmul__(self, other: "Matrix") -> "Matrix":
        """Matrix product; the inner dimensions must agree."""
        n, m = self.shape
        m2, p = other.shape
        if m != m2:
            raise ShapeError(f"cannot multiply {self.shape} by {other.shape}")
        return Matrix(
            [[sum(self._rows[i][k] * other._rows[k][j] for k in range(m)) for j in range(p)] for i in range(n)]
        )

    def transpose(self) -> "Matrix":
        """Return the transposed matrix."""
        return Matrix([list(col) for col in zip(*self._rows)])

    def trace(self) -> Fraction:
        """Sum of the diagonal of a square matrix."""
        n = self._require_square()
        return sum((self._rows[i][i] for i in range(n)), Fraction(0))

    def determinant(self) -> Fraction:
        """Determinant via Gaussian elimination with row swaps."""
        n = self._require_square()
        a = self.to_lists()
        det = Fraction(1)
        for col in range(n):
            pivot = next((r for r in range(col, n) if a[r][col] != 0), None)
            if pivot is None:
                return Fraction(0)
            if pivot != col:
                a[col], a[pivot] = a[pivot], a[col]
                det = -det
            det *= a[col][col]
            for r in range(col + 1, n):
                factor = a[r][col] / a[col][col]
                a[r] = [x - factor * y for x, y in zip(a[r], a[col])]
        return det

    def _gauss_jordan(self, rhs: List[List[Fraction]]) -> List[List[Fraction]]:
        """Reduce ``[self | rhs]`` so the left part becomes the identity; return rhs."""
        n = self._require_square()
        if len(rhs) != n:
            raise ShapeError("right-hand side has the wrong number of rows")
        a = [row + extra for row, extra in zip(self.to_lists(), rhs)]
        for col in range(n):
            pivot = next((r for r in range(col, n) if a[r][col] != 0), None)
            if pivot is None:
                raise SingularMatrixError("matrix is singular")
            a[col], a[pivot] = a[pivot], a[col]
            lead = a[col][col]
            a[col] = [x / lead for x in a[col]]
            for r in range(n):
                if r != col:
                    factor = a[r][col]
                    a[r] = [x - factor * y for x, y in zip(a[r], a[col])]
        return [row[n:] for row in a]

    def inverse(self) -> "Matrix":
        """Exact inverse; raises :class:`SingularMatrixError` if singular."""
        n = self._require_square()
        return Matrix(self._gauss_jordan(Matrix.identity(n).to_lists()))

    def solve(self, b: Sequence[Number]) -> List[Fraction]:
        """Solve ``self @ x = b`` for ``x`` (``self`` must be square, non-singular)."""
        return [row[0] for row in self._gauss_jordan([[Fraction(v)] for v in b])]

    def rank(self) -> int:
        """Number of linearly independent rows (row echelon form)."""
        a = self.to_lists()
        rows, cols = self.shape
        rank = 0
        for col in range(cols):
            pivot = next((r for r in range(rank, rows) if a[r][col] != 0), None)
            if pivot is None:
                continue
            a[rank], a[pivot] = a[pivot], a[rank]
            for r in range(rank + 1, rows):
                factor = a[r][col] / a[rank][col]
                a[r] = [x - factor * y for x, y in zip(a[r], a[rank])]
            rank += 1
        return rank

    def __pow__(self, exponent: int) -> "Matrix":
        """Integer power by repeated squaring; negative powers use the inverse."""
        n = self._require_square()
        base = self.inverse() if exponent < 0 else self
        exponent = abs(exponent)
        result = Matrix.identity(n)
        while exponent > 0:
            if exponent % 2 == 1:
                result = result @ base
            base = base @ base
            exponent //= 2
        return result
