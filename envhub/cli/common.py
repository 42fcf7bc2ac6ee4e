"""What every ``envhub`` command shares: the consoles, how an error is said, ``--env-arg`` pairs and
env ids. Each part's ``cli.py`` uses these; no command imports another's private helpers."""

from __future__ import annotations

import contextlib
import json
import signal
import sys
from collections.abc import Iterator
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


def check_policy_fits(env_id: str, policy: str) -> None:
    """Exit 2 when ``policy`` cannot play ``env_id`` at all: ``gold`` on a hosted env (a bridged id),
    which has no reference solution -- every episode would fail, and not through the env's fault."""
    from envhub.registry import is_bridged

    if policy == "gold" and is_bridged(env_id):
        raise fail(f"{env_id} is hosted from another hub and has no reference solution for --policy gold; "
                   "choose noop, random, hf:PATH or sglang:URL")


def checked_env_kwargs(env_id: str, pairs: list[str] | None, **given: Any) -> dict[str, Any]:
    """``given`` (what the command's own options pass to the env) plus the ``--env-arg`` pairs;
    exit 2 naming the env's accepted arguments when one of them is not one."""
    from envhub.registry import EnvArgumentError, check_env_kwargs

    kwargs = {**given, **parse_kv(pairs)}
    try:
        check_env_kwargs(env_id, kwargs)
    except EnvArgumentError as exc:
        raise fail(f"--env-arg: {exc}") from None
    return kwargs


@contextlib.contextmanager
def signals_stop_like_ctrl_c() -> Iterator[None]:
    """While the block runs, SIGTERM stops the command as Ctrl-C does: it says where it stood and
    exits 143 (Ctrl-C: 130) -- see :func:`envhub.sandboxes.cleanup.signals_interrupt`."""
    from envhub.sandboxes.cleanup import signals_interrupt

    with signals_interrupt(signal.SIGTERM):
        yield
