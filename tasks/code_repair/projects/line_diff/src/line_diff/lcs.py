"""Longest-common-subsequence line matching."""

from __future__ import annotations

from collections.abc import Sequence

EQUAL, DELETE, INSERT = " ", "-", "+"

Op = tuple[str, str]


def _suffix_table(a: Sequence[str], b: Sequence[str]) -> list[list[int]]:
    """``table[i][j]`` is the LCS length of ``a[i:]`` and ``b[j:]``."""
    table = [[0] * (len(b) + 1) for _ in range(len(a) + 1)]
    for i in range(len(a) - 1, -1, -1):
        for j in range(len(b) - 1, -1, -1):
            if a[i] == b[j]:
                table[i][j] = table[i + 1][j + 1] + 1
            else:
                table[i][j] = max(table[i + 1][j], table[i][j + 1])
    return table


def lcs_length(a: Sequence[str], b: Sequence[str]) -> int:
    """Length of the longest common subsequence of two line sequences."""
    return _suffix_table(a, b)[0][0]


def diff_ops(a: Sequence[str], b: Sequence[str]) -> list[Op]:
    """Return a minimal edit script turning ``a`` into ``b``.

    Each op is ``(" ", line)`` (kept), ``("-", line)`` (deleted from ``a``) or
    ``("+", line)`` (inserted from ``b``). When several scripts are minimal,
    deletions are emitted before insertions.
    """
    table = _suffix_table(a, b)
    ops: list[Op] = []
    i = j = 0
    while i < len(a) and j < len(b):
        if a[i] == b[j]:
            ops.append((EQUAL, a[i]))
            i += 1
            j += 1
        elif table[i + 1][j] >= table[i][j + 1]:
            ops.append((DELETE, a[i]))
            i += 1
        else:
            ops.append((INSERT, b[j]))
            j += 1
    ops.extend((DELETE, line) for line in a[i:])
    ops.extend((INSERT, line) for line in b[j:])
    return ops


def similarity(a: Sequence[str], b: Sequence[str]) -> float:
    """Return ``2 * matches / (len(a) + len(b))``; 1.0 when both are empty."""
    total = len(a) + len(b)
    if total == 0:
        return 1.0
    return 2 * lcs_length(a, b) / total
