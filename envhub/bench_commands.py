"""``envhub bench ...``: the performance benchmarks, each printing its figures next to a baseline
measured in the same run. Each benchmark lives beside the code it measures and is imported only
when it runs (string table below), so core imports none of the parts it measures."""

from __future__ import annotations

import sys

import typer
from rich.console import Console

bench_app = typer.Typer(no_args_is_help=True, help="performance benchmarks")
console = Console(width=None if sys.stdout.isatty() else 200)


def _fail(message: str, code: int = 2) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(code)


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
    "concurrency": "envhub.bench_concurrency:run_bench",
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


#: Benchmarks with options of their own: name -> "module:function(argv: list[str]) -> int" (argparse).
BENCH_MAINS = {"train": "envhub.trainer.bench:main"}


def _bench_main_command(name: str, target: str) -> None:
    def command(ctx: typer.Context) -> None:
        import importlib

        module, _, func = target.partition(":")
        try:
            fn = getattr(importlib.import_module(module), func)
        except ImportError as exc:
            raise _fail(f"the {name} benchmark needs an optional dependency: {exc}") from None
        raise typer.Exit(fn(list(ctx.args)))

    command.__doc__ = f"The {name} benchmark ({target}); `envhub bench {name} --help` lists its options."
    bench_app.command(name, add_help_option=False, context_settings={
        "allow_extra_args": True, "ignore_unknown_options": True})(command)


for _name, _target in BENCH_MAINS.items():
    _bench_main_command(_name, _target)
