"""``envhub tito --model hf:...|sglang:...``: the TITO session server for a model spec.

The model spec resolves through :func:`envhub.adapters.engines.specs.make_model_policy`, which
gives the engine, the tokenizer and the chat format the server needs.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from envhub.adapters.engines.specs import make_model_policy
from envhub.adapters.tito.http import create_app
from envhub.adapters.tito.server import DEFAULT_MAX_TOKENS, TitoServer
from envhub.cli.common import fail


def build_server(model: str, *, max_context: int | None = None, default_max_tokens: int = DEFAULT_MAX_TOKENS,
                 default_temperature: float = 1.0) -> TitoServer:
    """A server for a policy spec: ``hf:PATH_OR_NAME`` (in-process transformers engine) or
    ``sglang:URL`` (a running SGLang server); the tokenizer and chat format come with it."""
    prefix, _, target = model.partition(":")
    if prefix not in ("hf", "sglang") or not target:
        raise ValueError(f"--model must be hf:PATH_OR_NAME or sglang:URL, got {model!r}")
    options: dict[str, Any] = {}
    if max_context:
        options["max_context"] = max_context
    policy = make_model_policy(prefix, target, **options)
    return TitoServer(policy.engine, policy.tokenizer, policy.format, model_name=model,
                      default_max_tokens=default_max_tokens, default_temperature=default_temperature,
                      tokenizer_id=policy.tokenizer_id)


def tito_command(
    model: Annotated[str, typer.Option("--model", help="hf:PATH_OR_NAME (e.g. hf:smollm2-135m) or sglang:URL")],
    host: Annotated[str, typer.Option(help="interface to bind")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="port to listen on")] = 8000,
    max_tokens: Annotated[int, typer.Option(help="default max_tokens per request")] = DEFAULT_MAX_TOKENS,
    temperature: Annotated[float, typer.Option(help="default temperature per request")] = 1.0,
    max_context: Annotated[int | None, typer.Option(help="cap on prompt + completion tokens")] = None,
) -> None:
    """Serve a model as an OpenAI-compatible chat endpoint that records token-exact trajectories per session."""
    import uvicorn

    try:
        server = build_server(model, max_context=max_context, default_max_tokens=max_tokens,
                              default_temperature=temperature)
    except (ValueError, FileNotFoundError, RuntimeError) as exc:
        raise fail(str(exc)) from None
    typer.echo(f"TITO session server for {model} on http://{host}:{port} "
               f"(POST /sessions, then /sessions/ID/v1/chat/completions)")
    try:
        uvicorn.run(create_app(server), host=host, port=port, log_level="warning")
    finally:
        server.engine.close()
