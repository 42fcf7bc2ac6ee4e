"""Exceptions carrying the 0-based source position of the problem."""


class ExprError(Exception):
    """Base class; ``position`` is the 0-based index in the source text."""

    def __init__(self, message: str, position: int) -> None:
        super().__init__(f"{message} at position {position}")
        self.position = position


class TokenizeError(ExprError):
    """An invalid character or malformed number literal."""


class ParseError(ExprError):
    """The token sequence does not form a valid expression."""


class EvalError(ExprError):
    """Evaluation failed (unknown name, division by zero, bad argument, ...)."""
