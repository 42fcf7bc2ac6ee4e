"""An INI file parser with typed getters, a DEFAULT section and ``${section:key}`` interpolation."""

from __future__ import annotations

import re

DEFAULT_SECTION = "DEFAULT"
MAX_INTERPOLATION_DEPTH = 10
COMMENT_PREFIXES = ("#", ";")
TRUE_WORDS = frozenset({"1", "yes", "true", "on"})
FALSE_WORDS = frozenset({"0", "no", "false", "off"})

_MISSING = object()
_INLINE_COMMENT = re.compile(r"\s[#;]")


class ConfigError(Exception):
    """Base class for configuration errors; ``lineno`` is 1-based when known."""

    def __init__(self, message: str, lineno: int | None = None) -> None:
        super().__init__(message if lineno is None else f"line {lineno}: {message}")
        self.lineno = lineno


class ParseError(ConfigError):
    """A line could not be parsed."""


class MissingSectionHeaderError(ParseError):
    """An option appeared before any section header."""


class DuplicateSectionError(ConfigError):
    """A section header appeared twice."""


class DuplicateOptionError(ConfigError):
    """An option appeared twice within one section."""


class NoSectionError(ConfigError):
    """The requested section does not exist."""


class NoOptionError(ConfigError):
    """The requested option does not exist in the section or in DEFAULT."""


class InterpolationError(ConfigError):
    """A ``${...}`` reference is malformed, missing or recursive."""


def _strip_inline_comment(text: str) -> str:
    """Remove a ``#`` or ``;`` comment that is preceded by whitespace."""
    match = _INLINE_COMMENT.search(text)
    return text[:match.start()].rstrip() if match else text


