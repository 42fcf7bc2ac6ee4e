"""``envhub serve``: run an env as an OpenEnv-compatible server (or in a container).

Only typer is imported at module level, so the command is always listed; a missing ``serve``
extra is reported when the command runs, with the install line.
"""

from __future__ import annotations

import ipaddress
import os
from pathlib import Path
from typing import Annotated, Any

import typer

from envhub.cli.common import checked_env_kwargs, env_spec, fail

DEFAULT_PORT = 8000


def is_loopback(host: str) -> bool:
    """Whether binding ``host`` exposes the server to this machine only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_exposure(host: str, token: str | None, insecure_no_token: bool) -> None:
    """Refuse to serve beyond loopback without a token: an env runs code a model wrote."""
    if token or is_loopback(host) or insecure_no_token:
        return
    raise typer.BadParameter(
        f"--host {host} is reachable from other machines: pass --token-file (or set ENVHUB_TOKEN); "
        "clients then send 'Authorization: Bearer <token>'", param_hint="--host")


CMDLINE_TOKEN_WARNING = ("envhub serve: --token on the command line is readable by every process on this machine "
                         "(/proc/PID/cmdline); pass --token-file or set ENVHUB_TOKEN instead")


def read_token(token: str | None, token_file: Path | None, env_token: str | None) -> str | None:
    """The bearer token from ``--token-file``, ``ENVHUB_TOKEN`` (``env_token``) or ``--token``;
    a ``--token`` that did not come from the environment was on the command line: warned about."""
    if token_file is not None:
        if token and token != env_token:
            raise typer.BadParameter("give the token once: --token-file or --token", param_hint="--token-file")
        try:
            lines = token_file.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeError) as exc:
            raise typer.BadParameter(f"cannot read {token_file}: {exc}", param_hint="--token-file") from None
        if not lines or not lines[0].strip():
            raise typer.BadParameter(f"{token_file} holds no token (its first line is empty)",
                                     param_hint="--token-file")
        return lines[0].strip()
    if token and token != env_token:
        typer.echo(CMDLINE_TOKEN_WARNING, err=True)
    return token or None


def serve_command(
    env_id: Annotated[str, typer.Argument(help="a registered env id, e.g. envhub/Computation-v0")],
    host: Annotated[str, typer.Option(help="interface to bind; anything but loopback needs a token")]
    = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=65535, help="TCP port (0 = any free port)")] = DEFAULT_PORT,
    max_sessions: Annotated[int, typer.Option(min=1, help="concurrent sessions (one env each)")] = 64,
    prewarm: Annotated[int, typer.Option(min=0, help="agent sandboxes started before serving and kept idle "
                                         "between episodes: a burst of this many sessions (a trainer's "
                                         "batch) finds each first tool call's sandbox warm")] = 0,
    session_ttl: Annotated[float, typer.Option(min=0.1, help="seconds a detached, idle session keeps its "
                                               "slot (and can be resumed)")] = 300.0,
    attached_idle_timeout: Annotated[float, typer.Option(min=0.0, help="seconds a connected client may stay "
                                                         "silent before it is closed (a hung client; "
                                                         "0 = never)")] = 3600.0,
    token_file: Annotated[Path | None, typer.Option(help="file whose first line is the bearer token required "
                                                    "on every route but /health")] = None,
    token: Annotated[str | None, typer.Option(envvar="ENVHUB_TOKEN", help="the bearer token itself, best from "
                                              "the environment (ENVHUB_TOKEN): on the command line every "
                                              "process can read it", show_default=False)] = None,
    docker: Annotated[bool, typer.Option(help="build and run the server in a container (offline, on "
                                         "envhub/base)")] = False,
    split: Annotated[str, typer.Option(help="task split served")] = "train",
    sandbox: Annotated[str, typer.Option(help="auto | docker | bwrap | landlock | process")] = "auto",
    env_arg: Annotated[list[str] | None, typer.Option(help="key=value passed to the env")] = None,
    expose_gold: Annotated[bool, typer.Option(help="serve reference actions (scripted evaluation only: "
                                              "they reveal the answers)")] = False,
    executor: Annotated[str, typer.Option(help="where env code runs: auto | inline | thread")] = "auto",
    ping_interval: Annotated[float, typer.Option(min=0.1, help="WebSocket ping interval and timeout "
                                                 "(finds half-open connections)")] = 20.0,
    max_message_bytes: Annotated[int, typer.Option(min=1024, help="largest request body or WebSocket "
                                                   "message")] = 1 << 20,
    log_level: Annotated[str, typer.Option(help="uvicorn log level")] = "info",
    insecure_no_token: Annotated[bool, typer.Option(help="allow a non-loopback --host without a token "
                                                    "(inside a container whose port mapping decides "
                                                    "exposure)")] = False,
    rebuild: Annotated[bool, typer.Option(help="--docker: rebuild the image even if it is current")] = False,
) -> None:
    """Serve ENV_ID over HTTP, WebSocket and MCP, compatible with OpenEnv's clients."""
    # read once: no sandbox inherits it
    token = read_token(token, token_file, os.environ.pop("ENVHUB_TOKEN", None))
    check_exposure(host, token, insecure_no_token)
    env_spec(env_id)  # an unknown env or argument is an error here, before any image or server
    env_kwargs = checked_env_kwargs(env_id, env_arg, sandbox=sandbox)
    if executor not in ("auto", "inline", "thread"):
        raise typer.BadParameter("choose auto, inline or thread", param_hint="--executor")
    if docker:
        from envhub.server.docker import serve_in_docker

        serve_in_docker(
            env_id, host=host, port=port, token=token, rebuild=rebuild, echo=typer.echo,
            args=_server_args(max_sessions=max_sessions, prewarm=prewarm, session_ttl=session_ttl,
                              attached_idle_timeout=attached_idle_timeout, split=split,
                              sandbox=sandbox, env_arg=env_arg or [], expose_gold=expose_gold,
                              executor=executor, ping_interval=ping_interval,
                              max_message_bytes=max_message_bytes, log_level=log_level),
        )
        return
    try:
        import uvicorn

        from envhub.server.app import create_app
        from envhub.server.hub import ServerConfig
    except ImportError as exc:
        raise fail(f"envhub serve needs the serve extra ({exc}): pip install 'envhub[serve]'") from None
    from envhub.registry import UnknownEnvError
    from envhub.server.hub import IsolationUnavailable

    config = ServerConfig(
        max_sessions=max_sessions, session_ttl_s=session_ttl, attached_idle_s=attached_idle_timeout or None,
        token=token, expose_gold=expose_gold,
        executor=executor,  # type: ignore[arg-type]
        max_body_bytes=max_message_bytes, max_message_bytes=max_message_bytes, split=split,
        env_kwargs=env_kwargs, prewarm=prewarm,
    )
    try:
        app = create_app(env_id, config)
    except (UnknownEnvError, IsolationUnavailable) as exc:
        raise fail(str(exc)) from None
    uvicorn.run(app, **uvicorn_options(host=host, port=port, ping_interval=ping_interval,
                                       max_message_bytes=max_message_bytes, log_level=log_level))


def uvicorn_options(*, host: str, port: int, ping_interval: float, max_message_bytes: int,
                    log_level: str = "info") -> dict[str, Any]:
    """Server settings: pings find half-open sockets; no per-message deflate (CPU for little gain
    on small JSON messages); access logs off (one line per step is too much at thousands/s)."""
    return {
        "host": host, "port": port, "ws_ping_interval": ping_interval, "ws_ping_timeout": ping_interval,
        "ws_max_size": max_message_bytes, "ws_per_message_deflate": False, "log_level": log_level,
        "access_log": False, "lifespan": "on", "timeout_graceful_shutdown": 5,
    }


def _server_args(**opts: Any) -> list[str]:
    """The in-container command line for the same options."""
    args: list[str] = []
    for key, value in opts.items():
        flag = "--" + key.replace("_", "-")
        if isinstance(value, bool):
            if value:
                args.append(flag)
        elif isinstance(value, list):
            for item in value:
                args += [flag, str(item)]
        else:
            args += [flag, str(value)]
    return args


def main() -> None:
    """``python -m envhub.server``: the same command without the rest of the envhub CLI."""
    typer.run(serve_command)
