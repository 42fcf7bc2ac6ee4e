"""``ast.parse`` and ``ast.literal_eval`` that many threads may call at once.

CPython 3.11 keeps the recursion bookkeeping of its AST conversion in interpreter-wide state, so
two threads parsing at the same time can corrupt it ("SystemError: AST constructor recursion
depth mismatch"). Verifiers grade episodes on worker threads, so every parse that can run there
goes through one lock (``literal_eval`` of a string parses too).

Standard library only: Harbor task exports copy this file next to ``integrity.py``.
"""

from __future__ import annotations

import ast
import threading
from typing import Any, Literal

_LOCK = threading.Lock()


def parse(source: str, mode: Literal["exec", "eval"] = "exec") -> Any:
    """``ast.parse(source, mode=mode)``, serialized: an ``ast.Module`` (or ``ast.Expression``)."""
    with _LOCK:
        return ast.parse(source, mode=mode)


def literal_eval(node_or_text: str | ast.AST) -> Any:
    """``ast.literal_eval``, serialized (a node needs no parse, but one rule is simpler)."""
    with _LOCK:
        return ast.literal_eval(node_or_text)
