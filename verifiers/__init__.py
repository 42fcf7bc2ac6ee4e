"""Layered verifiers, reusable checks and verifier suites."""

from envhub.verifiers.checks import (
    AnswerPresent,
    ExactMatch,
    NumericMatch,
    SequenceMatch,
    SetMatch,
    normalize_text,
    parse_number,
)
from envhub.verifiers.layered import GateFailure, Graded, LayeredVerifier

__all__ = [
    "AnswerPresent",
    "ExactMatch",
    "GateFailure",
    "Graded",
    "LayeredVerifier",
    "NumericMatch",
    "SequenceMatch",
    "SetMatch",
    "normalize_text",
    "parse_number",
]
