"""npm-style version ranges: comparators, ``^``, ``~``, X-ranges, hyphen ranges and ``||``."""

import re
from collections.abc import Iterable
from dataclasses import dataclass

from semver.version import Version, VersionError, parse, parse_numeric

_OPERATORS = ("<=", ">=", "<", ">", "=", "^", "~")
_PARTIAL = re.compile(
    r"v?(?P<major>[0-9]+|[xX*])"
    r"(?:\.(?P<minor>[0-9]+|[xX*]))?"
    r"(?:\.(?P<patch>[0-9]+|[xX*])(?P<rest>[-+].*)?)?"
)

Partial = tuple[int | None, int | None, int | None, Version | None]


@dataclass(frozen=True)
class Comparator:
    """A primitive constraint such as ``>=1.2.0``."""

    operator: str
    version: Version

    def test(self, version: Version) -> bool:
        """Return True if ``version`` satisfies this comparator."""
        if self.operator == "<":
            return version < self.version
        if self.operator == "<=":
            return version <= self.version
        if self.operator == ">":
            return version > self.version
        if self.operator == ">=":
            return version >= self.version
        return version == self.version

    def __str__(self) -> str:
        return f"{self.operator}{self.version}"


def _floor(major: int, minor: int = 0, patch: int = 0) -> Version:
    """The lowest version with this core, i.e. ``M.m.p-0``."""
    return Version(major, minor, patch, (0,))


def _parse_partial(text: str) -> Partial:
    """Parse ``1``, ``1.2``, ``1.x``, ``*`` or a full version into its parts.

    Wildcards (and anything after one) become None. The fourth element is the
    full Version when all three numbers are given, else None.
    """
    match = _PARTIAL.fullmatch(text)
    if not match:
        raise VersionError(f"invalid version in range: {text!r}")
    numbers: list[int | None] = []
    for name in ("major", "minor", "patch"):
        part = match.group(name)
        if part is None or part in "xX*" or (numbers and numbers[-1] is None):
            numbers.append(None)
        else:
            numbers.append(parse_numeric(part, name))
    major, minor, patch = numbers
    if patch is None:
        if match.group("rest"):
            raise VersionError(f"prerelease or build on a partial version: {text!r}")
        return major, minor, patch, None
    return major, minor, patch, parse(text.lstrip("v"))


def _desugar(operator: str, text: str) -> list[Comparator]:
    """Translate one operator + (partial) version into primitive comparators."""
    major, minor, patch, full = _parse_partial(text)
    if operator in ("", "="):
        if full is not None:
            return [Comparator("=", full)]
        operator = "~" if minor is not None else "^"
    if major is None:
        return [Comparator("<", _floor(0))] if operator in ("<", ">") else []
    low = full if full is not None else Version(major, minor or 0, patch or 0)
    if operator == "^":
        if major > 0 or minor is None:
            high = _floor(major + 1)
        elif minor > 0 or patch is None:
            high = _floor(0, minor + 1)
        else:
            high = _floor(0, 0, patch + 1)
        return [Comparator(">=", low), Comparator("<", high)]
    if operator == "~":
        high = _floor(major + 1) if minor is None else _floor(major, minor + 1)
        return [Comparator(">=", low), Comparator("<", high)]
    if operator == ">=":
        return [Comparator(">=", low)]
    if operator == "<":
        return [Comparator("<", full if full is not None else _floor(major, minor or 0))]
    if full is not None:
        return [Comparator(operator, full)]
    # ">" and "<=" on a partial version both refer to the next version after it.
    following = Version(major + 1, 0, 0) if minor is None else Version(major, minor + 1, 0)
    if operator == ">":
        return [Comparator(">=", following)]
    return [Comparator("<", _floor(*following.core))]


def _parse_set(text: str) -> list[Comparator]:
    tokens = text.split()
    if len(tokens) == 3 and tokens[1] == "-":
        return _desugar(">=", tokens[0]) + _desugar("<=", tokens[2])
    comparators: list[Comparator] = []
    index = 0
    while index < len(tokens):
        token = tokens[index]
        if token in _OPERATORS:
            if index + 1 == len(tokens):
                raise VersionError(f"operator {token!r} without a version")
            token += tokens[index + 1]
            index += 1
        operator = next((op for op in _OPERATORS if token.startswith(op)), "")
        comparators.extend(_desugar(operator, token[len(operator):]))
        index += 1
    return comparators


class Range:
    """A union (``||``) of comparator sets; a version must satisfy every comparator of one set."""

    def __init__(self, text: str) -> None:
        """Parse a range such as ``">=1.2 <2 || ^3.1.0"`` or ``"1.2.3 - 2"``.

        Raises VersionError for malformed ranges.
        """
        self.sets = [_parse_set(part) for part in text.split("||")]

    def test(self, version: str | Version, include_prerelease: bool = False) -> bool:
        """Return True if ``version`` satisfies the range.

        Unless ``include_prerelease`` is true, a prerelease version only
        matches a set containing a comparator with a prerelease on the same
        ``major.minor.patch`` (e.g. ``1.2.3-beta.2`` matches ``>=1.2.3-beta.1``
        but ``1.2.4-beta`` does not).
        """
        target = version if isinstance(version, Version) else parse(version)
        for comparators in self.sets:
            if not all(comparator.test(target) for comparator in comparators):
                continue
            if not target.prerelease or include_prerelease:
                return True
            if any(c.version.prerelease and c.version.core == target.core for c in comparators):
                return True
        return False

    def __str__(self) -> str:
        return " || ".join(" ".join(str(c) for c in comparators) or "*" for comparators in self.sets)


def satisfies(version: str | Version, range_text: str, include_prerelease: bool = False) -> bool:
    """Shorthand for ``Range(range_text).test(version, include_prerelease)``."""
    return Range(range_text).test(version, include_prerelease)


def _matching(versions: Iterable[str | Version], range_text: str) -> list[Version]:
    rng = Range(range_text)
    parsed = [v if isinstance(v, Version) else parse(v) for v in versions]
    return [v for v in parsed if rng.test(v)]


def max_satisfying(versions: Iterable[str | Version], range_text: str) -> Version | None:
    """Return the highest version in ``versions`` satisfying the range, or None."""
    return max(_matching(versions, range_text), default=None)


def min_satisfying(versions: Iterable[str | Version], range_text: str) -> Version | None:
    """Return the lowest version in ``versions`` satisfying the range, or None."""
    return min(_matching(versions, range_text), default=None)
