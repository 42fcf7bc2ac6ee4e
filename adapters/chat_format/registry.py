"""The known chat families and how a tokenizer's family is found (or refused)."""

from __future__ import annotations

import contextlib
import weakref

from envhub.adapters.chat_format.base import ChatFormat, Tokenizer
from envhub.adapters.chat_format.chatml import ChatMLFormat
from envhub.adapters.chat_format.llama3 import Llama3Format
from envhub.adapters.chat_format.mistral import MistralFormat
from envhub.adapters.chat_format.qwen3 import Qwen3Format, Qwen3NoThinkFormat

#: Known families, tried in this order by detection (Qwen3 before ChatML: it is ChatML with more).
FORMATS: list[type[ChatFormat]] = [Qwen3Format, ChatMLFormat, Llama3Format, MistralFormat, Qwen3NoThinkFormat]

#: What each tokenizer (while its template is unchanged) was found to be.
_FOUND: weakref.WeakKeyDictionary[object, tuple[str | None, str | None, ChatFormat]] = weakref.WeakKeyDictionary()


class UnsupportedChatFormat(ValueError):
    """A tokenizer whose chat template no known family renders as its template does."""


def known() -> str:
    return "; ".join(f"{f.name} ({f.models})" for f in FORMATS)


def _refusal(reasons: list[str]) -> UnsupportedChatFormat:
    return UnsupportedChatFormat(
        "this tokenizer's chat template is not one envhub can render turn by turn ("
        + "; ".join(reasons) + f"). Supported chat families: {known()}. A family that detection misses "
        "is named with chat_format=NAME (hf:PATH?chat_format=NAME; chat_format: NAME in a trainer config); a new family is a ChatFormat subclass "
        "added to envhub.adapters.chat_format.FORMATS (docs/training.md, \"Chat families\")")


def format_named(name: str) -> type[ChatFormat]:
    for fmt in FORMATS:
        if fmt.name == name:
            return fmt
    raise ValueError(f"unknown chat_format {name!r}; known: {', '.join(f.name for f in FORMATS)}")


def chat_format_for(tokenizer: Tokenizer, name: str | None = None) -> ChatFormat:
    """The chat format of a tokenizer's model family (``name``: that family, checked all the same);
    raises :class:`UnsupportedChatFormat` for a template no known family reproduces."""
    template = getattr(tokenizer, "chat_template", None)
    key = template if isinstance(template, str) else repr(template)
    try:
        cached = _FOUND.get(tokenizer)
    except TypeError:
        cached = None
    if cached is not None and cached[:2] == (key, name):
        return cached[2]
    reasons: list[str] = []
    found: ChatFormat | None = None
    for cls in [format_named(name)] if name else [f for f in FORMATS if f.detected]:
        missing = cls.missing_tokens(tokenizer)
        if missing:
            reasons.append(f"{cls.name}: the tokenizer lacks {', '.join(missing)}")
            continue
        fmt = cls()
        why = fmt.disagreement(tokenizer)
        if why is None:
            found = fmt
            break
        reasons.append(f"{cls.name}: {why}")
    if found is None:
        raise _refusal(reasons)
    with contextlib.suppress(TypeError):  # a tokenizer that takes no weak reference is checked every time
        _FOUND[tokenizer] = (key, name, found)
    return found
