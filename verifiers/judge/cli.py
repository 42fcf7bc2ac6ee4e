"""``envhub judge calibrate ENV --judge SPEC``: how far an env's judge agrees with the programmatic
verdict, and what moves it (:mod:`envhub.verifiers.judge.calibrate`)."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Annotated, Any

import typer

from envhub.cli.common import console, fail, parse_kv
from envhub.store import write_json_atomic

judge_app = typer.Typer(no_args_is_help=True, help="The LLM judge of an env's quality layer: calibrate it.")


def _interval(low: Any, high: Any) -> str:
    return "" if low is None or high is None else f" [{low:+.3f}, {high:+.3f}]"


def report_lines(report: dict[str, Any]) -> list[str]:
    """The calibration report as plain lines (what the command prints)."""
    kappa, table, pin = report["kappa"], report["confusion"], report["judge"]
    k = "undefined (" + str(kappa.get("reason")) + ")" if kappa["kappa"] is None else (
        f"{kappa['kappa']:+.3f}" + (_interval(kappa["low"], kappa["high"]) if kappa["low"] is not None
                                    else f" ({kappa.get('reason')})"))
    lines = [f"judge {pin['model']} (weights {str(pin['weights_sha256'])[:12]}, rubric {pin['rubric_sha256'][:12]}, "
             f"prompt {pin['prompt_sha256'][:12]}, sampling {json.dumps(pin['sampling'], sort_keys=True)})",
             f"{report['cases']} labelled cases, base rate (good) {table['base_rate']:.3f}, judge says good "
             f"{table['judge_rate']:.3f} (good at q >= {report['good_at']})",
             f"agreement {table['agreement']:.3f}; Cohen's kappa {k}",
             f"confusion: tp {table['tp']}  fp {table['fp']}  fn {table['fn']}  tn {table['tn']}",
             "by kind:"]
    for kind, row in sorted(report["by_kind"].items()):
        lines.append(f"  {kind:<28} n {row['n']:>3}  labelled good {row['label_good']:>3}  "
                     f"agreement {row['agreement']:.3f}  mean score {row['mean_score']:.3f}")
    consistency = report["self_consistency"]
    fleiss = consistency.get("fleiss_kappa")
    lines.append(f"self-consistency over {consistency['k']} samples at temperature {consistency['temperature']}: "
                 f"agreement {consistency['agreement']:.3f}, unanimous {consistency['unanimous']:.3f}, "
                 f"Fleiss' kappa {'undefined' if fleiss is None else f'{fleiss:+.3f}'}, "
                 f"unparseable {consistency['unparseable']}")
    cap = report["cap"]
    lines.append(f"length cap: {cap['cut']} of {cap['texts']} submissions cut, "
                 f"{cap['mean_removed_share']:.3f} of their characters removed on average")
    lines.append("bias battery (mean change of the judge's score q in [0, 1], 95 % interval; "
                 "neutral: on good cases, should be 0; adversarial: on bad cases, should not rise):")
    for row in report["bias"]:
        delta = row["delta"]
        mean = "n/a" if delta["mean"] is None else f"{delta['mean']:+.3f}"
        lines.append(f"  {row['case']:<24} {row['kind']:<11} {mean}{_interval(delta['low'], delta['high'])}  "
                     f"raised {row['raised']} of {delta['n']}")
    return lines


@judge_app.command("calibrate")
def calibrate_command(
    env_id: Annotated[str, typer.Argument(help="an env whose family has a judged quality layer (e.g. envhub/Retrieval-v0)")],
    judge: Annotated[str, typer.Option("--judge", help="hf:NAME_OR_PATH, sglang:URL or openai:URL")],
    labels: Annotated[Path | None, typer.Option("--labels", help="a JSONL file of human labels (see the docs)")] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, help="tasks (drawn from the split with --seed) whose "
                                                  "gold and suite cases are labelled")] = 8,
    split: Annotated[str, typer.Option("--split")] = "test",
    consistency_k: Annotated[int, typer.Option("--consistency-k", min=2, help="samples for self-consistency")] = 3,
    battery_cases: Annotated[int, typer.Option("--battery-cases", min=1,
                                               help="cases each bias row is measured on, at most")] = 24,
    seed: Annotated[int, typer.Option("--seed")] = 0,
    env_arg: Annotated[list[str] | None, typer.Option("--env-arg", help="KEY=VALUE, repeatable")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the report as JSON")] = False,
    out: Annotated[Path | None, typer.Option("--out", help="also write the JSON report here")] = None,
) -> None:
    """Run the judge over labelled cases (gold and verifier-suite submissions, plus --labels) and the
    bias battery; print agreement, kappa, the confusion matrix, self-consistency and each bias.
    The result is kept as the env's latest calibration (shown by `envhub list`)."""
    from envhub import make

    from .calibrate import calibrate, human_cases, programmatic_cases
    from .check import JudgeCheck
    from .latest import store_calibration

    try:
        env = make(env_id, split=split, judge=judge, **parse_kv(env_arg or []))
    except TypeError as exc:
        raise fail(f"{env_id} takes no judge ({exc}); calibrate an env whose family has a judged quality layer") from None
    except ValueError as exc:
        raise fail(str(exc)) from None
    with env:
        checks = [c for c, _ in getattr(env.verifier, "quality", ()) if isinstance(c, JudgeCheck)]
        if not checks:
            raise fail(f"{env_id} has no judged quality layer")
        check = checks[0]
        ids = env.tasks.task_ids(env.split)
        tasks = sorted(random.Random(seed).sample(ids, min(limit, len(ids))))  # spread over the split
        try:
            cases = programmatic_cases(env, check, tasks) + (human_cases(labels) if labels else [])
            report = calibrate(check, cases, consistency_k=consistency_k, seed=seed, battery_cases=battery_cases)
        except (OSError, ValueError) as exc:
            raise fail(str(exc)) from None
    report = {"env_id": env_id, "split": split, "tasks": tasks, **report}
    stored = store_calibration(env_id, report)
    if out is not None:
        write_json_atomic(out, report)
    if as_json:
        print(json.dumps(report, indent=2))
        return
    for line in report_lines(report):
        console.print(line, markup=False, highlight=False)
    console.print(f"kept as the latest calibration of {env_id}: {stored}", markup=False, highlight=False)


__all__ = ["calibrate_command", "judge_app", "report_lines"]
