"""Greedy word wrapping, full justification, alignment, indentation and shortening."""

from __future__ import annotations


def _check_width(width: int, *indents: str) -> None:
    """Raise ValueError if ``width`` < 1 or any indent leaves no room for text."""
    if width < 1:
        raise ValueError(f"width must be at least 1, got {width}")
    for indent_text in indents:
        if len(indent_text) >= width:
            raise ValueError(f"indent {indent_text!r} does not fit in width {width}")


def wrap(
    text: str,
    width: int,
    initial_indent: str = "",
    subsequent_indent: str = "",
    break_long_words: bool = True,
) -> list[str]:
    """Greedily wrap ``text`` into lines of at most ``width`` characters.

    Whitespace (including newlines) is collapsed; words are packed onto a line
    while they fit, separated by single spaces. The first line is prefixed by
    ``initial_indent`` and the others by ``subsequent_indent``; indents count
    toward ``width``. A word longer than the available room starts a new line
    and, if ``break_long_words`` is true, is split into chunks that fill whole
    lines; otherwise it is left on its own over-long line. Returns [] for
    blank text. Raises ValueError for ``width < 1`` or an indent that is not
    shorter than ``width``.
    """
    _check_width(width, initial_indent, subsequent_indent)
    lines: list[str] = []
    current = ""

    def indent() -> str:
        return subsequent_indent if lines else initial_indent

    for word in text.split():
        room = width - len(indent())
        if current and len(current) + 1 + len(word) <= room:
            current += " " + word
            continue
        if current:
            lines.append(indent() + current)
            room = width - len(indent())
        while break_long_words and len(word) > room:
            lines.append(indent() + word[:room])
            word = word[room:]
            room = width - len(indent())
        current = word
    if current:
        lines.append(indent() + current)
    return lines


def fill(text: str, width: int, **options: object) -> str:
    """Like :func:`wrap` but return a single string joined with newlines."""
    return "\n".join(wrap(text, width, **options))  # type: ignore[arg-type]


def justify_line(line: str, width: int) -> str:
    """Stretch ``line`` to exactly ``width`` by widening the gaps between words.

    Extra spaces are distributed as evenly as possible, leftmost gaps first.
    A single-word line is returned unchanged. Raises ValueError if the words
    (with single spaces) are already wider than ``width``.
    """
    words = line.split()
    if len(words) < 2:
        return line
    letters = sum(len(word) for word in words)
    gaps = len(words) - 1
    if letters + gaps > width:
        raise ValueError(f"line is longer than {width}: {line!r}")
    base, extra = divmod(width - letters, gaps)
    parts = []
    for index, word in enumerate(words[:-1]):
        parts.append(word + " " * (base + (1 if index < extra else 0)))
    parts.append(words[-1])
    return "".join(parts)


def justify(text: str, width: int) -> list[str]:
    """Wrap ``text`` and fully justify every line except the last."""
    lines = wrap(text, width)
    return [justify_line(line, width) for line in lines[:-1]] + lines[-1:]


def align(line: str, width: int, how: str = "left") -> str:
    """Pad ``line`` with spaces to ``width``: ``"left"``, ``"right"`` or ``"center"``.

    When centering, an odd leftover space goes on the right. Raises
    ValueError for an unknown alignment or a line longer than ``width``.
    """
    if len(line) > width:
        raise ValueError(f"line is longer than {width}: {line!r}")
    padding = width - len(line)
    if how == "left":
        return line + " " * padding
    if how == "right":
        return " " * padding + line
    if how == "center":
        left = padding // 2
        return " " * left + line + " " * (padding - left)
    raise ValueError(f"unknown alignment {how!r}")


def indent(text: str, prefix: str, skip_blank: bool = True) -> str:
    """Prefix every line of ``text`` with ``prefix``, keeping line endings.

    Whitespace-only lines are left alone unless ``skip_blank`` is false.
    """
    out = []
    for line in text.splitlines(keepends=True):
        if skip_blank and not line.strip():
            out.append(line)
        else:
            out.append(prefix + line)
    return "".join(out)


def shorten(text: str, width: int, placeholder: str = " [...]") -> str:
    """Collapse whitespace and truncate ``text`` at a word boundary to fit ``width``.

    If the collapsed text fits it is returned as is. Otherwise as many whole
    words as fit together with ``placeholder`` are kept; if not even the first
    word fits, the placeholder alone (with leading spaces stripped) is
    returned. Raises ValueError if the placeholder itself is longer than
    ``width``.
    """
    words = text.split()
    collapsed = " ".join(words)
    if len(collapsed) <= width:
        return collapsed
    if len(placeholder.lstrip()) > width:
        raise ValueError("placeholder too long for width")
    kept = ""
    for word in words:
        candidate = f"{kept} {word}" if kept else word
        if len(candidate) + len(placeholder) > width:
            break
        kept = candidate
    return kept + placeholder if kept else placeholder.lstrip()
