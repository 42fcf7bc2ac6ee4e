"""``envhub export DIR --format F``: the command-line face of :func:`export_run`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from envhub.cli.common import fail


def export_command(
    run_dir: Annotated[Path, typer.Argument(help="a run directory (with trajectories.jsonl) or the JSONL file")],
    format: Annotated[str, typer.Option("--format", "-f", help="verl | slime | miles | trl | skyrl | parquet")],
    out: Annotated[Path | None, typer.Option("--out", help="output folder (default: DIR/export-FORMAT)")] = None,
    include_infra: Annotated[bool, typer.Option(
        "--include-infra/--exclude-infra",
        help="keep episodes whose outcome is an infra failure (env/verifier/engine error), with a zero "
             "loss mask; slime and miles always keep them in their groups, as remove_sample")] = False,
    group_size: Annotated[int | None, typer.Option(
        "--group-size", min=1, help="samples per group (default: the run's report.json, else the largest "
                                    "group seen); groups with fewer are unfinished and left out")] = None,
) -> None:
    """Export a run's trajectories for an external trainer (veRL, slime, Miles, TRL, SkyRL, Parquet)."""
    from envhub.adapters.export import FORMATS, export_run

    if format not in FORMATS:
        raise fail(f"unknown format {format!r}; choose one of {', '.join(FORMATS)}")
    try:
        result = export_run(run_dir, format, out, include_infra=include_infra, group_size=group_size)
    except (FileNotFoundError, ValueError) as exc:
        raise fail(str(exc)) from None
    typer.echo(result.summary())
    if result.exported == 0:
        typer.echo("warning: nothing was exported", err=True)
