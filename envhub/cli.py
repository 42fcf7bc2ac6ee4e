"""The ``envhub`` command line. Each command is a thin shell over a library function."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import click
import typer
from rich.console import Console
from rich.table import Table
from typer.core import TyperGroup

#: Command groups and commands that live beside the code they drive: name -> (module, attribute,
#: one-line help). They are imported only when run (or asked for their own --help), so that
#: ``envhub --help`` and the built-in commands never pay for their imports.
SUBCOMMANDS = {
    "new-env": ("envhub.scaffold", "new_env_command",
                "Generate a task-family plugin package (entry point, task source, tools, verifier, suite)."),
    "export": ("envhub.adapters.export", "export_command",
               "Export a run's trajectories for an external trainer (veRL, slime, Miles, TRL, SkyRL, Parquet)."),
    "tito": ("envhub.adapters.tito.cli", "tito_command",
             "Serve a model as an OpenAI-compatible chat endpoint that records token-exact trajectories."),
    "serve": ("envhub.server.cli", "serve_command",
              "Serve ENV_ID over HTTP, WebSocket and MCP, compatible with OpenEnv's clients."),
    "audit": ("envhub.adapters.audit", "audit_command",
              "Token-fidelity audit of a run's trajectories; exits 1 if any trajectory has an error."),
    "report": ("envhub.report_html", "report_command",
               "Render a run as one self-contained HTML report, with its plots also written as PNG files."),
    "profile": ("envhub.profile", "profile_command",
                "pass@k per task (unbiased estimator); writes profile.json and curriculum.json."),
    "sandbox": ("envhub.sandboxes.cli", "app", "Sandbox images, health and cleanup."),
    "models": ("envhub.adapters.engines.models", "models_app",
               "Local models (converted once into the envhub cache)."),
}


class _LazyGroup(TyperGroup):
    """The top-level group: the commands of :data:`SUBCOMMANDS` are imported on first use."""

    _listing = False

    def list_commands(self, ctx: click.Context) -> list[str]:
        return [*super().list_commands(ctx), *(n for n in SUBCOMMANDS if n not in self.commands)]

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in SUBCOMMANDS and cmd_name not in self.commands:
            if self._listing:  # the group's own --help needs only the name and one line
                return click.Command(cmd_name, help=SUBCOMMANDS[cmd_name][2])
            self.add_command(_load_subcommand(cmd_name), cmd_name)
        return super().get_command(ctx, cmd_name)

    def format_help(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        self._listing = True
        try:
            super().format_help(ctx, formatter)
        finally:
            self._listing = False


def _load_subcommand(name: str) -> click.Command:
    """The click command of a :data:`SUBCOMMANDS` entry; one whose optional dependency is missing
    becomes a command that says so and exits 2."""
    import importlib

    module, attr, help_text = SUBCOMMANDS[name]
    try:
        sub = getattr(importlib.import_module(module), attr)
    except ImportError as exc:
        why = f"`envhub {name}` needs an optional dependency that is not installed: {exc}"

        def missing() -> None:
            raise _fail(why)

        return click.Command(name, callback=missing, help=help_text, context_settings={
            "ignore_unknown_options": True, "allow_extra_args": True, "help_option_names": []})
    if isinstance(sub, typer.Typer):
        command = typer.main.get_group(sub)
    else:
        holder = typer.Typer()
        holder.command(name)(sub)
        command = typer.main.get_command(holder)
    command.name = name
    return command


app = typer.Typer(cls=_LazyGroup, no_args_is_help=True, add_completion=False,
                  help="envhub: environments and rewards for agent RL")
bench_app = typer.Typer(no_args_is_help=True, help="performance benchmarks")
app.add_typer(bench_app, name="bench")
tasks_app = typer.Typer(no_args_is_help=True, help="task sets: export to other harnesses")
app.add_typer(tasks_app, name="tasks")
# Piped output (logs, CI, tests) gets a wide console so ids and paths are never wrapped.
console = Console(width=None if sys.stdout.isatty() else 200)
err = Console(stderr=True, width=None if sys.stderr.isatty() else 200)


def _fail(message: str, code: int = 2) -> typer.Exit:
    err.print(f"[bold red]error:[/] {message}")
    return typer.Exit(code)


def _parse_kv(pairs: list[str] | None) -> dict[str, Any]:
    """``--env-arg key=value`` pairs; values are JSON when they parse, else strings."""
    out: dict[str, Any] = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise _fail(f"--env-arg expects key=value, got {pair!r}")
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            out[key] = value
    return out


def _spec(env_id: str) -> Any:
    from envhub.registry import UnknownEnvError, get_spec

    try:
        return get_spec(env_id)
    except UnknownEnvError as exc:
        raise _fail(str(exc)) from None


@app.command("list")
def list_cmd() -> None:
    """Registered envs, their task counts per split, and what sandbox they need."""
    from envhub.registry import list_envs
    from envhub.task_counts import task_counts

    table = Table("env", "train", "validation", "test", "sandbox", "description")
    specs = list_envs()
    counts = task_counts(specs)
    for spec in specs:
        row = counts[spec.env_id]
        cells = [str(c) for c in row] if isinstance(row, list) else [f"error: {row}"[:40], "", ""]
        table.add_row(spec.env_id, *cells, spec.sandbox, spec.description)
    console.print(table)


@app.command()
def rollout(
    env_id: Annotated[str, typer.Argument(help="e.g. envhub/Computation-v0")],
    out: Annotated[Path, typer.Option("--out", help="output directory (trajectories.jsonl, report.json)")],
    policy: Annotated[str, typer.Option(help="gold | noop | random | hf:PATH | sglang:URL")] = "gold",
    episodes: Annotated[int, typer.Option(min=1, help="total episodes (a multiple of --group-size)")] = 8,
    group_size: Annotated[int, typer.Option(min=1, help="samples per task (GRPO group)")] = 1,
    seed: int = 0,
    concurrency: Annotated[int, typer.Option(min=1, help="episodes in flight")] = 4,
    split: str = "train",
    sandbox: Annotated[str, typer.Option(help="auto | docker | bwrap | process")] = "auto",
    env_arg: Annotated[list[str] | None, typer.Option(help="key=value passed to the env")] = None,
    remote: Annotated[str | None, typer.Option(help="drive the env served at this URL (envhub serve)")] = None,
    token: Annotated[str | None, typer.Option(envvar="ENVHUB_TOKEN", help="bearer token for --remote")] = None,
    progress: bool = True,
    metrics_port: Annotated[str | None, typer.Option(help="serve Prometheus /metrics at PORT or HOST:PORT "
                                                          "while the run lasts (0: a free port)")] = None,
) -> None:
    """Run episodes; resumable: rerunning with the same --out skips finished episodes."""
    from envhub.policies import make_policy
    from envhub.report import render_table
    from envhub.rollout import RolloutOutputError, run_rollouts

    env_factory = None
    if remote:  # the server's env and split are used; env_id names it in the records
        from envhub.client import remote_env_factory

        env_factory = remote_env_factory(remote, token)
    else:
        _spec(env_id)
    try:
        pol = make_policy(policy)
    except (ValueError, ImportError) as exc:
        raise _fail(str(exc)) from None
    env_kwargs = {"sandbox": sandbox, **_parse_kv(env_arg)}
    on_metrics, stop_metrics = None, None
    if metrics_port is not None:
        try:
            from envhub.metrics import serve_rollout

            pol, on_metrics, stop_metrics = serve_rollout(env_id, pol, metrics_port, planned=episodes, echo=err.print)
        except (ImportError, ValueError, OSError) as exc:
            raise _fail(f"--metrics-port: {exc}") from None
    bar, task = None, None
    if progress and episodes > 1:
        from rich.progress import Progress

        bar = Progress(console=err, transient=True)
        task = bar.add_task("episodes", total=episodes)
        bar.start()
    try:
        result = run_rollouts(
            env_id, pol, out_dir=out, episodes=episodes, group_size=group_size, seed=seed,
            concurrency=concurrency, split=split, env_kwargs=env_kwargs, env_factory=env_factory,
            on_episode=_chain((lambda _r: bar.advance(task)) if bar is not None and task is not None else None,
                              on_metrics),
        )
    except (ValueError, PermissionError, TypeError) as exc:
        raise _fail(str(exc)) from None
    except RolloutOutputError as exc:  # a full disk under --out: what is on disk is kept and said
        raise _fail(str(exc), code=1) from None
    except OSError as exc:  # reading or opening the output failed (an I/O error)
        raise _fail(f"{exc.filename or out}: {exc.strerror or exc}", code=1) from None
    finally:
        if bar is not None:
            bar.stop()
        if stop_metrics is not None:
            stop_metrics()
    console.print(render_table(result.report))
    if result.skipped:
        console.print(f"resumed: {result.skipped} episodes were already in {result.trajectories}")
    console.print(f"wrote {result.trajectories} and {out / 'report.json'}")


@app.command()
def verify(
    env_id: str,
    tasks: Annotated[str | None, typer.Option(help="comma-separated task ids (default: a sample)")] = None,
    split: Annotated[str, typer.Option(help="train, validation, test, or all")] = "test",
    limit: Annotated[int, typer.Option(min=0, help="tasks to sample when --tasks is not given; 0 = all")] = 20,
    cases: Annotated[str | None, typer.Option(help="comma-separated case names")] = None,
    jobs: Annotated[int, typer.Option(min=1, help="envs grading in parallel")] = 2,
    submissions: Annotated[Path | None, typer.Option(help="JSONL of {task_id, submission} to grade")] = None,
    out: Annotated[Path | None, typer.Option(help="write the JSON result here")] = None,
    sandbox: str = "auto",
    env_arg: Annotated[list[str] | None, typer.Option(help="key=value passed to the env")] = None,
) -> None:
    """Run the env's verifier suite (gold, noop, attacks) or grade external submissions."""
    from envhub.env import SPLITS
    from envhub.registry import make
    from envhub.store import write_json_atomic, write_text_atomic
    from envhub.verifiers.suite import grade_submissions, run_suite

    _spec(env_id)
    splits = SPLITS if split == "all" else (split,)
    kwargs = {"split": splits[0], "sandbox": sandbox, **_parse_kv(env_arg)}

    def factory() -> Any:
        return make(env_id, **kwargs)

    try:
        env = factory()  # checks the split and the env arguments before any work
    except (ValueError, TypeError) as exc:
        raise _fail(str(exc)) from None
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
            raise _fail("--tasks names no task id")
    else:
        ids = [i for s in splits for i in env.tasks.task_ids(s)]
    env.close()
    if not tasks and limit:
        ids = _stratified_sample(ids, limit)
    try:
        report = run_suite(factory, ids, cases=cases.split(",") if cases else None, jobs=jobs)
    except ValueError as exc:
        raise _fail(str(exc)) from None
    table = Table("case", "expect", "tasks", "as expected", "rate", "not applicable",
                  title=f"verifier suite: {env_id}")
    for name, row in report.by_case().items():
        style = "red" if row["violations"] else "green"
        table.add_row(name, row["expect"], str(row["tasks"]), str(row["as_expected"]),
                      f"[{style}]{row['rate']:.3f}[/]", str(row["not_applicable"] or ""))
    console.print(table)
    if out:
        _write_out(out, lambda: write_json_atomic(out, report.to_json()))
    if report.violations:
        for name, row in report.by_case().items():
            for v in row["violations"][:3]:
                err.print(f"[red]violation[/] {name} on {v['task_id']}: {v['outcome']}: {v['detail'][:200]}")
        raise typer.Exit(1)


