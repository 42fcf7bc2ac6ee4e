"""Exception types used by the parsers."""


class ParseError(ValueError):
    """Raised when a date, time or duration string is malformed or out of range."""
