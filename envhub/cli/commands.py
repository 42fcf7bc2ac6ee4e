"""The ``envhub`` command line. Each command is a thin shell over a library function."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import click
import typer
from rich.table import Table
from typer.core import TyperGroup

from envhub.cli.common import (
    check_policy_fits,
    checked_env_kwargs,
    console,
    env_spec,
    err,
    fail,
    parse_kv,
    signals_stop_like_ctrl_c,
)

if TYPE_CHECKING:
    from envhub.registry import EnvSpec


def _new_env() -> Any:
    from envhub.cli.scaffold import new_env_command

    return new_env_command


def _export() -> Any:
    from envhub.adapters.export.cli import export_command

    return export_command


def _import() -> Any:
    from envhub.adapters.export.cli import import_app

    return import_app


def _tito() -> Any:
    from envhub.adapters.tito.cli import tito_command

    return tito_command


def _serve() -> Any:
    from envhub.server.cli import serve_command

    return serve_command


def _audit() -> Any:
    from envhub.cli.audit import audit_command

    return audit_command


def _report() -> Any:
    from envhub.reports.html import report_command

    return report_command


def _profile() -> Any:
    from envhub.cli.profile import profile_command

    return profile_command


def _judge() -> Any:
    from envhub.verifiers.judge.cli import judge_app

    return judge_app


def _train() -> Any:
    from envhub.trainer.cli import train_command

    return train_command


def _verify() -> Any:
    from envhub.verifiers.cli import verify_command

    return verify_command


def _sandbox() -> Any:
    from envhub.sandboxes.cli import app

    return app


def _bench() -> Any:
    from envhub.cli.bench import bench_app

    return bench_app


def _models() -> Any:
    from envhub.adapters.engines.cli import models_app

    return models_app


#: Command groups and commands that live beside the code they drive: name -> (loader, one-line
#: help). A loader imports its command only when it runs (or is asked for its own --help), so that
#: ``envhub --help`` and the built-in commands never pay for those imports.
SUBCOMMANDS: dict[str, tuple[Callable[[], Any], str]] = {
    "new-env": (_new_env, "Generate a task-family plugin package (entry point, task source, tools, verifier, suite)."),
    "export": (_export, "Export a run's trajectories for an external trainer (veRL, slime, Miles, TRL, SkyRL, Parquet)."),
    "import": (_import, "Import trajectories of other formats (ATIF, Harbor's) into a run directory."),
    "tito": (_tito, "Serve a model as an OpenAI-compatible chat endpoint that records token-exact trajectories."),
    "serve": (_serve, "Serve ENV_ID over HTTP, WebSocket and MCP, compatible with OpenEnv's clients."),
    "audit": (_audit, "Token-fidelity audit of a run's trajectories; exits 1 if any trajectory has an error."),
    "report": (_report, "Render a run as one self-contained HTML report, with its plots also written as PNG files."),
    "profile": (_profile, "pass@k per task (unbiased estimator); writes profile.json and curriculum.json."),
    "judge": (_judge, "Calibrate an env's LLM judge against the programmatic verdict, and attack it with the bias battery."),
    "train": (_train, "Train a policy with the bundled trainer (SFT warm start and GRPO) from a YAML config."),
    "verify": (_verify, "Run the env's verifier suite (gold, noop, attacks) or grade external submissions."),
    "sandbox": (_sandbox, "Sandbox images, health and cleanup."),
    "bench": (_bench, "Performance benchmarks, each against a baseline measured in the same run."),
    "models": (_models, "Local models (converted once into the envhub cache)."),
}


class _LazyGroup(TyperGroup):
    """The top-level group: the commands of :data:`SUBCOMMANDS` are imported on first use."""

    _listing = False

    def list_commands(self, ctx: click.Context) -> list[str]:
        return [*super().list_commands(ctx), *(n for n in SUBCOMMANDS if n not in self.commands)]

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in SUBCOMMANDS and cmd_name not in self.commands:
            if self._listing:  # the group's own --help needs only the name and one line
                return click.Command(cmd_name, help=SUBCOMMANDS[cmd_name][1])
            self.add_command(_load_subcommand(cmd_name), cmd_name)
        return super().get_command(ctx, cmd_name)

    def format_help(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        self._listing = True
        try:
            super().format_help(ctx, formatter)
        finally:
            self._listing = False


#: The extra (``pip install 'envhub[EXTRA]'``) that brings what a :data:`SUBCOMMANDS` entry imports.
SUBCOMMAND_EXTRAS = {"export": "integrations", "tito": "serve", "serve": "serve", "report": "report",
                     "train": "train", "models": "train"}


def _load_subcommand(name: str) -> click.Command:
    """The click command of a :data:`SUBCOMMANDS` entry; one whose optional dependency is missing
    becomes a command that says which extra to install and exits 2."""
    load, help_text = SUBCOMMANDS[name]
    try:
        sub = load()
    except ImportError as exc:
        extra = SUBCOMMAND_EXTRAS.get(name)
        fix = f"pip install 'envhub[{extra}]'" if extra else "see the install section of README.md"
        why = f"`envhub {name}` needs an optional dependency that is not installed ({exc}); install it: {fix}"

        def missing() -> None:
            raise fail(why)

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
tasks_app = typer.Typer(no_args_is_help=True, help="task sets: export to other harnesses")
app.add_typer(tasks_app, name="tasks")
@app.command("list")
def list_cmd(
    env_ids: Annotated[list[str] | None, typer.Argument(
        help="envs to list, registered or bridged (openenv:URL, verifiers:MODULE); default: every registered one")] = None,
) -> None:
    """Registered envs (or the ones named), their task counts per split, and what sandbox they need."""
    from envhub.cli.task_counts import task_counts
    from envhub.registry import UnknownEnvError, get_spec, list_envs

    table = Table("env", "train", "validation", "test", "sandbox", "description")
    try:
        specs = [get_spec(e) for e in env_ids] if env_ids else list_envs()
    except UnknownEnvError as exc:
        raise fail(str(exc)) from None
    counts = task_counts(specs)
    for spec in specs:
        row = counts[spec.env_id]
        cells = [str(c) for c in row] if isinstance(row, list) else [f"error: {row}"[:40], "", ""]
        table.add_row(spec.env_id, *cells, _sandbox_needs(spec), spec.description)
    console.print(table)
    from envhub.verifiers.judge.latest import latest_calibration, summary

    for spec in specs:
        calibration = latest_calibration(spec.env_id)
        if calibration is not None:
            console.print(f"{spec.env_id}: {summary(calibration)}", markup=False, highlight=False)


def _sandbox_needs(spec: EnvSpec) -> str:
    """What the env's class says it needs from a sandbox: none (no tool runs code), an isolating
    backend (its agent's code must not see task data), or any backend."""
    try:
        env_class = spec.load()  # already imported: counting its tasks made one
    except Exception:  # the counts column says why
        return "?"
    if getattr(env_class, "sandbox_spec", None) is None:
        return "none"
    return "isolating: docker | bwrap | landlock" if getattr(env_class, "needs_isolation", True) else "any"


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
    sandbox: Annotated[str, typer.Option(help="auto | docker | bwrap | landlock | process")] = "auto",
    env_arg: Annotated[list[str] | None, typer.Option(help="key=value passed to the env")] = None,
    remote: Annotated[str | None, typer.Option(help="drive the env served at this URL (envhub serve)")] = None,
    token: Annotated[str | None, typer.Option(envvar="ENVHUB_TOKEN", help="bearer token for --remote")] = None,
    progress: Annotated[bool | None, typer.Option("--progress/--no-progress", help=(
        "progress bar on stderr (default: when stderr is a terminal; ENVHUB_PROGRESS=1/0 overrides)"))] = None,
    metrics_port: Annotated[str | None, typer.Option(help="serve Prometheus /metrics at PORT or HOST:PORT "
                                                          "while the run lasts (0: a free port)")] = None,
    backend: Annotated[str, typer.Option(help="local: episodes on threads of this process | ray: on Ray "
                                              "actors (pip install 'envhub[ray]')")] = "local",
    address: Annotated[str | None, typer.Option(help="--backend ray: the Ray cluster to join (default: "
                                                     "RAY_ADDRESS, else a local one started for the run)")] = None,
) -> None:
    """Run episodes; resumable: rerunning with the same --out skips finished episodes."""
    from envhub.policies import make_policy
    from envhub.progress import EpisodeProgress, interrupted_message, progress_wanted
    from envhub.rollout.runner import RolloutOutputError, run_rollouts
    from envhub.rollout.summary import render_table
    from envhub.run_dir import Run
    from envhub.sandboxes.cleanup import exit_code

    _check_backend(backend, address, remote, metrics_port)
    env_factory = None
    if remote:  # the server's env and split are used; env_id names it in the records
        from envhub.server.client import remote_env_factory

        env_factory = remote_env_factory(remote, token)
    else:
        env_spec(env_id)
        check_policy_fits(env_id, policy)
    try:
        pol = make_policy(policy) if backend == "local" else None  # a Ray backend makes it in its workers
    except (ValueError, ImportError) as exc:
        raise fail(str(exc)) from None
    # a served env's arguments are the server's: --env-arg names its env only for the records
    env_kwargs = {"sandbox": sandbox, **parse_kv(env_arg)} if remote else \
        checked_env_kwargs(env_id, env_arg, sandbox=sandbox)
    on_metrics, stop_metrics = None, None
    if metrics_port is not None:
        try:
            from envhub.rollout.metrics import serve_rollout

            pol, on_metrics, stop_metrics = serve_rollout(env_id, pol, metrics_port, planned=episodes, echo=err.print)
        except (ImportError, ValueError, OSError) as exc:
            raise fail(f"--metrics-port: {exc}") from None
    collector = _ray_collector(env_id, policy, split, env_kwargs, concurrency, address) if backend == "ray" else None
    bar = EpisodeProgress(Run(out).trajectories_path, episodes, show=progress_wanted(progress))
    said: list[bool] = []

    def say_interrupted() -> None:  # what finished is on disk; say so, and how to go on
        if not said:
            said.append(True)
            bar.close("")  # the live bar stops first: the line is not drawn over
            err.print(interrupted_message(Run(out).trajectories_path, episodes), markup=False, highlight=False,
                      soft_wrap=True)  # a long --out path is never wrapped

    try:
        with signals_stop_like_ctrl_c(), bar:
            result = run_rollouts(
                env_id, pol, out_dir=out, episodes=episodes, group_size=group_size, seed=seed,
                concurrency=concurrency, split=split, env_kwargs=env_kwargs, env_factory=env_factory,
                collector=collector,
                on_episode=_chain(bar.on_episode, on_metrics), on_interrupt=say_interrupted,
            )
    except KeyboardInterrupt as exc:  # Ctrl-C (130) or SIGTERM (143): said at once, or now
        say_interrupted()
        raise typer.Exit(exit_code(exc)) from None
    except (ValueError, PermissionError, TypeError) as exc:
        raise fail(str(exc)) from None
    except RolloutOutputError as exc:  # a full disk under --out: what is on disk is kept and said
        raise fail(str(exc), code=1) from None
    except OSError as exc:  # reading or opening the output failed (an I/O error)
        raise fail(f"{exc.filename or out}: {exc.strerror or exc}", code=1) from None
    finally:
        if stop_metrics is not None:
            stop_metrics()
    console.print(render_table(result.report))
    if "ray" in result.report:
        ray_stats = result.report["ray"]
        console.print(f"ray: {ray_stats['workers']} workers, {ray_stats['deaths']} deaths, {ray_stats['restarts']} "
                      f"restarts, {len(ray_stats['quarantined'])} quarantined, {ray_stats['redispatched']} re-dispatched")
    if result.skipped:
        console.print(f"resumed: {result.skipped} episodes were already in {result.trajectories}")
    console.print(f"wrote {result.trajectories} and {out / 'report.json'}")


