"""``envhub audit DIR``: the command around :func:`envhub.adapters.audit.audit_run`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from envhub.adapters.audit import audit_run
from envhub.store import write_json_atomic


def audit_command(
    run: Annotated[Path, typer.Argument(help="a rollout dir (or its trajectories.jsonl)")],
    model: Annotated[str | None, typer.Option(help="model dir or name: recompute logprobs (train/inference "
                                                   "mismatch) and use its tokenizer")] = None,
    json_out: Annotated[Path | None, typer.Option("--json", help="also write the full report here")] = None,
) -> None:
    """Token-fidelity audit of a run's trajectories; exits 1 if any trajectory has an error."""
    try:
        report = audit_run(run, model)
    except (FileNotFoundError, ValueError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    d = report["drift"]
    typer.echo(f"trajectories: {report['trajectories']} ({report['with_tokens']} with tokens; "
               f"{report['sampled_tokens']} sampled, {report['observation_tokens']} observation tokens)")
    typer.echo(f"errors: {report['errors']}" + (f" {report['by_check']}" if report["errors"] else ""))
    for issue in report["issues"][:10]:
        typer.echo(f"  {issue['episode_id']} [{issue['check']}] {issue['detail']}")
    typer.echo(f"re-templating drift (info): {d['drifted']}/{d['checked']} episodes ({d['rate']:.1%})")
    if report["mismatch"] is not None:
        m = report["mismatch"]
        if m["tokens"]:
            typer.echo(f"train/inference mismatch over {m['tokens']} sampled tokens: mean |dlogp| "
                       f"{m['mean_abs_delta']:.3g}, max {m['max_abs_delta']:.3g}")
    if json_out is not None:
        write_json_atomic(json_out, report)
    if report["errors"]:
        raise typer.Exit(1)
