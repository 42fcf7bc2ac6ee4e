"""RFC 6901 JSON Pointer: parsing, escaping, resolution and RFC 6902-style add/replace/remove."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

_MISSING = object()
_MISSING_SENTINEL = object()


class JsonPointerError(ValueError):
    """Base class for all JSON Pointer errors."""


class PointerSyntaxError(JsonPointerError):
    """The pointer string itself is malformed."""


class ResolutionError(JsonPointerError, LookupError):
    """The pointer does not refer to an existing (or addable) location."""


def escape(token: str) -> str:
    """Escape a reference token: ``~`` -> ``~0`` and ``/`` -> ``~1``."""
    return token.replace("~", "~0").replace("/", "~1")


def unescape(token: str) -> str:
    """Reverse :func:`escape`; ``~01`` becomes ``~1`` (not ``/``).

    Raises PointerSyntaxError for ``~`` not followed by ``0`` or ``1``.
    """
    out = []
    i = 0
    while i < len(token):
        char = token[i]
        if char == "~":
            following = token[i + 1:i + 2]
            if following == "0":
                out.append("~")
            elif following == "1":
                out.append("/")
            else:
                raise PointerSyntaxError(f"invalid escape at position {i} in {token!r}")
            i += 2
        else:
            out.append(char)
            i += 1
    return "".join(out)


def parse(pointer: str) -> list[str]:
    """Split a pointer into unescaped reference tokens (``""`` -> ``[]``).

    Raises PointerSyntaxError if a non-empty pointer does not start with ``/``.
    """
    if pointer == "":
        return []
    if not pointer.startswith("/"):
        raise PointerSyntaxError(f"pointer must start with '/': {pointer!r}")
    return [unescape(token) for token in pointer[1:].split("/")]


def format_pointer(tokens: list[str]) -> str:
    """Build a pointer string from reference tokens."""
    return "".join("/" + escape(token) for token in tokens)


def _array_index(token: str, length: int, allow_end: bool) -> int:
    """Convert ``token`` to a list index.

    ``"-"`` (and an index equal to ``length``) is only valid when ``allow_end``
    is true and then means "append". Leading zeros and non-digits are invalid.
    """
    if token == "-":
        if allow_end:
            return length
        raise ResolutionError("'-' refers to a nonexistent array element")
    if not (token.isascii() and token.isdigit()) or (len(token) > 1 and token[0] == "0"):
        raise ResolutionError(f"invalid array index {token!r}")
    index = int(token)
    limit = length if allow_end else length - 1
    if index > limit:
        raise ResolutionError(f"array index {index} out of range for length {length}")
    return index


def _child(node: Any, token: str) -> Any:
    if isinstance(node, dict):
        if token not in node:
            raise ResolutionError(f"key {token!r} not found")
        return node[token]
    if isinstance(node, list):
        return node[_array_index(token, len(node), allow_end=False)]
    raise ResolutionError(f"cannot descend into {type(node).__name__} with token {token!r}")


def resolve(document: Any, pointer: str, default: Any = _MISSING) -> Any:
    """Return the value ``pointer`` refers to in ``document``.

    If the location does not exist, return ``default`` when given, otherwise
    raise ResolutionError. Syntax errors are always raised.
    """
    tokens = parse(pointer)
    node = document
    try:
        for token in tokens:
            node = _child(node, token)
    except ResolutionError:
        if default is _MISSING:
            raise
        return default
    return node


def exists(document: Any, pointer: str) -> bool:
    """Return True if ``pointer`` refers to an existing value."""
    return resolve(document, pointer, _MISSING_SENTINEL) is not _MISSING_SENTINEL


def _parent_and_token(document: Any, pointer: str) -> tuple[Any, str]:
    tokens = parse(pointer)
    if not tokens:
        raise ResolutionError("the root has no parent")
    parent = document
    for token in tokens[:-1]:
        parent = _child(parent, token)
    if not isinstance(parent, (dict, list)):
        raise ResolutionError(f"parent of {pointer!r} is not a container")
    return parent, tokens[-1]


def add(document: Any, pointer: str, value: Any) -> Any:
    """Add ``value`` at ``pointer`` (RFC 6902 ``add``) and return the document.

    Objects: set the member (replacing any existing one). Arrays: insert
    before the index, shifting later elements; an index equal to the length
    or ``-`` appends. The root pointer ``""`` replaces the whole document,
    which is then returned. Mutates ``document`` in place.
    """
    if pointer == "":
        return value
    parent, token = _parent_and_token(document, pointer)
    if isinstance(parent, dict):
        parent[token] = value
    else:
        parent.insert(_array_index(token, len(parent), allow_end=True), value)
    return document


def replace(document: Any, pointer: str, value: Any) -> Any:
    """Replace the existing value at ``pointer`` and return the document.

    Raises ResolutionError if nothing exists there. ``""`` returns ``value``.
    """
    if pointer == "":
        return value
    parent, token = _parent_and_token(document, pointer)
    if isinstance(parent, dict):
        if token not in parent:
            raise ResolutionError(f"key {token!r} not found")
        parent[token] = value
    else:
        parent[_array_index(token, len(parent), allow_end=False)] = value
    return document


def remove(document: Any, pointer: str) -> Any:
    """Remove the value at ``pointer`` and return the removed value.

    Array elements after it shift down. Raises ResolutionError for missing
    locations or the root pointer.
    """
    parent, token = _parent_and_token(document, pointer)
    if isinstance(parent, dict):
        if token not in parent:
            raise ResolutionError(f"key {token!r} not found")
        return parent.pop(token)
    return parent.pop(_array_index(token, len(parent), allow_end=False))


def iter_pointers(document: Any, prefix: str = "") -> Iterator[str]:
    """Yield the pointer of every value in ``document``, depth-first, root first.

    Object members are visited in insertion order, array elements by index.
    """
    yield prefix
    if isinstance(document, dict):
        for key, child in document.items():
            yield from iter_pointers(child, f"{prefix}/{escape(key)}")
    elif isinstance(document, list):
        for index, child in enumerate(document):
            yield from iter_pointers(child, f"{prefix}/{index}")
