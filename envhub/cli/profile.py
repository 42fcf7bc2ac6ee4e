"""``envhub profile ENV --policy P --k 8``: pass@k per task of a policy (:mod:`envhub.rollout.profile`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from envhub.cli.common import check_policy_fits, checked_env_kwargs, fail
from envhub.rollout.profile import run_profile


def profile_command(
    env_id: Annotated[str, typer.Argument(help="e.g. envhub/Computation-v0")],
    out: Annotated[Path, typer.Option("--out", help="output directory (a rollout dir plus profile.json)")],
    policy: Annotated[str, typer.Option(help="gold | noop | random | hf:PATH | sglang:URL")] = "gold",
    k: Annotated[int, typer.Option("--k", min=1, help="samples per task")] = 8,
    split: str = "train",
    limit: Annotated[int, typer.Option(min=0, help="profile a seeded sample of this many tasks; 0 = all")] = 0,
    seed: int = 0,
    concurrency: Annotated[int, typer.Option(min=1, help="episodes in flight")] = 4,
    sandbox: Annotated[str, typer.Option(help="auto | docker | bwrap | landlock | process")] = "auto",
    env_arg: Annotated[list[str] | None, typer.Option(help="key=value passed to the env")] = None,
) -> None:
    """pass@k per task (unbiased estimator); writes profile.json and curriculum.json (0 < p < 1)."""
    from envhub.policies import make_policy
    from envhub.registry import UnknownEnvError
    from envhub.rollout.runner import RolloutOutputError

    try:
        env_kwargs = checked_env_kwargs(env_id, env_arg, sandbox=sandbox)
        check_policy_fits(env_id, policy)
        pol = make_policy(policy)
        profile = run_profile(env_id, pol, out_dir=out, k=k, split=split, limit=limit, seed=seed,
                              concurrency=concurrency, env_kwargs=env_kwargs)
    except (UnknownEnvError, ValueError, ImportError, TypeError, PermissionError) as exc:
        raise fail(str(exc)) from None
    except RolloutOutputError as exc:
        raise fail(str(exc), code=1) from None
    except OSError as exc:
        raise fail(f"cannot write to {out}: {exc.strerror or exc}", code=1) from None
    except KeyboardInterrupt:
        from envhub.progress import interrupted_message
        from envhub.run_dir import Run

        typer.echo(interrupted_message(Run(out).trajectories_path), err=True)
        raise typer.Exit(130) from None
    summary = {key: profile[key] for key in ("tasks_profiled", "informative_tasks", "all_fail_tasks",
                                             "all_pass_tasks", "undetermined_tasks", "mean_pass@1", f"mean_pass@{k}")}
    typer.echo(json.dumps(summary, indent=2))
    typer.echo(f"wrote {out / 'profile.json'} and {out / 'curriculum.json'} "
               f"({profile['informative_tasks']} tasks with 0 < p < 1)")
