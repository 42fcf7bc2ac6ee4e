from fractions import Fraction as F

import pytest

from matrix_ops import Matrix, ShapeError, SingularMatrixError


def test_construction_converts_to_fractions():
    m = Matrix([[1, 2], [F(1, 2), 3]])
    assert m.shape == (2, 2)
    assert m[1, 0] == F(1, 2)
    assert isinstance(m[0, 0], F)
    assert m.to_lists() == [[1, 2], [F(1, 2), 3]]


@pytest.mark.parametrize("rows", [[], [[]], [[1, 2], [3]], [[1], [2, 3]]])
def test_construction_shape_errors(rows):
    with pytest.raises(ShapeError):
        Matrix(rows)


def test_shape_error_is_value_error():
    with pytest.raises(ValueError):
        Matrix([])


def test_identity_and_zeros():
    assert Matrix.identity(3).to_lists() == [[1, 0, 0], [0, 1, 0], [0, 0, 1]]
    assert Matrix.identity(1) == Matrix([[1]])
    assert Matrix.zeros(2, 3).to_lists() == [[0, 0, 0], [0, 0, 0]]
    assert Matrix.zeros(1, 1).shape == (1, 1)
    with pytest.raises(ShapeError):
        Matrix.identity(0)
    with pytest.raises(ShapeError):
        Matrix.zeros(0, 2)
    with pytest.raises(ShapeError):
        Matrix.zeros(2, 0)
    with pytest.raises(ShapeError):
        Matrix.identity(-2)


def test_is_square():
    assert Matrix([[1, 2], [3, 4]]).is_square
    assert not Matrix([[1, 2, 3], [4, 5, 6]]).is_square


def test_equality_hash_repr():
    a = Matrix([[1, 2], [3, 4]])
    assert a == Matrix([[F(2, 2), 2], [3, 4]])
    assert a != Matrix([[1, 2], [3, 5]])
    assert a != [[1, 2], [3, 4]]
    assert hash(a) == hash(Matrix([[1, 2], [3, 4]]))
    assert repr(Matrix([[1, F(1, 2)]])) == "Matrix([[1, 1/2]])"


def test_add_sub_scale():
    a = Matrix([[1, 2], [3, 4]])
    b = Matrix([[10, 20], [30, 40]])
    assert (a + b).to_lists() == [[11, 22], [33, 44]]
    assert (b - a).to_lists() == [[9, 18], [27, 36]]
    assert a.scale(F(1, 2)).to_lists() == [[F(1, 2), 1], [F(3, 2), 2]]
    with pytest.raises(ShapeError):
        a + Matrix([[1, 2]])
    with pytest.raises(ShapeError):
        a - Matrix([[1], [2]])


def test_matmul():
    a = Matrix([[1, 2, 3], [4, 5, 6]])
    b = Matrix([[7, 8], [9, 10], [11, 12]])
    assert (a @ b).to_lists() == [[58, 64], [139, 154]]
    assert (b @ a).shape == (3, 3)
    assert (b @ a)[2, 0] == 11 * 1 + 12 * 4
    assert a @ Matrix.identity(3) == a


def test_matmul_shape_error():
    with pytest.raises(ShapeError):
        Matrix([[1, 2]]) @ Matrix([[1, 2]])


def test_transpose():
    a = Matrix([[1, 2, 3], [4, 5, 6]])
    assert a.transpose().to_lists() == [[1, 4], [2, 5], [3, 6]]
    assert a.transpose().transpose() == a


def test_trace():
    assert Matrix([[1, 2], [3, 4]]).trace() == 5
    assert Matrix([[F(1, 2)]]).trace() == F(1, 2)
    assert Matrix([[-1, 9, 9], [9, 0, 9], [9, 9, 2]]).trace() == 1
    with pytest.raises(ShapeError):
        Matrix([[1, 2]]).trace()


