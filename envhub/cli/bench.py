"""``envhub bench ...``: the performance benchmarks, each printing its figures next to a baseline
measured in the same run. Each benchmark lives beside the code it measures and is imported only
when it runs; ``envhub bench cli`` (how long ``envhub --help`` and ``envhub list`` take) lives here.

``bench cli`` runs each command as a subprocess (median of 3, after one warm-up run that also
fills the task count cache), next to two baselines measured in the same run: ``envhub list`` with
the cache off (``ENVHUB_NO_CACHE=1``) and importing every command's module up front (what
``envhub --help`` used to cost).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import typer

from envhub.cli.common import console, fail

bench_app = typer.Typer(no_args_is_help=True, help="performance benchmarks")


def _run(name: str, load: Callable[[], Callable[..., Any]]) -> None:
    """Run a benchmark that ``load`` imports from beside the code it measures; exit 2 naming
    a missing optional dependency."""
    try:
        run = load()
    except ImportError as exc:
        raise fail(f"the {name} benchmark needs an optional dependency: {exc}") from None
    run(out=console.print)


@bench_app.command("env-step")
def bench_env_step(episodes: int = 200, env_id: str = "envhub/Computation-v0") -> None:
    """In-process step latency (p50/p99) and episodes per second under the gold policy."""
    from envhub.rollout.bench import bench_env_step as run

    run(env_id=env_id, episodes=episodes, out=console.print)


def _sandbox() -> Callable[..., Any]:
    from envhub.sandboxes.bench import run_bench

    return run_bench


def _search() -> Callable[..., Any]:
    from envhub.tasks.retrieval.bench import run_bench

    return run_bench


def _verify() -> Callable[..., Any]:
    from envhub.tasks.code_repair.bench import run_bench

    return run_bench


def _serve() -> Callable[..., Any]:
    from envhub.server.bench.serving import run_bench

    return run_bench


def _trajectory() -> Callable[..., Any]:
    from envhub.adapters.bench import run_bench

    return run_bench


def _concurrency() -> Callable[..., Any]:
    from envhub.rollout.bench_concurrency import run_bench

    return run_bench


@bench_app.command("sandbox")
def bench_sandbox() -> None:
    """Warm exec and pool reset latency of each sandbox backend against cold starts."""
    _run("sandbox", _sandbox)


@bench_app.command("search")
def bench_search() -> None:
    """Retrieval's BM25 search latency against rank-bm25."""
    _run("search", _search)


@bench_app.command("verify")
def bench_verify() -> None:
    """Code-repair grading time per instance against a plain pytest run."""
    _run("verify", _verify)


@bench_app.command("serve")
def bench_serve(
    burst: int = typer.Option(0, min=0, help="instead: N sessions opened at once, first tool call p50/p90 "
                              "(cold, --prewarm N, and against a pool warmed in advance)"),
    backend: list[str] = typer.Option(["docker", "bwrap"], help="--burst: sandbox backend (repeatable)"),
    rounds: int = typer.Option(3, min=1, help="--burst: alternating rounds of fresh servers"),
) -> None:
    """WebSocket step round trips: envhub's server next to OpenEnv's, hosting the same env."""
    if burst:
        from envhub.server.bench.burst import run_burst

        run_burst(out=console.print, backends=tuple(backend), sessions=burst, rounds=rounds)
        return
    _run("serve", _serve)


@bench_app.command("trajectory")
def bench_trajectory() -> None:
    """Building token trajectories turn by turn against re-applying the chat template."""
    _run("trajectory", _trajectory)


@bench_app.command("concurrency")
def bench_concurrency() -> None:
    """Episode throughput as concurrency grows, in process and on Ray."""
    _run("concurrency", _concurrency)


@bench_app.command("cli")
def bench_cli() -> None:
    """How long `envhub --help` and `envhub list` take, against importing every command."""
    cli_figures(out=console.print)


@bench_app.command("train", add_help_option=False,
                   context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def bench_train(ctx: typer.Context) -> None:
    """The trainer's step against TRL's GRPOTrainer; `envhub bench train --help` lists its options."""
    try:
        from envhub.trainer.bench import main
    except ImportError as exc:
        raise fail(f"the train benchmark needs an optional dependency: {exc}") from None
    raise typer.Exit(main(list(ctx.args)))


@bench_app.command("async", add_help_option=False,
                   context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def bench_async(ctx: typer.Context) -> None:
    """Sync against async training on an env whose tool takes a set latency; `envhub bench async --help`."""
    try:
        from envhub.trainer.bench_async import main
    except ImportError as exc:
        raise fail(f"the async benchmark needs an optional dependency: {exc}") from None
    raise typer.Exit(main(list(ctx.args)))


@bench_app.command("host", add_help_option=False,
                   context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def bench_host(ctx: typer.Context) -> None:
    """A hosted OpenEnv env's step through our bridge against openenv's GenericEnvClient; `envhub bench host --help`."""
    try:
        from envhub.server.bench.host import main
    except ImportError as exc:
        raise fail(f"the host benchmark needs an optional dependency: {exc}") from None
    raise typer.Exit(main(list(ctx.args)))


@bench_app.command("judge", add_help_option=False,
                   context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def bench_judge(ctx: typer.Context) -> None:
    """Judged episodes per second, concurrent judge calls (batched) against one at a time; `envhub bench judge --help`."""
    from envhub.verifiers.judge.bench import main

    raise typer.Exit(main(list(ctx.args)))


RUNS = 3
_ENVHUB = [sys.executable, "-m", "envhub.cli"]


def _import_everything() -> list[str]:
    code = ("from envhub.cli.commands import SUBCOMMANDS\nfor load, _ in SUBCOMMANDS.values():\n"
            "    try: load()\n    except ImportError: pass\n")
    return [sys.executable, "-c", code]


def _median_seconds(argv: list[str], env: dict[str, str] | None = None) -> float:
    subprocess.run(argv, capture_output=True, env=env, check=True)  # warm-up (page cache, task counts)
    times = []
    for _ in range(RUNS):
        start = time.perf_counter()
        subprocess.run(argv, capture_output=True, env=env, check=True)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def cli_figures(out: Callable[[str], object] = print) -> dict[str, Any]:
    """``envhub bench cli``'s figures, printed; returns them (seconds) by name."""
    no_cache = {**os.environ, "ENVHUB_NO_CACHE": "1"}
    result = {
        "help_s": _median_seconds([*_ENVHUB, "--help"]),
        "import_all_s": _median_seconds(_import_everything()),
        "list_s": _median_seconds([*_ENVHUB, "list"]),
        "list_no_cache_s": _median_seconds([*_ENVHUB, "list"], env=no_cache),
    }
    out(f"envhub --help  {result['help_s']:.2f} s   (baseline: importing every command {result['import_all_s']:.2f} s)")
    out(f"envhub list    {result['list_s']:.2f} s   (baseline: ENVHUB_NO_CACHE=1 {result['list_no_cache_s']:.2f} s)")
    out(f"median of {RUNS} subprocess runs each, after one warm-up")
    return result
