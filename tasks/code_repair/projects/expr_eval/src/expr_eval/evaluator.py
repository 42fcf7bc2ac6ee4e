"""Evaluate parsed expressions with variables and a few built-in functions."""

import math
from collections.abc import Mapping

from expr_eval.errors import EvalError
from expr_eval.parser import Binary, Call, Name, Node, Number, Unary, parse

MAX_EXPONENT = 1000
CONSTANTS: dict[str, float] = {"pi": math.pi, "e": math.e}
# name -> (minimum arguments, maximum arguments or None for unlimited)
FUNCTIONS: dict[str, tuple[int, int | None]] = {"abs": (1, 1), "min": (1, None), "max": (1, None), "sqrt": (1, 1)}

Value = int | float


def _binary(op: str, left: Value, right: Value, position: int) -> Value:
    if op == "+":
        return left + right
    if op == "-":
        return left - right
    if op == "*":
        return left * right
    if op in ("/", "%"):
        if right == 0:
            raise EvalError("division by zero", position)
        return left / right if op == "/" else left % right
    if left == 0 and right < 0:
        raise EvalError("zero raised to a negative power", position)
    if abs(right) > MAX_EXPONENT:
        raise EvalError("exponent too large", position)
    if left < 0 and right != int(right):
        raise EvalError("fractional power of a negative number", position)
    return left**right


def _call(node: Call, args: list[Value]) -> Value:
    if node.name not in FUNCTIONS:
        raise EvalError(f"unknown function {node.name!r}", node.position)
    low, high = FUNCTIONS[node.name]
    if len(args) < low or (high is not None and len(args) > high):
        raise EvalError(f"wrong number of arguments for {node.name}()", node.position)
    if node.name == "abs":
        return abs(args[0])
    if node.name == "min":
        return min(args)
    if node.name == "max":
        return max(args)
    if args[0] < 0:
        raise EvalError("square root of a negative number", node.position)
    return math.sqrt(args[0])


def evaluate_node(node: Node, variables: Mapping[str, Value] | None = None) -> Value:
    """Evaluate an AST.

    Names are looked up in ``variables`` first, then in CONSTANTS (``pi``,
    ``e``). ``/`` is true division; ``%`` follows Python's sign rules; ``^``
    is exponentiation. Raises EvalError (with the offending position) for
    unknown names or functions, wrong argument counts, division or modulo
    by zero, zero to a negative power, exponents beyond ±1000, fractional
    powers of negative numbers and square roots of negative numbers.
    """
    scope = variables or {}
    if isinstance(node, Number):
        return node.value
    if isinstance(node, Name):
        if node.name in scope:
            return scope[node.name]
        if node.name in CONSTANTS:
            return CONSTANTS[node.name]
        raise EvalError(f"unknown variable {node.name!r}", node.position)
    if isinstance(node, Unary):
        operand = evaluate_node(node.operand, scope)
        return -operand if node.op == "-" else operand
    if isinstance(node, Binary):
        left = evaluate_node(node.left, scope)
        right = evaluate_node(node.right, scope)
        return _binary(node.op, left, right, node.position)
    return _call(node, [evaluate_node(arg, scope) for arg in node.args])


def evaluate(text: str, variables: Mapping[str, Value] | None = None) -> Value:
    """Parse and evaluate ``text``; see :func:`evaluate_node` for the semantics."""
    return evaluate_node(parse(text), variables)
