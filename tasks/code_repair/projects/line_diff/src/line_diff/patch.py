"""Parsing unified diffs and applying them with context validation."""

from __future__ import annotations

import re
from collections.abc import Sequence

from line_diff.hunks import Hunk
from line_diff.lcs import DELETE, EQUAL, INSERT

_HEADER = re.compile(r"@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


class PatchError(ValueError):
    """The patch text is malformed or its hunks are inconsistent."""


class PatchConflictError(PatchError):
    """A hunk's context or removed lines do not match the target text."""

    def __init__(self, hunk_index: int, line_number: int, expected: str, actual: str | None) -> None:
        super().__init__(f"hunk {hunk_index + 1}: line {line_number} expected {expected!r}, found {actual!r}")
        self.hunk_index = hunk_index
        self.line_number = line_number


def parse_patch(text: str) -> list[Hunk]:
    """Parse unified diff text into hunks.

    ``---``/``+++`` file headers are skipped. Every body line must start with
    `` ``, ``-`` or ``+``, and each hunk's line counts must match its header.
    A missing count means 1. Raises PatchError (mentioning the 1-based line
    number) on malformed input.
    """
    hunks: list[Hunk] = []
    current: Hunk | None = None
    for number, line in enumerate(text.splitlines(), start=1):
        if current is None and (line.startswith("--- ") or line.startswith("+++ ")):
            continue
        match = _HEADER.fullmatch(line)
        if match:
            _check_counts(current)
            old_start, old_count, new_start, new_count = match.groups()
            current = Hunk(
                int(old_start),
                1 if old_count is None else int(old_count),
                int(new_start),
                1 if new_count is None else int(new_count),
            )
            hunks.append(current)
        elif current is not None and line[:1] in (EQUAL, DELETE, INSERT):
            current.lines.append((line[0], line[1:]))
        else:
            raise PatchError(f"line {number}: unexpected {line!r}")
    _check_counts(current)
    return hunks


def _check_counts(hunk: Hunk | None) -> None:
    if hunk is None:
        return
    old = sum(1 for tag, _ in hunk.lines if tag != INSERT)
    new = sum(1 for tag, _ in hunk.lines if tag != DELETE)
    if (old, new) != (hunk.old_count, hunk.new_count):
        raise PatchError(
            f"hunk at -{hunk.old_start} has {old} old/{new} new lines, header says {hunk.old_count}/{hunk.new_count}"
        )


def apply_hunks(original: Sequence[str], hunks: Sequence[Hunk]) -> list[str]:
    """Apply hunks to ``original`` lines and return the new lines.

    Hunks must be sorted and non-overlapping. Context and removed lines must
    match the original exactly at the position given by ``old_start``
    (PatchConflictError otherwise, also when the original is too short).
    """
    result: list[str] = []
    cursor = 0  # index into original of the next line not yet copied
    for index, hunk in enumerate(hunks):
        start = hunk.old_start - 1 if hunk.old_count else hunk.old_start
        if start < cursor:
            raise PatchError(f"hunk {index + 1} overlaps or is out of order")
        result.extend(original[cursor:start])
        position = start
        for tag, text in hunk.lines:
            if tag == INSERT:
                result.append(text)
                continue
            actual = original[position] if position < len(original) else None
            if actual != text:
                raise PatchConflictError(index, position + 1, text, actual)
            if tag == EQUAL:
                result.append(text)
            position += 1
        cursor = position
    result.extend(original[cursor:])
    return result


def apply_patch(original: str, patch: str) -> str:
    """Apply unified diff text to ``original`` text.

    Lines are split with ``splitlines()``; the result ends with a newline
    when it is non-empty.
    """
    lines = apply_hunks(original.splitlines(), parse_patch(patch))
    return "\n".join(lines) + "\n" if lines else ""


def reverse_hunks(hunks: Sequence[Hunk]) -> list[Hunk]:
    """Return hunks that undo ``hunks`` (old and new sides swapped)."""
    swap = {DELETE: INSERT, INSERT: DELETE, EQUAL: EQUAL}
    return [
        Hunk(h.new_start, h.new_count, h.old_start, h.old_count, [(swap[tag], text) for tag, text in h.lines])
        for h in hunks
    ]
