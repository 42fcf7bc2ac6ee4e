"""Strict SemVer 2.0.0 versions with correct precedence rules."""

from __future__ import annotations

from dataclasses import dataclass

Identifier = int | str
_ALLOWED = frozenset("0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz-")


class VersionError(ValueError):
    """A version or range string is malformed."""


def parse_numeric(text: str, what: str) -> int:
    """Parse a non-negative integer without leading zeros (``"0"`` is fine)."""
    if not text.isdigit() or not text.isascii():
        raise VersionError(f"{what} must be numeric, got {text!r}")
    if len(text) > 1 and text[0] == "0":
        raise VersionError(f"{what} has a leading zero: {text!r}")
    return int(text)


def _parse_identifiers(text: str, what: str, numeric_allowed: bool) -> tuple[Identifier, ...]:
    """Split dot-separated identifiers; numeric prerelease identifiers become ints."""
    result: list[Identifier] = []
    for part in text.split("."):
        if not part or any(char not in _ALLOWED for char in part):
            raise VersionError(f"invalid {what} identifier {part!r}")
        if numeric_allowed and part.isdigit():
            result.append(parse_numeric(part, what))
        else:
            result.append(part)
    return tuple(result)


@dataclass(frozen=True)
class Version:
    """A semantic version. Build metadata is ignored for equality and ordering."""

    major: int
    minor: int
    patch: int
    prerelease: tuple[Identifier, ...] = ()
    build: tuple[str, ...] = ()

    @property
    def is_prerelease(self) -> bool:
        """True if the version has prerelease identifiers."""
        return bool(self.prerelease)

    @property
    def core(self) -> tuple[int, int, int]:
        """``(major, minor, patch)``."""
        return self.major, self.minor, self.patch

    def _key(self) -> tuple:
        # A release sorts after its prereleases; numeric identifiers sort before alphanumeric ones.
        ids = tuple((isinstance(ident, str), ident) for ident in self.prerelease)
        return (*self.core, not self.prerelease, ids)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Version):
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __lt__(self, other: Version) -> bool:
        return self._key() < other._key()

    def __le__(self, other: Version) -> bool:
        return self._key() <= other._key()

    def __gt__(self, other: Version) -> bool:
        return self._key() > other._key()

    def __ge__(self, other: Version) -> bool:
        return self._key() >= other._key()

    def __str__(self) -> str:
        text = f"{self.major}.{self.minor}.{self.patch}"
        if self.prerelease:
            text += "-" + ".".join(str(ident) for ident in self.prerelease)
        if self.build:
            text += "+" + ".".join(self.build)
        return text

    def bump_major(self) -> Version:
        """Next major version; ``2.0.0-rc.1`` bumps to ``2.0.0``."""
        if self.prerelease and self.minor == 0 and self.patch == 0:
            return Version(self.major, 0, 0)
        return Version(self.major + 1, 0, 0)

    def bump_minor(self) -> Version:
        """Next minor version; ``1.3.0-rc.1`` bumps to ``1.3.0``."""
        if self.prerelease and self.patch == 0:
            return Version(self.major, self.minor, 0)
        return Version(self.major, self.minor + 1, 0)

    def bump_patch(self) -> Version:
        """Next patch version; any prerelease such as ``1.2.3-rc.1`` bumps to ``1.2.3``."""
        if self.prerelease:
            return Version(self.major, self.minor, self.patch)
        return Version(self.major, self.minor, self.patch + 1)


def parse(text: str) -> Version:
    """Parse a strict ``MAJOR.MINOR.PATCH[-PRERELEASE][+BUILD]`` string.

    Numeric parts and numeric prerelease identifiers may not have leading
    zeros; identifiers must be non-empty and use ``[0-9A-Za-z-]``. Raises
    VersionError otherwise.
    """
    core, plus, build_text = text.partition("+")
    core, dash, pre_text = core.partition("-")
    parts = core.split(".")
    if len(parts) != 3:
        raise VersionError(f"expected MAJOR.MINOR.PATCH, got {text!r}")
    major, minor, patch = (parse_numeric(part, name) for part, name in zip(parts, ("major", "minor", "patch")))
    prerelease = _parse_identifiers(pre_text, "prerelease", True) if dash else ()
    build = _parse_identifiers(build_text, "build", False) if plus else ()
    return Version(major, minor, patch, prerelease, build)  # type: ignore[arg-type]


def compare(a: str | Version, b: str | Version) -> int:
    """Return -1, 0 or 1 as ``a`` is lower than, equal to or greater than ``b``."""
    left = a if isinstance(a, Version) else parse(a)
    right = b if isinstance(b, Version) else parse(b)
    return (left > right) - (left < right)
