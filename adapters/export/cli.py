"""``envhub export DIR --format F`` (the command-line face of :func:`export_run`) and
``envhub import atif FILE_OR_DIR --out RUN_DIR`` (of :func:`envhub.adapters.import_atif.import_atif`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from envhub.cli.common import fail


def export_command(
    run_dir: Annotated[Path, typer.Argument(help="a run directory (with trajectories.jsonl) or the JSONL file")],
    format: Annotated[str, typer.Option("--format", "-f", help="verl | slime | miles | trl | skyrl | parquet | atif")],
    out: Annotated[Path | None, typer.Option("--out", help="output folder (default: DIR/export-FORMAT)")] = None,
    include_infra: Annotated[bool, typer.Option(
        "--include-infra/--exclude-infra",
        help="keep episodes whose outcome is an infra failure (env/verifier/engine error), with a zero "
             "loss mask; slime and miles always keep them in their groups, as remove_sample")] = False,
    group_size: Annotated[int | None, typer.Option(
        "--group-size", min=1, help="samples per group (default: the run's report.json, else the largest "
                                    "group seen); groups with fewer are unfinished and left out")] = None,
) -> None:
    """Export a run's trajectories for an external trainer (veRL, slime, Miles, TRL, SkyRL, Parquet) or
    as ATIF trajectories (Harbor's format)."""
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


import_app = typer.Typer(no_args_is_help=True, help="Read trajectories of other formats into an envhub run directory.")


@import_app.command("atif")
def import_atif_command(
    src: Annotated[Path, typer.Argument(help="an ATIF trajectory JSON file, or a folder searched for them")],
    out: Annotated[Path, typer.Option("--out", help="the run directory to write (its trajectories.jsonl)")],
    env_id: Annotated[str | None, typer.Option(
        "--env-id", help="the env of a foreign trajectory, where known (envhub's own files carry theirs)")] = None,
    task_id: Annotated[str | None, typer.Option(
        "--task-id", help="the task of a foreign trajectory (default: its trajectory or session id)")] = None,
) -> None:
    """Import ATIF trajectories (Harbor's format, v1.0-v1.8) as envhub records, for `envhub audit` and regrading."""
    from envhub.adapters.import_atif import AtifError, import_atif

    try:
        result = import_atif(src, out, env_id=env_id, task_id=task_id)
    except (FileNotFoundError, FileExistsError, AtifError) as exc:
        raise fail(str(exc)) from None
    typer.echo(result.summary())
    for item in result.imported:
        for note in item.notes:
            typer.echo(f"note: {item.path.name}: {note}", err=True)