def _check_backend(backend: str, address: str | None, remote: str | None, metrics_port: str | None) -> None:
    """Exit 2 for a rollout backend that is not one, or options that do not go with it."""
    if backend not in ("local", "ray"):
        raise fail(f"unknown --backend {backend!r}; choose local or ray")
    if address is not None and backend != "ray":
        raise fail("--address is the Ray cluster of --backend ray")
    if backend == "ray" and remote:
        raise fail("--remote drives a served env from this process; it does not combine with --backend ray")
    if backend == "ray" and metrics_port is not None:
        raise fail("--metrics-port counts the policy's requests in this process; not available with --backend ray")


def _ray_collector(env_id: str, policy: str, split: str, env_kwargs: dict[str, Any], concurrency: int,
                   address: str | None) -> Any:
    """The rollout's :class:`~envhub.rollout.ray_backend.RayCollector`; exit 2 when it cannot start."""
    from envhub.rollout.ray_backend import RayBackendError, RayCollector, RayEnvSpec

    try:
        return RayCollector(RayEnvSpec(env_id, split=split, kwargs=env_kwargs), policy, concurrency=concurrency,
                            address=address)
    except (RayBackendError, ValueError) as exc:
        raise fail(str(exc)) from None


def _chain(*callbacks: Callable[[Any], object] | None) -> Callable[[Any], None] | None:
    """One ``on_episode`` callback calling each given one in order; None when none is given."""
    live = [c for c in callbacks if c is not None]
    if not live:
        return None

    def call(value: Any) -> None:
        for c in live:
            c(value)

    return call


