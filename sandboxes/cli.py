"""``envhub sandbox build | doctor | prune`` (mounted by envhub's CLI; also ``python -m``)."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from envhub.cli.common import console, fail

app = typer.Typer(help="Sandbox images, health and cleanup.", no_args_is_help=True)


@app.command()
def build(
    from_image: Annotated[
        str | None,
        typer.Option("--from", help="Build on this public image (needs a reachable registry), "
                                    "e.g. python:3.11-slim, instead of debootstrap."),
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="Rebuild even if the inputs did not change.")] = False,
    family: Annotated[
        str | None,
        typer.Option("--family", help="Also build a task-family image: NAME=DOCKERFILE_DIR."),
    ] = None,
) -> None:
    """Build envhub/base:<version> offline: debootstrap from this machine's apt mirror, docker import.

    Each stage and its elapsed time are shown on stderr when it is a terminal (ENVHUB_PROGRESS=1/0
    overrides); what is printed on stdout is the same either way."""
    from envhub.progress import Stages, progress_wanted
    from envhub.sandboxes.base import SandboxError
    from envhub.sandboxes.images import build_base_image, build_family_image

    stages = Stages("sandbox build", show=progress_wanted())
    try:
        tag = build_base_image(force, from_image=from_image, log_fn=console.print, stages=stages)
        console.print(f"[green]ready:[/green] {tag}")
        if family:
            name, _, folder = family.partition("=")
            built = build_family_image(name, folder, force, log_fn=console.print, stages=stages)
            console.print(f"[green]ready:[/green] {built}")
    except (SandboxError, FileNotFoundError) as exc:
        stages.finish("failed")
        raise fail(f"build failed: {exc}", code=1) from exc
    stages.finish()


@app.command()
def doctor(
    require: Annotated[
        list[str] | None,
        typer.Option("--require", help="Exit 1 unless this backend works (repeatable), e.g. for CI."),
    ] = None,
) -> None:
    """Which sandbox backends work here; for each that does not, why and how to fix it."""
    from envhub.sandboxes.selection import doctor as run_doctor
    from envhub.sandboxes.selection import select_backend

    statuses = run_doctor()
    table = Table("backend", "works", "details / why not", "fix")
    for status in statuses:
        table.add_row(status.name, "[green]yes[/green]" if status.ok else "[red]no[/red]",
                      status.detail if status.ok else status.reason, status.fix)
    console.print(table)
    console.print(f"auto selects: [bold]{select_backend('auto')}[/bold]")
    missing = [name for name in require or [] if not any(s.name == name and s.ok for s in statuses)]
    if missing:
        raise fail(f"required but not working: {', '.join(missing)}", code=1)


@app.command()
def prune(
    all_owners: Annotated[
        bool, typer.Option("--all", help="Also remove containers of envhub processes still running."),
    ] = False,
) -> None:
    """Remove envhub-labelled containers left behind (e.g. after a kill -9)."""
    from envhub.sandboxes.base import SandboxError
    from envhub.sandboxes.docker_backend import prune as run_prune

    try:
        removed = run_prune(all_owners)
    except SandboxError as exc:
        raise fail(f"cannot prune: {exc}", code=1) from exc
    console.print(f"removed {removed} container(s)")


if __name__ == "__main__":
    app()
