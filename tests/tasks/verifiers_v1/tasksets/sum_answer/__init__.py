"""A single-turn Verifiers v1 taskset (local data only): the sum of two numbers, answered in text."""

from sum_answer.taskset import SumAnswerTaskset

__all__ = ["SumAnswerTaskset"]
