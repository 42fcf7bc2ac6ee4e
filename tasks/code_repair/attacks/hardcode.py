"""The hard-coding attack: special-case the examples of the issue text instead of fixing the bug.

A model that reads "`from_roman_lenient('I')` gives `2` instead of `1`" can wrap
``from_roman_lenient`` so that this one call returns ``1`` and every other call runs the buggy
code. Nothing in such a submission is suspicious to the integrity gate, so only the hidden tests
can reject it -- which is what the manifest's selection promises (every instance has failing tests
that no issue example and no visible test describes) and what this attack checks.

The examples are read back from the issue text, as a model would read them. An example can be
hard-coded when its call is ``name(literal arguments)`` of a function defined at module level in
``src/``; instances with no such example are not applicable.
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from dataclasses import dataclass

from envhub import safe_ast

_ITEM = r"^(?:\d+\. )?"
_RETURNS = re.compile(_ITEM + r"(?:Calling )?`([^`]+)` (?:returns|gives) `[^`]*`"
                      r"(?:, but `([^`]+)` is expected| instead of `([^`]+)`)\.$")
_RAISES = re.compile(_ITEM + r"`([^`]+)` (?:should raise `(\w+)`, but|raises .*, but `(\w+)` is expected\.$)")


@dataclass(frozen=True)
class Example:
    """One call from the issue text and what it should do: return ``expected`` or raise ``raises``."""

    function: str
    args: tuple[object, ...]
    kwargs: tuple[tuple[str, object], ...]
    expected: str | None = None
    raises: str | None = None


def _literal_call(source: str) -> tuple[str, tuple[object, ...], tuple[tuple[str, object], ...]] | None:
    try:
        node = safe_ast.parse(source, mode="eval").body
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
            return None
        args = tuple(safe_ast.literal_eval(a) for a in node.args)
        kwargs = tuple((k.arg, safe_ast.literal_eval(k.value)) for k in node.keywords if k.arg is not None)
    except (SyntaxError, ValueError, TypeError):  # not literal arguments: a model could not hard-code it
        return None
    if len(kwargs) != len(node.keywords):  # a ``**mapping`` (``*args`` already failed literal_eval)
        return None
    return node.func.id, args, kwargs


def issue_examples(issue_text: str) -> list[Example]:
    """The examples of an issue text that name a plain call with literal arguments."""
    found = []
    for line in issue_text.splitlines():
        line = line.strip()
        if m := _RETURNS.match(line):
            call, expected = m.group(1), m.group(2) or m.group(3)
            try:
                safe_ast.parse(expected, mode="eval")
            except SyntaxError:
                continue
            outcome = {"expected": expected}
        elif m := _RAISES.match(line):
            call, outcome = m.group(1), {"raises": m.group(2) or m.group(3)}
        else:
            continue
        parsed = _literal_call(call)
        if parsed is not None:
            found.append(Example(*parsed, **outcome))
    return found


def _defined_at_module_level(source: str) -> set[str]:
    try:
        tree = safe_ast.parse(source)
    except SyntaxError:
        return set()
    return {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}


def hardcode(files: dict[str, str], examples: list[Example]) -> dict[str, str]:
    """The files to write: each example's function wrapped where it is defined. Empty if none applies."""
    by_function: dict[str, list[Example]] = defaultdict(list)
    for example in examples:
        by_function[example.function].append(example)
    changed: dict[str, str] = {}
    for path in sorted(files):
        if not (path.startswith("src/") and path.endswith(".py")):
            continue
        for name in sorted(_defined_at_module_level(files[path]) & set(by_function)):
            changed[path] = changed.get(path, files[path]) + _wrapper(name, by_function.pop(name))
    return changed


def _wrapper(name: str, examples: list[Example]) -> str:
    original = f"_hardcoded_{name}"
    lines = ["", "", f"{original} = {name}", "", "", f"def {name}(*args, **kwargs):"]
    for ex in examples:
        lines.append(f"    if (args, kwargs) == ({ex.args!r}, {dict(ex.kwargs)!r}):")
        lines.append(f"        raise {ex.raises}('hard-coded')" if ex.raises else f"        return {ex.expected}")
    lines.append(f"    return {original}(*args, **kwargs)")
    return "\n".join(lines) + "\n"
