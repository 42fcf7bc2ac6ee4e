"""Arithmetic expression tokenizer, recursive-descent parser and evaluator."""

from expr_eval.errors import EvalError, ExprError, ParseError, TokenizeError
from expr_eval.evaluator import evaluate, evaluate_node
from expr_eval.parser import format_expr, parse
from expr_eval.tokenizer import Token, tokenize

__all__ = [
    "EvalError",
    "ExprError",
    "ParseError",
    "Token",
    "TokenizeError",
    "evaluate",
    "evaluate_node",
    "format_expr",
    "parse",
    "tokenize",
]
