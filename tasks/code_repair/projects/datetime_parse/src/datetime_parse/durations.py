"""ISO-8601 durations such as ``P3DT4H`` or ``-PT1.5S``."""

from __future__ import annotations

import re
from dataclasses import dataclass

from datetime_parse.errors import ParseError

_DATE_UNITS = "YMWD"
_TIME_UNITS = "HMS"
_NUMBER = re.compile(r"\d+(?:\.\d+)?")
_SECONDS_PER = {"W": 7 * 86400, "D": 86400, "H": 3600, "M": 60}


@dataclass(frozen=True)
class Duration:
    """A parsed duration; all components are non-negative, ``negative`` flips the sign."""

    years: int = 0
    months: int = 0
    weeks: int = 0
    days: int = 0
    hours: int = 0
    minutes: int = 0
    seconds: float = 0
    negative: bool = False

    def total_seconds(self) -> float:
        """Return the signed length in seconds.

        Raises ValueError if years or months are present, because their
        length in seconds is not fixed.
        """
        if self.years or self.months:
            raise ValueError("years and months have no fixed length")
        total = (
            self.weeks * _SECONDS_PER["W"]
            + self.days * _SECONDS_PER["D"]
            + self.hours * _SECONDS_PER["H"]
            + self.minutes * _SECONDS_PER["M"]
            + self.seconds
        )
        return -total if self.negative else total


def parse_duration(text: str) -> Duration:
    """Parse an ISO-8601 duration ``[-]PnYnMnWnDTnHnMnS``.

    Components must appear in the order above, each at most once, and at least
    one must be present; a ``T`` must be followed by a time component. Only
    the seconds component may carry a decimal fraction. Raises ParseError
    otherwise.
    """
    negative = text.startswith("-")
    body = text[1:] if negative else text
    if not body.startswith("P"):
        raise ParseError(f"duration must start with 'P': {text!r}")
    values: dict[str, float] = {}
    allowed = _DATE_UNITS
    section = "date"
    pos = 1
    while pos < len(body):
        char = body[pos]
        if char == "T":
            if section == "time":
                raise ParseError(f"repeated 'T' in {text!r}")
            if pos == len(body) - 1:
                raise ParseError(f"'T' without time components in {text!r}")
            section, allowed = "time", _TIME_UNITS
            pos += 1
            continue
        start = pos
        while pos < len(body) and (body[pos].isdigit() or body[pos] == "."):
            pos += 1
        number = body[start:pos]
        if not number:
            raise ParseError(f"expected a number at position {start} in {text!r}")
        if pos == len(body):
            raise ParseError(f"number without unit in {text!r}")
        unit = body[pos]
        index = allowed.find(unit)
        if index < 0:
            raise ParseError(f"unexpected or out-of-order unit {unit!r} in {text!r}")
        allowed = allowed[index + 1:]
        key = unit.lower() if section == "date" else unit
        if not _NUMBER.fullmatch(number):
            raise ParseError(f"malformed number {number!r} in {text!r}")
        if "." in number:
            if key != "S":
                raise ParseError(f"fraction only allowed on seconds in {text!r}")
            values[key] = float(number)
        else:
            values[key] = int(number)
        pos += 1
    if not values:
        raise ParseError(f"empty duration: {text!r}")
    return Duration(
        years=int(values.get("y", 0)),
        months=int(values.get("m", 0)),
        weeks=int(values.get("w", 0)),
        days=int(values.get("d", 0)),
        hours=int(values.get("H", 0)),
        minutes=int(values.get("M", 0)),
        seconds=values.get("S", 0),
        negative=negative,
    )


def format_duration(seconds: int) -> str:
    """Format a whole number of seconds as a canonical duration string.

    Uses days, hours, minutes and seconds, omitting zero components:
    ``90061 -> 'P1DT1H1M1S'``, ``3600 -> 'PT1H'``, ``0 -> 'PT0S'``, and a
    leading ``-`` for negative values.
    """
    sign = "-" if seconds < 0 else ""
    remaining = abs(seconds)
    days, remaining = divmod(remaining, 86400)
    hours, remaining = divmod(remaining, 3600)
    minutes, secs = divmod(remaining, 60)
    date_part = f"{days}D" if days else ""
    time_part = "".join(f"{value}{unit}" for value, unit in ((hours, "H"), (minutes, "M"), (secs, "S")) if value)
    if not date_part and not time_part:
        time_part = "0S"
    return f"{sign}P{date_part}" + (f"T{time_part}" if time_part else "")
