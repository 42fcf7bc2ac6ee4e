"""A rule-based English word and sentence tokenizer with character offsets.

Token kinds:

* ``"word"``   -- letters/digits, with internal apostrophes or hyphens
                  (``don't``, ``well-known``), or a number glued to letters
                  (``3rd``, ``10km``);
* ``"number"`` -- digits with optional thousands groups and a decimal part
                  (``1,234.5``);
* ``"abbrev"`` -- known abbreviations (``Dr.``), dotted acronyms
                  (``U.S.A.``, ``e.g.``) and initials (``J.``);
* ``"punct"``  -- any other single non-space character, or an ellipsis.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Tuple

ABBREVIATIONS = frozenset({"mr.", "mrs.", "ms.", "dr.", "prof.", "st.", "jr.", "vs.", "etc.", "inc."})
CONTRACTION_SUFFIXES = ("n't", "'s", "'re", "'ve", "'ll", "'d", "'m")
TERMINATORS = ".!?"
CLOSERS = "\"')]"
ELLIPSES = ("...", "\u2026")


@dataclass(frozen=True)
class Token:
    """A token and its ``[start, end)`` character span in the source text."""

    text: str
    start: int
    end: int
    kind: str


def _scan_word(text: str, i: int) -> int:
    """Return the end of the alphanumeric word starting at ``i``.

    An apostrophe or hyphen is part of the word only when it sits between
    an alphanumeric character and a letter.
    """
    j = i
    n = len(text)
    while j < n:
        if text[j].isalnum():
            j += 1
        elif text[j] in "'-" and j + 1 < n and text[j + 1].isalpha():
            j += 2
        else:
            break
    return j


def _scan_number(text: str, i: int) -> int:
    """Return the end of the number starting at ``i``.

    Thousands separators are accepted only after a leading group of at most
    three digits and must be followed by exactly three digits.
    """
    n = len(text)
    j = i
    while j < n and text[j].isdigit():
        j += 1
    if j - i <= 3:
        while (
            j + 3 < n
            and text[j] == ","
            and text[j + 1 : j + 4].isdigit()
            and (j + 4 == n or not text[j + 4].isdigit())
        ):
            j += 4
    if j + 1 < n and text[j] == "." and text[j + 1].isdigit():
        j += 1
        while j < n and text[j].isdigit():
            j += 1
    return j


def _scan_dotted(text: str, i: int) -> Tuple[int, int]:
    """Scan single letters each followed by a dot (``U.S.A.``).

    Returns ``(end, groups)``; ``groups`` is 0 when there is no such pattern.
    """
    j = i
    groups = 0
    while j + 1 < len(text) and text[j].isalpha() and text[j + 1] == ".":
        j += 2
        groups += 1
    return j, groups


def _split_contraction(word: str, start: int) -> List[Token]:
    lower = word.lower()
    for suffix in CONTRACTION_SUFFIXES:
        if lower.endswith(suffix) and len(word) > len(suffix):
            cut = len(word) - len(suffix)
            return [
                Token(word[:cut], start, start + cut, "word"),
                Token(word[cut:], start + cut, start + len(word), "word"),
            ]
    return [Token(word, start, start + len(word), "word")]


def tokenize(text: str, split_contractions: bool = False) -> List[Token]:
    """Split ``text`` into tokens (see the module docstring for the kinds).

    With ``split_contractions`` words such as ``don't`` or ``we'll`` are
    split into ``do`` + ``n't`` and ``we`` + ``'ll``.
    """
    tokens: List[Token] = []
    i = 0
    n = len(text)
    while i < n:
        ch = text[i]
        if ch.isspace():
            i += 1
            continue
        if ch.isdigit():
            end = _scan_number(text, i)
            kind = "number"
            if end < n and text[end].isalpha():
                end = _scan_word(text, end)
                kind = "word"
            tokens.append(Token(text[i:end], i, end, kind))
        elif ch.isalpha():
            end, groups = _scan_dotted(text, i)
            if groups >= 2 or (groups == 1 and ch.isupper() and ch != "I"):
                tokens.append(Token(text[i:end], i, end, "abbrev"))
            else:
                end = _scan_word(text, i)
                if text[end : end + 1] == "." and text[i : end + 1].lower() in ABBREVIATIONS:
                    end += 1
                    tokens.append(Token(text[i:end], i, end, "abbrev"))
                elif split_contractions:
                    tokens.extend(_split_contraction(text[i:end], i))
                else:
                    tokens.append(Token(text[i:end], i, end, "word"))
        else:
            end = i + 1
            if text.startswith("...", i):
                end = i + 3
            tokens.append(Token(text[i:end], i, end, "punct"))
        i = end
    return tokens


def words(text: str, split_contractions: bool = False, lower: bool = False) -> List[str]:
    """Return the texts of all non-punctuation tokens, optionally lower-cased."""
    result = [
        tok.text for tok in tokenize(text, split_contractions) if tok.kind != "punct"
    ]
    return [w.lower() for w in result] if lower else result


def _ends_sentence(tok: Token, following: Optional[Token]) -> bool:
    if tok.text in ELLIPSES:
        return following is None or following.text[0].isupper()
    return following is None or not following.text[0].islower()


def sentence_spans(text: str) -> List[Tuple[int, int]]:
    """Return ``(start, end)`` spans of the sentences in ``text``.

    A sentence ends at ``.``, ``!`` or ``?`` (together with any immediately
    adjacent terminators and closing quotes/brackets) unless the next token
    starts with a lowercase letter.  After an ellipsis a sentence ends only
    if the next token starts with an uppercase letter.  Abbreviations and
    decimal numbers never end a sentence.
    """
    tokens = tokenize(text)
    spans: List[Tuple[int, int]] = []
    first = 0
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        if tok.kind == "punct" and (tok.text in TERMINATORS or tok.text in ELLIPSES):
            j = i + 1
            while (
                j < len(tokens)
                and tokens[j].start == tokens[j - 1].end
                and (tokens[j].text in TERMINATORS or tokens[j].text in CLOSERS)
            ):
                j += 1
            following = tokens[j] if j < len(tokens) else None
            if _ends_sentence(tok, following):
                spans.append((tokens[first].start, tokens[j - 1].end))
                first = j
            i = j
            continue
        i += 1
    if first < len(tokens):
        spans.append((tokens[first].start, tokens[-1].end))
    return spans


def sentences(text: str) -> List[str]:
    """Return the sentence strings of ``text`` (see :func:`sentence_spans`)."""
    return [text[start:end] for start, end in sentence_spans(text)]
