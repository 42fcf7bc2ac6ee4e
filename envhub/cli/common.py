"""What every ``envhub`` command shares: the consoles, how an error is said, ``--env-arg`` pairs and
env ids. Each part's ``cli.py`` uses these; no command imports another's private helpers."""

from __future__ import annotations

import json
import sys
from typing import Any

import typer
from rich.console import Console

# Piped output (logs, CI, tests) gets a wide console so ids and paths are never wrapped.
console = Console(width=None if sys.stdout.isatty() else 200)
err = Console(stderr=True, width=None if sys.stderr.isatty() else 200)


def fail(message: str, code: int = 2) -> typer.Exit:
    """Print ``message`` as an error on stderr (as it is: brackets such as ``envhub[serve]`` are no
    markup) and return the ``typer.Exit`` to raise: exit 2 for bad input, 1 for a failed run."""
    from rich.markup import escape

    err.print(f"[bold red]error:[/] {escape(message)}", soft_wrap=True)
    return typer.Exit(code)


def parse_kv(pairs: list[str] | None, option: str = "--env-arg") -> dict[str, Any]:
    """``key=value`` pairs (``--env-arg``); values are JSON when they parse, else strings."""
    out: dict[str, Any] = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise fail(f"{option} expects key=value, got {pair!r}")
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            out[key] = value
    return out


def env_spec(env_id: str) -> Any:
    """The registered :class:`~envhub.registry.EnvSpec` of ``env_id``; exit 2 naming the close
    matches when there is none."""
    from envhub.registry import UnknownEnvError, get_spec

    try:
        return get_spec(env_id)
    except UnknownEnvError as exc:
        raise fail(str(exc)) from None
