"""The projects under ``projects/`` and one run of a project's tests with some files replaced.

Every test run is a separate pytest process on a fresh temporary copy of the project: an
in-process run would share imported modules between mutants and could be wedged by an infinite
loop.  The :mod:`.failure_probe` plugin rides along and reports each test's outcome and, for a
failing one, what it observed; :func:`classify` applies the validation rules to the outcome.
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envhub.tasks.code_repair.manifest import PROJECTS_DIR

from . import failure_probe


@dataclass(frozen=True)
class Project:
    """One source project: ``src/`` code, ``tests/`` and ``project.json`` metadata."""

    name: str
    root: Path
    description: str
    tags: tuple[str, ...]
    modules: tuple[str, ...]  # mutable files, relative to the project root ("src/roman.py")

    @classmethod
    def load(cls, root: Path) -> Project:
        meta = json.loads((root / "project.json").read_text(encoding="utf-8"))
        entries = meta.get("entry_modules") or sorted(
            p.relative_to(root / "src").as_posix() for p in (root / "src").rglob("*.py"))
        return cls(meta.get("name", root.name), root, meta.get("description", ""), tuple(meta.get("tags", [])),
                   tuple(f"src/{m}" for m in entries))

    def read(self, rel: str) -> str:
        return (self.root / rel).read_text(encoding="utf-8")


def discover_projects(projects_dir: Path = PROJECTS_DIR, names: Sequence[str] | None = None) -> list[Project]:
    """Projects that have a ``project.json``, sorted by name, optionally filtered."""
    found = [Project.load(p.parent) for p in sorted(projects_dir.glob("*/project.json"))]
    if names:
        missing = set(names) - {p.name for p in found}
        if missing:
            raise SystemExit(f"unknown projects: {', '.join(sorted(missing))}")
        found = [p for p in found if p.name in names]
    return found


@dataclass
class RunResult:
    """Per-test outcomes (by node id) and failure records of one pytest run."""

    outcomes: dict[str, str]
    failures: dict[str, dict[str, Any]]
    collection_errors: list[str]
    timed_out: bool = False
    seconds: float = 0.0

    def passed(self) -> set[str]:
        return {t for t, o in self.outcomes.items() if o == "passed"}


_IGNORE = shutil.ignore_patterns("__pycache__", ".pytest_cache", "*.pyc")
_PYTEST_ARGS = ["tests", "-q", "--tb=no", "-p", "no:cacheprovider", "-p", failure_probe.PROBE_MODULE,
                "-c", os.devnull, "--rootdir", "."]
# The interpreter settings every run gets: set sizes and orders in failure reprs must not vary
# (hash seed), and entry-point plugins of this machine must not take part (5x faster start, too).
_RUN_ENV = {"PYTHONDONTWRITEBYTECODE": "1", "PYTHONHASHSEED": "0", "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}

# A fork server: pytest is imported once, then every run is a forked child that sets up its
# paths, runs ``pytest.main`` and exits.  A child is a fresh process as far as the project is
# concerned (no project module is ever imported in the server), but starts in milliseconds
# instead of the ~0.4 s a new interpreter needs to import pytest, the bulk of a small run.
_FORK_SERVER = r"""
import json, os, signal, sys, time
import pytest

for line in sys.stdin:
    job = json.loads(line)
    start = time.monotonic()
    pid = os.fork()
    if pid == 0:
        code = 99
        try:
            fd = os.open(os.devnull, os.O_RDWR)
            for target in (0, 1, 2):
                os.dup2(fd, target)
            os.chdir(job["cwd"])
            sys.path[:0] = job["path"]
            os.environ.update(job["env"])
            code = int(pytest.main(job["args"]))
        finally:
            os._exit(code)
    timed_out = False
    while not os.waitpid(pid, os.WNOHANG)[0]:
        if time.monotonic() - start > job["timeout"]:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            timed_out = True
            break
        time.sleep(0.002)
    print(json.dumps({"timed_out": timed_out}), flush=True)
