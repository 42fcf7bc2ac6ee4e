"""``envhub models``: the command-line face of :mod:`envhub.adapters.engines.models`."""

from __future__ import annotations

import time
from typing import Annotated

import typer

from envhub.adapters.engines.models import (
    KNOWN_MODELS,
    ModelNotAvailableError,
    is_prepared,
    model_dir,
    prepare_named_model,
    resolve_model,
)
from envhub.cli.common import fail
from envhub.progress import Stages, progress_wanted

models_app = typer.Typer(no_args_is_help=True, help="local models (converted once into the envhub cache)")


@models_app.command("prepare")
def prepare_command(
    name: Annotated[str, typer.Argument(help="smollm2-135m, or tiny (a random test model)")] = "smollm2-135m",
    force: Annotated[bool, typer.Option(help="convert again even if the cache has it")] = False,
) -> None:
    """Convert a model into the cache (idempotent) and print its dir. Each stage and its elapsed
    time are shown on stderr when it is a terminal (ENVHUB_PROGRESS=1/0 overrides)."""
    t0 = time.monotonic()
    stages = Stages(f"models prepare {name}", show=progress_wanted())
    try:
        path = prepare_named_model(name, force=force, log=typer.echo, stages=stages)
    except ModelNotAvailableError as exc:
        stages.finish("failed")
        raise fail(str(exc)) from None
    stages.finish()
    typer.echo(f"{name}: {path} ({time.monotonic() - t0:.1f}s)")


@models_app.command("list")
def list_command() -> None:
    """Known models and whether they are prepared."""
    for name, source in KNOWN_MODELS.items():
        path = model_dir(name)
        state = "prepared" if is_prepared(path) else "not prepared"
        typer.echo(f"{name}\t{state}\t{path}\t{source.description}")


@models_app.command("path")
def path_command(name: str) -> None:
    """The dir a model name resolves to (without preparing it)."""
    try:
        typer.echo(str(resolve_model(name, prepare=False)))
    except ModelNotAvailableError as exc:
        raise fail(str(exc)) from None
