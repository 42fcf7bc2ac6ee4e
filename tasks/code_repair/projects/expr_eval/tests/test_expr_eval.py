import math

import pytest

from expr_eval import EvalError, ExprError, ParseError, TokenizeError, evaluate, evaluate_node, format_expr, parse


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1 + 2 * 3", "(1 + (2 * 3))"),
        ("1 - 2 - 3", "((1 - 2) - 3)"),
        ("8 / 4 / 2", "((8 / 4) / 2)"),
        ("2 ^ 3 ^ 2", "(2 ^ (3 ^ 2))"),
        ("-2 ^ 2", "(-(2 ^ 2))"),
        ("2 ^ -1", "(2 ^ (-1))"),
        ("--x", "(-(-x))"),
        ("+x", "(+x)"),
        ("(1 + 2) * 3", "((1 + 2) * 3)"),
        ("a % b * c", "((a % b) * c)"),
        ("1 + -2", "(1 + (-2))"),
        ("max(1, 2 + 3)", "max(1, (2 + 3))"),
        ("f()", "f()"),
        ("2 * x ^ 2", "(2 * (x ^ 2))"),
        ("1.5", "1.5"),
    ],
)
def test_parse_structure(text, expected):
    assert format_expr(parse(text)) == expected


@pytest.mark.parametrize(
    ("text", "position"),
    [
        ("", 0),
        ("1 +", 3),
        ("(1 + 2", 6),
        ("1 + 2)", 5),
        ("* 2", 0),
        ("2 3", 2),
        ("max(1,)", 6),
        ("max(1 2)", 6),
        ("()", 1),
        ("1 ^", 3),
        ("f(", 2),
    ],
)
def test_parse_errors(text, position):
    with pytest.raises(ParseError) as info:
        parse(text)
    assert info.value.position == position


def test_parse_error_messages():
    with pytest.raises(ParseError, match="expected '\\)' but found 'end of input'"):
        parse("(1")
    with pytest.raises(ParseError, match="unexpected 'end of input'"):
        parse("1 -")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1 + 2 * 3", 7),
        ("(1 + 2) * 3", 9),
        ("10 - 4 - 3", 3),
        ("7 / 2", 3.5),
        ("6 / 3", 2.0),
        ("7 % 3", 1),
        ("-7 % 3", 2),
        ("2 ^ 10", 1024),
        ("2 ** 3 ** 2", 512),
        ("-2 ^ 2", -4),
        ("(-2) ^ 2", 4),
        ("2 ^ -1", 0.5),
        ("-3", -3),
        ("+3", 3),
        ("- -3", 3),
        ("4 - -2", 6),
        ("1e2 + .5", 100.5),
        ("2 * 3 % 4", 2),
        ("abs(-5)", 5),
        ("min(3, 1, 2)", 1),
        ("max(3, 1, 2)", 3),
        ("max(4)", 4),
        ("sqrt(16)", 4.0),
        ("0 ^ 0", 1),
        ("(-8) ^ 3", -512),
        ("1 - 1", 0),
        ("min(7)", 7),
        ("1e1+2", 12.0),
        ("0 ^ 0.5", 0.0),
        ("sqrt(0)", 0.0),
    ],
)
def test_evaluate(text, expected):
    result = evaluate(text)
    assert result == expected
    assert type(result) is type(expected)


def test_variables_and_constants():
    assert evaluate("x * y + 1", {"x": 3, "y": 4}) == 13
    assert evaluate("pi") == math.pi
    assert evaluate("e") == math.e
    assert evaluate("pi", {"pi": 3}) == 3
    assert evaluate("2 * r", {"r": 0}) == 0


def test_evaluate_node_reuses_ast():
    tree = parse("a ^ 2 - b")
    assert evaluate_node(tree, {"a": 3, "b": 1}) == 8
    assert evaluate_node(tree, {"a": -2, "b": 5}) == -1


@pytest.mark.parametrize(
    ("text", "position", "message"),
    [
        ("1 / 0", 2, "division by zero"),
        ("5 % (2 - 2)", 2, "division by zero"),
        ("1 + 1 / (x - x)", 6, "division by zero"),
        ("0 ^ -1", 2, "negative power"),
        ("2 ^ 1001", 2, "too large"),
        ("2 ^ -1001", 2, "too large"),
        ("(-8) ^ 0.5", 5, "fractional power"),
        ("sqrt(-1)", 0, "square root"),
        ("1 + foo", 4, "unknown variable"),
        ("foo(1)", 0, "unknown function"),
        ("abs(1, 2)", 0, "wrong number"),
        ("sqrt()", 0, "wrong number"),
        ("sqrt(4, 9)", 0, "wrong number"),
        ("abs()", 0, "wrong number"),
        ("min()", 0, "wrong number"),
        ("2 * max()", 4, "wrong number"),
    ],
)
def test_eval_errors(text, position, message):
    with pytest.raises(EvalError, match=message) as info:
        evaluate(text, {"x": 1})
    assert info.value.position == position


def test_exponent_limit_boundary():
    assert evaluate("1 ^ 1000") == 1
    assert evaluate("1 ^ -1000") == 1.0
    assert evaluate("(-1) ^ 2.0") == 1.0


def test_zero_division_float():
    with pytest.raises(EvalError):
        evaluate("1 / 0.0")
    assert evaluate("0 / 5") == 0.0


def test_ast_nodes_are_immutable():
    import dataclasses

    tree = parse("-f(x) + 1 * 2")
    nodes = [tree, tree.left, tree.left.operand, tree.left.operand.args[0], tree.right.right]
    assert [type(node).__name__ for node in nodes] == ["Binary", "Unary", "Call", "Name", "Number"]
    for node in nodes:
        with pytest.raises(dataclasses.FrozenInstanceError):
            node.position = 99


def test_error_hierarchy():
    for cls in (TokenizeError, ParseError, EvalError):
        assert issubclass(cls, ExprError)
    assert not issubclass(EvalError, ZeroDivisionError)
    with pytest.raises(TokenizeError):
        evaluate("1 & 2")
