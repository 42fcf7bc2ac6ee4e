"""``envhub train CONFIG.yaml [--set key=value ...] [--resume]`` and ``python -m envhub.trainer`` (torchrun)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Annotated

import typer


def _run(config_path: Path, overrides: list[str], resume: bool) -> int:
    from envhub.trainer.checkpoint import latest_checkpoint
    from envhub.trainer.config import load_config
    from envhub.trainer.loop import TrainingError, headline, train
    from envhub.trainer.preflight import PreflightError
    from envhub.trainer.weight_sync import WeightSyncError

    try:
        config = load_config(config_path, overrides)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        summary = train(config, resume=resume)
    except (PreflightError, TrainingError, WeightSyncError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        latest = latest_checkpoint(Path(config.run_dir))
        where = f"the latest checkpoint is {latest}" if latest else "no checkpoint was written yet"
        print(f"\ninterrupted: {where}; rerun the same command with --resume to continue "
              "(episodes of the interrupted step already on disk are reused)", file=sys.stderr)
        return 130
    print(f"{headline(summary)}; final weights in {summary['final_weights']} "
          f"(evaluate with --policy hf:{summary['final_weights']})")
    return 0


def train_command(
    config: Annotated[Path, typer.Argument(help="trainer config (YAML); see examples/train/ and docs/training.md")],
    set_: Annotated[list[str] | None, typer.Option("--set", help="override a setting: key.sub=value")] = None,
    resume: Annotated[bool, typer.Option("--resume", help="continue from the run directory's latest checkpoint")]
    = False,
) -> None:
    """Train a policy with the bundled trainer (SFT warm start and GRPO)."""
    raise typer.Exit(_run(config, set_ or [], resume))


def main(argv: list[str] | None = None) -> int:
    """``torchrun --nproc_per_node N -m envhub.trainer CONFIG.yaml [--set k=v] [--resume]``."""
    parser = argparse.ArgumentParser(prog="python -m envhub.trainer", description=__doc__)
    parser.add_argument("config", type=Path)
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--resume", action="store_true")
    args = parser.parse_args(argv)
    return _run(args.config, args.overrides, args.resume)
