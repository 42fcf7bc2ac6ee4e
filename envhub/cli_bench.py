"""``envhub bench cli``: how long ``envhub --help`` and ``envhub list`` take, as a user runs them.

Each command runs as a subprocess (median of 3, after one warm-up run that also fills the task
count cache), next to two baselines measured in the same run: ``envhub list`` with the cache off
(``ENVHUB_NO_CACHE=1``) and importing every command's module up front (what ``envhub --help``
used to cost).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

RUNS = 3
_ENVHUB = [sys.executable, "-m", "envhub.cli"]


def _import_everything() -> list[str]:
    from envhub.cli import SUBCOMMANDS

    modules = ", ".join(repr(m) for m, _, _ in SUBCOMMANDS.values())
    code = f"import importlib, envhub.cli\nfor m in [{modules}]:\n    try: importlib.import_module(m)\n" \
           "    except ImportError: pass\n"
    return [sys.executable, "-c", code]


def _median_seconds(argv: list[str], env: dict[str, str] | None = None) -> float:
    subprocess.run(argv, capture_output=True, env=env, check=True)  # warm-up (page cache, task counts)
    times = []
    for _ in range(RUNS):
        start = time.perf_counter()
        subprocess.run(argv, capture_output=True, env=env, check=True)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def run_bench(out: Callable[[str], object] = print) -> dict[str, Any]:
    """Measure and print the figures; returns them (seconds) by name."""
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
