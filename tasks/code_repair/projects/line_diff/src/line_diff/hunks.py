"""Grouping of edit operations into unified-diff hunks."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from line_diff.lcs import DELETE, EQUAL, INSERT, Op, diff_ops


@dataclass
class Hunk:
    """A contiguous block of changes with surrounding context.

    ``old_start``/``new_start`` are 1-based line numbers; when a side has no
    lines (count 0) its start is the number of the line *after which* the
    change applies (0 for the beginning of the file).
    """

    old_start: int
    old_count: int
    new_start: int
    new_count: int
    lines: list[Op] = field(default_factory=list)


def _range(start: int, count: int) -> str:
    return str(start) if count == 1 else f"{start},{count}"


def format_hunk_header(hunk: Hunk) -> str:
    """Return ``@@ -old +new @@``; a count of 1 is omitted (``-3`` instead of ``-3,1``)."""
    return f"@@ -{_range(hunk.old_start, hunk.old_count)} +{_range(hunk.new_start, hunk.new_count)} @@"


def make_hunks(a: Sequence[str], b: Sequence[str], context: int = 3) -> list[Hunk]:
    """Diff ``a`` and ``b`` and group the changes into hunks.

    Each hunk includes up to ``context`` unchanged lines before and after its
    changes; two changes separated by at most ``2 * context`` unchanged lines
    share a hunk. Raises ValueError for negative ``context``.
    """
    if context < 0:
        raise ValueError("context must be non-negative")
    ops = diff_ops(a, b)
    old_before: list[int] = []
    new_before: list[int] = []
    old_seen = new_seen = 0
    for tag, _ in ops:
        old_before.append(old_seen)
        new_before.append(new_seen)
        old_seen += tag != INSERT
        new_seen += tag != DELETE
    changes = [index for index, (tag, _) in enumerate(ops) if tag != EQUAL]
    groups: list[list[int]] = []
    for index in changes:
        if groups and index - groups[-1][-1] - 1 <= 2 * context:
            groups[-1].append(index)
        else:
            groups.append([index])
    hunks = []
    for group in groups:
        first = max(0, group[0] - context)
        last = min(len(ops), group[-1] + context + 1)
        lines = ops[first:last]
        old_count = sum(1 for tag, _ in lines if tag != INSERT)
        new_count = sum(1 for tag, _ in lines if tag != DELETE)
        old_start = old_before[first] + (1 if old_count else 0)
        new_start = new_before[first] + (1 if new_count else 0)
        hunks.append(Hunk(old_start, old_count, new_start, new_count, list(lines)))
    return hunks


def unified_diff(
    a: Sequence[str],
    b: Sequence[str],
    from_name: str = "a",
    to_name: str = "b",
    context: int = 3,
) -> str:
    """Render a unified diff of two line lists (lines without newlines).

    Returns ``""`` when the inputs are equal; otherwise ``--- from``, ``+++ to``
    and the hunks, each line terminated by ``\\n``.
    """
    hunks = make_hunks(a, b, context)
    if not hunks:
        return ""
    out = [f"--- {from_name}", f"+++ {to_name}"]
    for hunk in hunks:
        out.append(format_hunk_header(hunk))
        out.extend(tag + text for tag, text in hunk.lines)
    return "\n".join(out) + "\n"
