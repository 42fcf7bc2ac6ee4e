"""``envhub verify ENV``: the env's verifier suite (gold, noop, attacks), or grading of
submissions made elsewhere (loaded on first use by :data:`envhub.cli.commands.SUBCOMMANDS`); the
suite itself is :mod:`envhub.verifiers.suite`."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from envhub.cli.common import checked_env_kwargs, console, env_spec, err, fail, signals_stop_like_ctrl_c
from envhub.registry import is_bridged
from envhub.verifiers.suite import SuiteProgress, grade_submissions, run_suite


def verify_command(
    env_id: str,
    tasks: Annotated[str | None, typer.Option(help="comma-separated task ids (default: a sample)")] = None,
    split: Annotated[str, typer.Option(help="train, validation, test, or all")] = "test",
    limit: Annotated[int | None, typer.Option(min=0, help="tasks to sample when --tasks is not given; 0 = all "
                                                "(default: 20; 3 for a bridged id)")] = None,
    cases: Annotated[str | None, typer.Option(help="comma-separated case names")] = None,
    jobs: Annotated[int, typer.Option(min=1, help="envs grading in parallel")] = 2,
    submissions: Annotated[Path | None, typer.Option(help="JSONL of {task_id, submission} to grade")] = None,
    out: Annotated[Path | None, typer.Option(help="write the JSON result here")] = None,
    sandbox: str = "auto",
    env_arg: Annotated[list[str] | None, typer.Option(help="key=value passed to the env")] = None,
    episodes: Annotated[int, typer.Option(min=0, help="a bridged id: episodes of the agreement check "
                                          "(bridge vs the source's own client)")] = 3,
    json_output: Annotated[bool, typer.Option("--json", help="print the result as JSON, not a table")] = False,
) -> None:
    """Run the env's verifier suite (gold, noop, attacks) or grade external submissions; for a
    bridged id (PREFIX:TARGET), the fidelity checks of the hosted env instead."""
    from envhub.progress import progress_wanted
    from envhub.registry import make
    from envhub.sandboxes.cleanup import exit_code as interrupt_exit_code
    from envhub.store import write_json_atomic, write_text_atomic
    from envhub.task_source import SPLITS

    env_spec(env_id)
    if is_bridged(env_id) and submissions is None:
        _verify_bridged(env_id, checked_env_kwargs(env_id, env_arg, sandbox=sandbox), tasks=tasks, split=split,
                        limit=3 if limit is None else limit, episodes=episodes, json_output=json_output, out=out)
        return
    limit = 20 if limit is None else limit
    splits = SPLITS if split == "all" else (split,)
    kwargs = checked_env_kwargs(env_id, env_arg, split=splits[0], sandbox=sandbox)

    def factory() -> Any:
        return make(env_id, **kwargs)

    try:
        env = factory()  # checks the split and the env arguments before any work
    except (ValueError, TypeError) as exc:
        raise fail(str(exc)) from None
    if submissions is not None:
        env.close()
        numbered = _read_submissions(submissions)
        graded = grade_submissions(factory, [row for _, row in numbered], jobs=jobs)
        text = "".join(json.dumps(g) + "\n" for g in graded)
        if out:
            _write_out(out, lambda: write_text_atomic(out, text))
        else:
            sys.stdout.write(text)
        _report_ungraded(submissions, [n for n, _ in numbered], graded)
        return
    if tasks is not None:
        ids = [t.strip() for t in tasks.split(",") if t.strip()]
        if not ids:
            env.close()
            raise fail("--tasks names no task id")
    else:
        ids = [i for s in splits for i in env.tasks.task_ids(s)]
    env.close()
    if not tasks and limit:
        ids = _stratified_sample(ids, limit)
    bar = SuiteProgress(len(ids), show=progress_wanted())
    said: list[bool] = []

    def say_interrupted() -> None:  # nothing is kept: the suite's result is written only when it is complete
        if not said:
            said.append(True)
            bar.close("")  # the live bar stops first: the line is not drawn over
            err.print(f"interrupted: {bar.line()}; verify keeps no partial results, rerun it to start over",
                      markup=False, highlight=False)

    try:
        with signals_stop_like_ctrl_c(), bar:
            report = run_suite(factory, ids, cases=cases.split(",") if cases else None, jobs=jobs,
                               on_result=bar.on_result, on_interrupt=say_interrupted)
    except ValueError as exc:
        raise fail(str(exc)) from None
    except KeyboardInterrupt as exc:  # Ctrl-C (130) or SIGTERM (143): said at once, or now
        say_interrupted()
        raise typer.Exit(interrupt_exit_code(exc)) from None
    table = Table("case", "expect", "tasks", "as expected", "rate", "not applicable",
                  title=f"verifier suite: {env_id}")
    for name, row in report.by_case().items():
        style = "red" if row["violations"] else "green"
        table.add_row(name, row["expect"], str(row["tasks"]), str(row["as_expected"]),
                      f"[{style}]{row['rate']:.3f}[/]", str(row["not_applicable"] or ""))
    if json_output:
        sys.stdout.write(json.dumps(report.to_json(), indent=2) + "\n")
    else:
        console.print(table)
    if out:
        _write_out(out, lambda: write_json_atomic(out, report.to_json()))
    if report.violations:
        for name, row in report.by_case().items():
            for v in row["violations"][:3]:
                err.print(f"[red]violation[/] {name} on {v['task_id']}: {v['outcome']}: {v['detail'][:200]}")
        raise typer.Exit(1)


def _verify_bridged(env_id: str, kwargs: dict[str, Any], *, tasks: str | None, split: str, limit: int,
                    episodes: int, json_output: bool, out: Path | None) -> None:
    """The fidelity checks (:mod:`envhub.verifiers.fidelity`) of a hosted env: a table per task, or
    JSON; exit 1 when a check fails."""
    from rich.markup import escape

    from envhub.registry import make
    from envhub.store import write_json_atomic
    from envhub.task_source import SPLITS
    from envhub.verifiers.fidelity import run_fidelity

    splits = SPLITS if split == "all" else (split,)
    try:
        env = make(env_id, split=splits[0], **kwargs)
    except (ValueError, TypeError) as exc:
        raise fail(str(exc)) from None
    except Exception as exc:  # an unreachable server, a package that does not start
        raise fail(f"cannot make {env_id}: {exc}", code=1) from None
    try:
        if tasks is not None:
            ids = [t.strip() for t in tasks.split(",") if t.strip()]
        else:
            ids = [i for s in splits for i in env.tasks.task_ids(s)]
            ids = _stratified_sample(ids, limit) if limit else ids
        if not ids:
            raise fail("no task to check (--tasks names none, or the split is empty)")
        plan = getattr(env, "fidelity_plan", None)  # a bridge's own oracle and agreement check
        oracle, extra = plan(episodes) if plan is not None else (None, None)
        options = {"oracle": oracle} if oracle is not None else {}
        report = run_fidelity(env, ids, extra_checks=extra, **options)
    finally:
        env.close()
    if json_output:
        sys.stdout.write(json.dumps(report.to_json(), indent=2) + "\n")
    else:
        low, high = report.reward_range
        table = Table("task", "check", "expected", "got", "result", "detail",
                      title=f"fidelity: {env_id} (reward range [{low:g}, {high:g}])")
        for task_id, rows in report.by_task().items():
            for n, r in enumerate(rows):
                style = {"pass": "green", "fail": "red"}.get(r.status, "yellow")
                cells = (task_id if n == 0 else "", r.check, r.expected, r.got)
                table.add_row(*map(escape, cells), f"[{style}]{r.status}[/]", escape(r.detail[:120]),
                              end_section=n == len(rows) - 1)
        console.print(table)
        counts = report.counts()
        console.print(f"{counts['pass']} passed, {counts['fail']} failed, {counts['skip']} skipped")
    if out:
        _write_out(out, lambda: write_json_atomic(out, report.to_json()))
    if report.failures:
        raise typer.Exit(1)


def _write_out(path: Path, write: Callable[[], object]) -> None:
    """Run ``write``; a failure (full disk, no permission) is a message and exit 1, not a traceback."""
    try:
        write()
    except OSError as exc:
        raise fail(f"cannot write {path}: {exc.strerror or exc}", code=1) from None


def _stratified_sample(ids: list[str], limit: int) -> list[str]:
    """Evenly spaced ids: deterministic, and it covers every kind of a sorted id list."""
    if len(ids) <= limit:
        return ids
    ordered = sorted(ids)
    step = len(ordered) / limit
    return [ordered[int(i * step)] for i in range(limit)]


def _read_submissions(path: Path) -> list[tuple[int, dict[str, Any]]]:
    """(line number, row) for every non-blank line of a submissions file; exit 2 with the file
    and line on a line that is not a JSON object, or when there is no submission at all."""
    rows = []
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise fail(f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}") from None
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise fail(f"{path}:{n}: not JSON ({exc.msg})") from None
        if not isinstance(row, dict):
            raise fail(f"{path}:{n}: each line must be a JSON object")
        rows.append((n, row))
    if not rows:
        raise fail(f"{path} holds no submissions (expected JSON lines of {{task_id, submission}})")
    return rows


def _report_ungraded(path: Path, line_numbers: list[int], graded: list[dict[str, Any]]) -> None:
    """Name the lines that could not be graded on stderr; exit 1 when none could be."""
    failed = [(n, g["error"]) for n, g in zip(line_numbers, graded, strict=True) if "error" in g]
    for n, why in failed[:5]:
        err.print(f"[yellow]not graded[/] {path}:{n}: {why}")
    if len(failed) > 5:
        err.print(f"[yellow]not graded[/] {len(failed) - 5} more lines of {path}")
    if failed and len(failed) == len(graded):
        raise fail(f"none of the {len(graded)} submissions in {path} could be graded", code=1)
