"""Semantic Versioning 2.0.0 parsing and comparison plus npm-style version ranges."""

from semver.ranges import Comparator, Range, max_satisfying, min_satisfying, satisfies
from semver.version import Version, VersionError, compare, parse

__all__ = [
    "Comparator",
    "Range",
    "Version",
    "VersionError",
    "compare",
    "max_satisfying",
    "min_satisfying",
    "parse",
    "satisfies",
]