@pytest.mark.parametrize(
    "rows, det",
    [
        ([[5]], 5),
        ([[1, 2], [3, 4]], -2),
        ([[0, 1], [1, 0]], -1),
        ([[2, 0, 0], [0, 3, 0], [0, 0, 4]], 24),
        ([[0, 2, 1], [1, 0, 0], [0, 0, 3]], -6),
        ([[1, 2, 3], [4, 5, 6], [7, 8, 9]], 0),
        ([[0, 0], [0, 7]], 0),
        ([[F(1, 2), F(1, 3)], [F(1, 4), F(1, 5)]], F(1, 10) - F(1, 12)),
        ([[2, -1, 0, 1], [1, 3, 2, 0], [0, 1, 1, 4], [3, 0, 2, 1]], -34),
        ([[0, 1, 0], [0, 0, 1], [1, 0, 0]], 1),
    ],
)
def test_determinant(rows, det):
    assert Matrix(rows).determinant() == det


def test_determinant_non_square():
    with pytest.raises(ShapeError):
        Matrix([[1, 2, 3], [4, 5, 6]]).determinant()


def test_inverse():
    a = Matrix([[4, 7], [2, 6]])
    inv = a.inverse()
    assert inv.to_lists() == [[F(3, 5), F(-7, 10)], [F(-1, 5), F(2, 5)]]
    assert a @ inv == Matrix.identity(2)


def test_inverse_requires_row_swap():
    a = Matrix([[0, 1, 2], [1, 0, 3], [4, -3, 8]])
    inv = a.inverse()
    assert a @ inv == Matrix.identity(3)
    assert inv @ a == Matrix.identity(3)
    assert inv.to_lists() == [[-F(9, 2), 7, -F(3, 2)], [-2, 4, -1], [F(3, 2), -2, F(1, 2)]]


def test_inverse_singular_and_non_square():
    with pytest.raises(SingularMatrixError):
        Matrix([[1, 2], [2, 4]]).inverse()
    with pytest.raises(ArithmeticError):
        Matrix([[0]]).inverse()
    with pytest.raises(ShapeError):
        Matrix([[1, 2]]).inverse()


def test_solve():
    a = Matrix([[2, 1, -1], [-3, -1, 2], [-2, 1, 2]])
    assert a.solve([8, -11, -3]) == [2, 3, -1]
    assert Matrix([[0, 2], [3, 0]]).solve([4, 9]) == [3, 2]
    assert Matrix([[3]]).solve([1]) == [F(1, 3)]


def test_solve_errors():
    with pytest.raises(ShapeError):
        Matrix([[1, 0], [0, 1]]).solve([1, 2, 3])
    with pytest.raises(ShapeError):
        Matrix([[1, 0, 0], [0, 1, 0]]).solve([1, 2])
    with pytest.raises(SingularMatrixError):
        Matrix([[1, 1], [1, 1]]).solve([1, 2])


@pytest.mark.parametrize(
    "rows, rank",
    [
        ([[1, 2], [3, 4]], 2),
        ([[1, 2], [2, 4]], 1),
        ([[0, 0], [0, 0]], 0),
        ([[1, 2, 3], [4, 5, 6], [7, 8, 9]], 2),
        ([[0, 1, 2], [0, 2, 4], [1, 0, 0]], 2),
        ([[1, 2, 3, 4]], 1),
        ([[0, 0, 5], [0, 3, 0]], 2),
        ([[1], [2], [3]], 1),
        ([[1, 0], [0, 1], [1, 1]], 2),
    ],
)
def test_rank(rows, rank):
    assert Matrix(rows).rank() == rank


def test_power():
    fib = Matrix([[1, 1], [1, 0]])
    assert fib ** 0 == Matrix.identity(2)
    assert Matrix([[1, 1], [1, 1]]) ** 0 == Matrix.identity(2)
    assert fib ** 1 == fib
    assert (fib ** 10).to_lists() == [[89, 55], [55, 34]]
    assert (fib ** 5).to_lists() == [[8, 5], [5, 3]]


def test_negative_power_uses_inverse():
    a = Matrix([[2, 0], [0, 4]])
    assert (a ** -1).to_lists() == [[F(1, 2), 0], [0, F(1, 4)]]
    assert (a ** -2).to_lists() == [[F(1, 4), 0], [0, F(1, 16)]]
    with pytest.raises(SingularMatrixError):
        Matrix([[1, 1], [1, 1]]) ** -1
    with pytest.raises(ShapeError):
        Matrix([[1, 2]]) ** 2