"""


class Runner:
    """Runs pytest for one prepared copy: a new interpreter per run, or forks of a warm one."""

    def __init__(self, fork: bool = True, size: int = 2) -> None:
        self.fork = fork and hasattr(os, "fork")
        self.idle: queue.SimpleQueue[subprocess.Popen[str]] = queue.SimpleQueue()
        self.servers: list[subprocess.Popen[str]] = []
        self.lock = threading.Lock()
        self.size = size

    def __enter__(self) -> Runner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for server in self.servers:
            if server.stdin:
                server.stdin.close()
            server.wait(timeout=10)
        self.servers.clear()

    def _server(self) -> subprocess.Popen[str]:
        with self.lock:
            if self.idle.empty() and len(self.servers) < self.size:
                env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "PYTEST"))} | _RUN_ENV
                server = subprocess.Popen([sys.executable, "-c", _FORK_SERVER], stdin=subprocess.PIPE,
                                          stdout=subprocess.PIPE, env=env, text=True)
                self.servers.append(server)
                return server
        return self.idle.get()

    def run(self, repo: Path, extra_path: list[str], env: dict[str, str], timeout: float) -> bool:
        """Run the tests of ``repo``; returns whether the run timed out."""
        if not self.fork:
            full_env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "PYTEST"))}
            full_env |= _RUN_ENV | env | {"PYTHONPATH": os.pathsep.join(extra_path)}
            try:
                subprocess.run([sys.executable, "-m", "pytest", *_PYTEST_ARGS], cwd=repo, env=full_env,
                               timeout=timeout, capture_output=True, check=False)
            except subprocess.TimeoutExpired:
                return True
            return False
        server = self._server()
        try:
            job = {"cwd": str(repo), "path": [str(repo), *extra_path], "env": env, "args": _PYTEST_ARGS,
                   "timeout": timeout}
            assert server.stdin is not None and server.stdout is not None
            server.stdin.write(json.dumps(job) + "\n")
            server.stdin.flush()
            reply = server.stdout.readline()
            if not reply:
                raise RuntimeError("pytest fork server died")
            return bool(json.loads(reply)["timed_out"])
        finally:
            self.idle.put(server)


_DEFAULT_RUNNER = Runner(fork=False)


def run_tests(project: Project, files: dict[str, str] | None = None, timeout: float = 60.0,
              runner: Runner | None = None) -> RunResult:
    """Run the project's tests in a fresh temporary copy with ``files`` overriding sources."""
    with tempfile.TemporaryDirectory(prefix=f"cr-{project.name}-") as tmp:
        repo, probe = Path(tmp) / "repo", Path(tmp) / "probe"
        shutil.copytree(project.root, repo, ignore=_IGNORE)
        for rel, text in (files or {}).items():
            (repo / rel).write_text(text, encoding="utf-8")
        probe.mkdir()
        shutil.copyfile(failure_probe.__file__, probe / f"{failure_probe.PROBE_MODULE}.py")
        out = Path(tmp) / "probe.json"
        start = time.monotonic()
        timed_out = (runner or _DEFAULT_RUNNER).run(
            repo, [str(repo / "src"), str(probe)], {failure_probe.PROBE_ENV: str(out)}, timeout)
        seconds = time.monotonic() - start
        if timed_out:
            return RunResult({}, {}, [], timed_out=True, seconds=seconds)
        if not out.exists():
            return RunResult({}, {}, ["<no report>"], seconds=seconds)
        data = json.loads(out.read_text())
        return RunResult(data["outcomes"], data["failures"], data["collection_errors"], seconds=seconds)


@dataclass(frozen=True)
class Verdict:
    """Whether a mutant is a usable instance, and its fail-to-pass / pass-to-pass split."""

    status: str  # ok | equivalent | all_fail | collection_error | timeout
    fail_to_pass: tuple[str, ...] = ()
    pass_to_pass: tuple[str, ...] = ()


def classify(baseline: set[str], run: RunResult) -> Verdict:
    """Apply the validation rules; a test missing from the run counts as failed."""
    if run.timed_out:
        return Verdict("timeout")
    if run.collection_errors:
        return Verdict("collection_error")
    passed = run.passed()
    f2p = tuple(sorted(baseline - passed))
    p2p = tuple(sorted(baseline & passed))
    if not f2p:
        return Verdict("equivalent")
    if not p2p:
        return Verdict("all_fail")
    return Verdict("ok", f2p, p2p)