class Config:
    """Parsed configuration: ordered sections of case-insensitive option names."""

    def __init__(self) -> None:
        self._sections: dict[str, dict[str, str]] = {}
        self._defaults: dict[str, str] = {}

    @classmethod
    def parse(cls, text: str) -> Config:
        """Parse INI ``text``.

        Rules: ``[name]`` starts a section (``[DEFAULT]`` holds fallbacks for
        every section); ``key = value`` or ``key: value`` (split at the first
        ``=`` or ``:``) defines an option whose name is lower-cased; full-line
        comments start with ``#`` or ``;`` and inline comments need whitespace
        before the marker; an indented line continues the previous value.
        Raises ParseError, MissingSectionHeaderError, DuplicateSectionError or
        DuplicateOptionError with the offending line number.
        """
        config = cls()
        current: dict[str, str] | None = None
        last_key: str | None = None
        for lineno, raw in enumerate(text.splitlines(), start=1):
            stripped = raw.strip()
            if not stripped or stripped.startswith(COMMENT_PREFIXES):
                continue
            if raw[0].isspace() and last_key is not None:
                current[last_key] += "\n" + _strip_inline_comment(stripped)
                continue
            if stripped.startswith("["):
                if not stripped.endswith("]"):
                    raise ParseError("unterminated section header", lineno)
                name = stripped[1:-1].strip()
                if not name:
                    raise ParseError("empty section name", lineno)
                if name == DEFAULT_SECTION:
                    current = config._defaults
                elif name in config._sections:
                    raise DuplicateSectionError(f"duplicate section {name!r}", lineno)
                else:
                    current = config._sections.setdefault(name, {})
                last_key = None
                continue
            positions = [pos for pos in (stripped.find("="), stripped.find(":")) if pos >= 0]
            if not positions:
                raise ParseError(f"expected 'key = value', got {stripped!r}", lineno)
            if current is None:
                raise MissingSectionHeaderError("option outside of any section", lineno)
            split = min(positions)
            key = stripped[:split].strip().lower()
            if not key:
                raise ParseError("empty option name", lineno)
            if key in current:
                raise DuplicateOptionError(f"duplicate option {key!r}", lineno)
            current[key] = _strip_inline_comment(stripped[split + 1:].strip())
            last_key = key
        return config

    def sections(self) -> list[str]:
        """Return section names in file order (DEFAULT is not included)."""
        return list(self._sections)

    def has_section(self, section: str) -> bool:
        """Return True if ``section`` exists (DEFAULT does not count)."""
        return section in self._sections

    def options(self, section: str) -> list[str]:
        """Return the option names of ``section`` followed by inherited DEFAULT names."""
        own = list(self._require_section(section))
        return own + [key for key in self._defaults if key not in own]

    def has_option(self, section: str, key: str) -> bool:
        """Return True if the option is set in ``section`` or DEFAULT.

        Returns False for a section that does not exist.
        """
        if section != DEFAULT_SECTION and section not in self._sections:
            return False
        return self._lookup(section, key.lower()) is not None

    def set(self, section: str, key: str, value: str) -> None:
        """Set an option, creating the section if necessary."""
        target = self._defaults if section == DEFAULT_SECTION else self._sections.setdefault(section, {})
        target[key.lower()] = value

    def _require_section(self, section: str) -> dict[str, str]:
        if section == DEFAULT_SECTION:
            return self._defaults
        if section not in self._sections:
            raise NoSectionError(f"no section {section!r}")
        return self._sections[section]

    def _lookup(self, section: str, key: str) -> str | None:
        values = self._sections.get(section, {})
        if key in values:
            return values[key]
        return self._defaults.get(key)

    def get(self, section: str, key: str, fallback: object = _MISSING, raw: bool = False) -> str:
        """Return an option value, with interpolation unless ``raw`` is true.

        A missing option returns ``fallback`` if given, else raises NoOptionError.
        A missing section always raises NoSectionError.
        """
        self._require_section(section)
        value = self._lookup(section, key.lower())
        if value is None:
            if fallback is _MISSING:
                raise NoOptionError(f"no option {key!r} in section {section!r}")
            return fallback  # type: ignore[return-value]
        return value if raw else self._interpolate(section, value, 1)

    def _interpolate(self, section: str, value: str, depth: int) -> str:
        """Expand ``${key}`` (same section), ``${section:key}`` and ``$$`` (literal ``$``)."""
        if depth > MAX_INTERPOLATION_DEPTH:
            raise InterpolationError(f"interpolation too deep in section {section!r}")
        out: list[str] = []
        i = 0
        while i < len(value):
            char = value[i]
            if char != "$":
                out.append(char)
                i += 1
                continue
            following = value[i + 1:i + 2]
            if following == "$":
                out.append("$")
                i += 2
                continue
            if following != "{":
                raise InterpolationError(f"'$' must be followed by '{{' or '$' at position {i}")
            close = value.find("}", i + 2)
            if close == -1:
                raise InterpolationError("unterminated '${' reference")
            reference = value[i + 2:close]
            ref_section, _, ref_key = reference.rpartition(":")
            ref_section = ref_section or section
            resolved = self._lookup(ref_section, ref_key.strip().lower())
            if resolved is None:
                raise InterpolationError(f"bad reference ${{{reference}}}")
            out.append(self._interpolate(ref_section, resolved, depth + 1))
            i = close + 1
        return "".join(out)

    def get_int(self, section: str, key: str, fallback: object = _MISSING) -> int:
        """Return an option parsed with ``int()``; raises ValueError if not an integer."""
        value = self.get(section, key, fallback)
        return value if value is fallback else int(value)  # type: ignore[return-value]

    def get_float(self, section: str, key: str, fallback: object = _MISSING) -> float:
        """Return an option parsed with ``float()``; raises ValueError if not a number."""
        value = self.get(section, key, fallback)
        return value if value is fallback else float(value)  # type: ignore[return-value]

    def get_bool(self, section: str, key: str, fallback: object = _MISSING) -> bool:
        """Return an option as a bool.

        Accepts (case-insensitively) 1/yes/true/on and 0/no/false/off; any
        other value raises ValueError.
        """
        value = self.get(section, key, fallback)
        if value is fallback:
            return value  # type: ignore[return-value]
        word = value.strip().lower()
        if word in TRUE_WORDS:
            return True
        if word in FALSE_WORDS:
            return False
        raise ValueError(f"not a boolean: {value!r}")

    def to_string(self) -> str:
        """Serialise to INI text (DEFAULT first, then sections; raw values)."""
        blocks = []
        named = [(DEFAULT_SECTION, self._defaults)] if self._defaults else []
        for name, values in named + list(self._sections.items()):
            lines = [f"[{name}]"]
            for key, value in values.items():
                lines.append(f"{key} = " + value.replace("\n", "\n    "))
            blocks.append("\n".join(lines) + "\n")
        return "\n".join(blocks)