def _chain(*callbacks: Callable[[Any], object] | None) -> Callable[[Any], None] | None:
    """One ``on_episode`` callback calling each given one in order; None when none is given."""
    live = [c for c in callbacks if c is not None]
    if not live:
        return None

    def call(value: Any) -> None:
        for c in live:
            c(value)

    return call


def _write_out(path: Path, write: Callable[[], object]) -> None:
    """Run ``write``; a failure (full disk, no permission) is a message and exit 1, not a traceback."""
    try:
        write()
    except OSError as exc:
        raise _fail(f"cannot write {path}: {exc.strerror or exc}", code=1) from None


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
        raise _fail(f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}") from None
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise _fail(f"{path}:{n}: not JSON ({exc.msg})") from None
        if not isinstance(row, dict):
            raise _fail(f"{path}:{n}: each line must be a JSON object")
        rows.append((n, row))
    if not rows:
        raise _fail(f"{path} holds no submissions (expected JSON lines of {{task_id, submission}})")
    return rows


def _report_ungraded(path: Path, line_numbers: list[int], graded: list[dict[str, Any]]) -> None:
    """Name the lines that could not be graded on stderr; exit 1 when none could be."""
    failed = [(n, g["error"]) for n, g in zip(line_numbers, graded, strict=True) if "error" in g]
    for n, why in failed[:5]:
        err.print(f"[yellow]not graded[/] {path}:{n}: {why}")
    if len(failed) > 5:
        err.print(f"[yellow]not graded[/] {len(failed) - 5} more lines of {path}")
    if failed and len(failed) == len(graded):
        raise _fail(f"none of the {len(graded)} submissions in {path} could be graded", code=1)