@tasks_app.command("export")
def tasks_export(
    env_id: str,
    dest: Annotated[Path, typer.Argument(help="output directory")],
    format: Annotated[str, typer.Option("--format", help="harbor | openenv")] = "harbor",
    split: str = "test",
    limit: Annotated[int, typer.Option(help="at most this many tasks; 0 = all (harbor)")] = 0,
    base_image: Annotated[str | None, typer.Option(
        help="FROM image (harbor default: a public python image, pulled where the task is built; "
             "openenv default: the local envhub base image)")] = None,
) -> None:
    """Export an env's tasks in another harness's task format: one Harbor task directory per
    task, or an OpenEnv package (openenv.yaml, an offline Dockerfile) that serves the split.
    Prints what the export needs where it runs: network, base image, uid."""
    from envhub.registry import make

    if format not in ("harbor", "openenv"):
        raise fail(f"unknown task format {format!r}; supported: harbor, openenv")
    env_spec(env_id)
    if format == "openenv":
        from envhub.sandboxes.images import AGENT_UID, base_image_tag
        from envhub.server.openenv_package import NETWORK_MODE, OpenEnvExportError, export_openenv_package

        if limit:
            raise fail("--limit does not apply to --format openenv: the package serves the whole split")
        base = base_image or str(base_image_tag())
        try:
            export_openenv_package(env_id, dest, split=split, base_image=base, echo=console.print)
        except OpenEnvExportError as exc:
            raise fail(str(exc)) from None
        _print_needs("the package", f"none ({NETWORK_MODE})", base, AGENT_UID)
        return
    env = make(env_id, split=split)
    exporter = getattr(env, "export_harbor", None)
    if exporter is None:
        raise fail(f"{env_id} does not support Harbor export")
    ids = list(env.tasks.task_ids(split))
    ids = ids[:limit] if limit else ids
    written = exporter(ids, dest, base_image=base_image)
    console.print(f"wrote {len(written)} Harbor tasks to {dest}")
    if written:
        _print_harbor_needs(Path(written[0]))


def _print_needs(what: str, network: str, base_image: str, uid: object) -> None:
    console.print(f"{what} needs: network {network}; base image {base_image}; uid {uid}", markup=False,
                  highlight=False)


def _print_harbor_needs(task_dir: Path) -> None:
    """What a Harbor task says it needs, read back from its task.toml (every task says the same)."""
    import tomllib

    config = tomllib.loads((task_dir / "task.toml").read_text())
    meta, environment = config.get("metadata", {}), config.get("environment", {})
    # Harbor's default is to allow it: only an explicit false means none
    network = "none (allow_internet = false)" if environment.get("allow_internet") is False else "allowed"
    _print_needs("each task", network, meta.get("envhub_base_image", "(see environment/Dockerfile)"),
                 meta.get("envhub_agent_uid", "(see environment/Dockerfile)"))


def main() -> None:
    # Installed here, on the main thread, before any command runs: rollout, verify and serve start
    # their sandboxes on worker threads, which cannot install signal handlers, so without this a
    # SIGTERM or Ctrl-C would leave containers and scratch dirs behind.
    from envhub.sandboxes.cleanup import install_signal_handlers

    install_signal_handlers()

    app()


if __name__ == "__main__":
    main()
