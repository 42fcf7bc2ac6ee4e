"""LCS-based line diffs, unified-format hunks and context-validated patch application."""

from line_diff.hunks import Hunk, format_hunk_header, make_hunks, unified_diff
from line_diff.lcs import diff_ops, lcs_length, similarity
from line_diff.patch import PatchConflictError, PatchError, apply_hunks, apply_patch, parse_patch, reverse_hunks

__all__ = [
    "Hunk",
    "PatchConflictError",
    "PatchError",
    "apply_hunks",
    "apply_patch",
    "diff_ops",
    "format_hunk_header",
    "lcs_length",
    "make_hunks",
    "parse_patch",
    "reverse_hunks",
    "similarity",
    "unified_diff",
]