@tasks_app.command("export")
def tasks_export(
    env_id: str,
    dest: Annotated[Path, typer.Argument(help="output directory")],
    format: Annotated[str, typer.Option("--format", help="harbor | openenv")] = "harbor",
    split: str = "test",
    limit: Annotated[int, typer.Option(help="at most this many tasks; 0 = all (harbor)")] = 0,
    base_image: Annotated[str | None, typer.Option(help="FROM image (default: the envhub base image)")] = None,
) -> None:
    """Export an env's tasks in another harness's task format: one Harbor task directory per
    task, or an OpenEnv package (openenv.yaml, an offline Dockerfile) that serves the split."""
    from envhub.registry import make

    if format not in ("harbor", "openenv"):
        raise _fail(f"unknown task format {format!r}; supported: harbor, openenv")
    _spec(env_id)
    if format == "openenv":
        from envhub.server.openenv_package import OpenEnvExportError, export_openenv_package

        if limit:
            raise _fail("--limit does not apply to --format openenv: the package serves the whole split")
        try:
            export_openenv_package(env_id, dest, split=split, base_image=base_image, echo=console.print)
        except OpenEnvExportError as exc:
            raise _fail(str(exc)) from None
        return
    env = make(env_id, split=split)
    exporter = getattr(env, "export_harbor", None)
    if exporter is None:
        raise _fail(f"{env_id} does not support Harbor export")
    if base_image is None:
        from envhub.sandboxes import base_image_tag

        base_image = base_image_tag()
    ids = list(env.tasks.task_ids(split))
    ids = ids[:limit] if limit else ids
    written = exporter(ids, dest, base_image=base_image)
    console.print(f"wrote {len(written)} Harbor tasks to {dest}")


@bench_app.command("env-step")
def bench_env_step(
    episodes: int = 200,
    env_id: str = "envhub/Computation-v0",
) -> None:
    """In-process step latency (p50/p99) and episodes per second under the gold policy."""
    from envhub.bench import bench_env_step as run

    run(env_id=env_id, episodes=episodes, out=console.print)


#: Benchmarks that live beside the code they measure: name -> "module:function(out=...) -> dict".
BENCHES = {
    "sandbox": "envhub.sandboxes.bench:run_bench",
    "search": "envhub.tasks.retrieval.bench:run_bench",
    "verify": "envhub.tasks.code_repair.bench:run_bench",
    "serve": "envhub.server.bench:run_bench",
    "trajectory": "envhub.adapters.bench:run_bench",
    "cli": "envhub.cli_bench:run_bench",
}


def _bench_command(name: str, target: str) -> None:
    def command() -> None:
        import importlib

        module, _, func = target.partition(":")
        try:
            fn = getattr(importlib.import_module(module), func)
        except ImportError as exc:
            raise _fail(f"the {name} benchmark needs an optional dependency: {exc}") from None
        fn(out=console.print)

    command.__doc__ = f"The {name} benchmark ({target})."
    bench_app.command(name)(command)


for _name, _target in BENCHES.items():
    _bench_command(_name, _target)


def main() -> None:
    # Imported here, on the main thread, before any command runs, it installs the signal
    # handlers: rollout, verify and serve start their sandboxes on worker threads, which cannot
    # install them, so without this a SIGTERM or Ctrl-C would leave containers and scratch dirs behind.
    from envhub.sandboxes import cleanup  # noqa: F401

    app()


if __name__ == "__main__":
    main()
