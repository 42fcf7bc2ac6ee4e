"""Record what the gold sources observe: the expected side of probe grading (build time, trusted).

For a project (``src/`` plus a pytest ``tests/`` suite) this

1. collects the suite with pytest to learn every test id and, for parametrized tests, which row
   of which table it runs (``callspec.indices``) -- the probes carry no ids; and, for every
   ``pytest.raises`` of a test, what it expects, evaluated as pytest would (in the test module, with
   that case's parameters): the qualified names of its classes and its ``match=`` pattern;
2. compiles the tests into probes and runs them on the *gold* sources with the same runner, flags
   and hash seed as grading, twice: both runs must agree (an observation that depends on time or
   memory addresses would fail correct fixes) and every test must end ``ok``;
3. returns the layout and the expectations -- the observations, where a ``pytest.raises`` site keeps
   the test's own predicate ``["raises", classes, pattern, flags, chains]`` instead of what the gold raised
   (which must satisfy it), and a ``pytest.approx`` site the test's call evaluated for the case,
   ``["approx", expected, rel, abs, nan_ok]`` -- to be stored where no sandbox can read them;
4. times the gold's batches (``ProbeSuite.gold_s``), which grading's deadlines are made from.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from .batching import expected_values, group
from .compare import approx_holds, holds_as_expected, raised_as_expected, read_report
from .compiler import Probe, with_views
from .equality import eq_fields
from .grader import (
    PROBE_DIR,
    RUNNER_ENV,
    ProbeRun,
    ProbeSuite,
    ProbeTest,
    plan,
    probe_files,
    runner_command,
    verdicts_from_output,
)

_COLLECTOR = r'''
import json, os, re, sys
import pytest
from envhub.verifiers.probes.excinfo import qualname
from envhub.verifiers.probes.runtime import encode

RAISING = json.loads(sys.stdin.read())  # test module -> test function -> [[site, imports, spec], ...]

def raising(item, path):
    """What each pytest.raises of the test expects, evaluated as pytest would: in its module, with its
    case's parameters and the imports the test function makes (and so each computed `in` operand)."""
    spec = getattr(item, "callspec", None)
    out = {}
    for site, imports, site_spec in RAISING.get(path, {}).get(item.originalname, []):
        scope = {**vars(item.module), **(spec.params if spec else {})}
        for statement in imports:
            exec(statement, scope)
        if "membership" in site_spec:
            out[str(site)] = [site_spec["membership"], encode(eval(site_spec["value"], scope)), site_spec["negate"]]
            continue
        if "approx" in site_spec:
            approx = eval(site_spec["approx"], scope)
            out[str(site)] = ["approx", encode(approx.expected), encode(approx.rel), encode(approx.abs),
                              bool(approx.nan_ok)]
            continue
        classes, match = site_spec["classes"], site_spec["match"]
        value = eval(classes, scope)
        value = value if isinstance(value, tuple) else (value,)
        if not value or not all(isinstance(c, type) and issubclass(c, BaseException) for c in value):
            raise TypeError(f"{item.nodeid}: pytest.raises({classes}) names no exception class")
        pattern = None if match is None else eval(match, scope)
        if isinstance(pattern, re.Pattern) and isinstance(pattern.pattern, str):
            pattern = [pattern.pattern, pattern.flags]
        elif pattern is None or isinstance(pattern, str):
            pattern = [pattern, 0]
        else:
            raise TypeError(f"{item.nodeid}: match={match} is not a str pattern")
        out[str(site)] = ["raises", sorted({qualname(c) for c in value}), *pattern, chains(value)]
    return out

def chains(expected):
    """The MRO by qualified name of every exception class the project defines and of every class in
    an expected class's MRO: the classes the trusted side knows (builtins' it has of its own)."""
    root = os.path.abspath("src") + os.sep
    classes = set(expected)
    for module in list(sys.modules.values()):
        if os.path.abspath(getattr(module, "__file__", None) or "/").startswith(root):
            classes |= {v for v in vars(module).values() if isinstance(v, type) and issubclass(v, BaseException)}
    known = {k for c in classes for k in c.__mro__ if k.__module__ != "builtins"}
    return {qualname(k): [qualname(m) for m in k.__mro__] for k in sorted(known, key=qualname)}

class _Dump:
    def __init__(self):
        self.items = []
    def pytest_collection_finish(self, session):
        for item in session.items:
            spec = getattr(item, "callspec", None)
            path = item.path.relative_to(session.config.rootpath).as_posix()
            self.items.append([item.nodeid, path, item.originalname, dict(spec.indices) if spec else {},
                               raising(item, path)])

dump = _Dump()
code = pytest.main(["--collect-only", "-q", "-p", "no:cacheprovider", "-c", "/dev/null", "--rootdir", ".",
                    "tests"], plugins=[dump])
sys.stdout.write("\n@@ENVHUB@@" + json.dumps(dump.items) + "\n")
sys.exit(int(code))
'''


def attach_views(suite: ProbeSuite, classes: dict[str, tuple[str, ...]]) -> ProbeSuite:
    """Compile the gold's ``__eq__`` fields into every probe (``compiler.with_views``), for grading
    and recording alike: the probes' fingerprint covers them."""
    suite.classes = dict(classes)
    for probe in suite.probes.values():
        with_views(probe, classes)
    return suite


class RecordError(RuntimeError):
    """The gold sources do not give clean, repeatable observations (fix the project or its tests)."""


def collect_layout(project_root: Path, probes: dict[str, Probe]) -> tuple[dict[str, ProbeTest], dict[str, dict]]:
    """Every test id of the project's suite, where it lives in the probes, and what each of its
    ``pytest.raises`` expects (test id -> site -> ``["raises", classes, pattern, flags, chains]``)."""
    env = {**os.environ, "PYTHONPATH": str(project_root.resolve() / "src"), "PYTHONDONTWRITEBYTECODE": "1",
           "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    wanted: dict[str, dict[str, list]] = {}
    for path, probe in probes.items():
        for site, spec in sorted(probe.raising.items()):
            wanted.setdefault(path, {}).setdefault(spec["function"], []).append([site, spec["imports"], spec])
    proc = subprocess.run([sys.executable, "-c", _COLLECTOR], cwd=project_root, env=env, capture_output=True,
                          input=json.dumps(wanted), text=True, timeout=120)
    if proc.returncode != 0 or "@@ENVHUB@@" not in proc.stdout:
        raise RecordError(f"{project_root.name}: collection failed:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    layout: dict[str, ProbeTest] = {}
    raising: dict[str, dict] = {}
    for node_id, path, function, indices, expects in json.loads(proc.stdout.rsplit("@@ENVHUB@@", 1)[1]):
        probe = probes[path]
        bound = {name for f in probe.functions(function) for table in probe.tables[f] for name in table}
        layout[node_id] = ProbeTest(module=path, function=function,
                                    indices={k: int(v) for k, v in indices.items() if k in bound})
        raising[node_id] = expects
    return layout, raising


def _host_stdout(suite: ProbeSuite, sources: dict[str, str], tests: list[str], python: str, timeout: float,
                 stats: list[tuple[str, float]] | None = None) -> tuple[str, dict[int, tuple[str, int]]]:
    """The runner's stdout on the host and its index map; ``stats`` gets (batch module, seconds) per batch."""
    run_plan, index_of = plan(suite, tests, timeout_s=60.0)
    run_plan["stats"] = stats is not None
    root = Path(tempfile.mkdtemp(prefix="envhub-record-"))
    try:
        for rel, text in {**sources, **probe_files(suite, run_plan)}.items():
            target = root / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8")
        proc = subprocess.run(runner_command(python), cwd=root, env={"PATH": os.environ.get("PATH", ""), **RUNNER_ENV},
                              capture_output=True, text=True, timeout=timeout)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    if not read_report(proc.stdout, set(index_of)).done:
        raise RecordError(f"the runner did not finish (exit {proc.returncode}): {proc.stderr[-2000:]}")
    for line in proc.stderr.splitlines() if stats is not None else ():
        with contextlib.suppress(ValueError, KeyError, TypeError, IndexError):
            record = json.loads(line)
            stats.append((run_plan["batches"][record["batch"]]["module"].removeprefix(f"{PROBE_DIR}/"),
                          float(record["run_s"])))
    return proc.stdout, index_of


def gold_times(suite: ProbeSuite, sources: dict[str, str], tests: list[str], python: str = sys.executable,
               runs: int = 2) -> dict[str, float]:
    """Seconds the gold takes in each batch of ``suite`` (the slowest of ``runs`` runs), by batch module."""
    stats: list[tuple[str, float]] = []
    for _ in range(runs):
        _host_stdout(suite, sources, tests, python, 600.0, stats)
    out: dict[str, float] = {}
    for module, seconds in stats:
        out[module] = max(out.get(module, 0.0), round(seconds, 4))
    return dict(sorted(out.items()))


def run_on_host(suite: ProbeSuite, sources: dict[str, str], tests: list[str], python: str = sys.executable,
                timeout: float = 600.0) -> dict[str, list[dict[str, Any]]]:
    """Run ``tests`` on ``sources`` in a temporary directory with a plain subprocess (trusted code only):
    per test, one ``{"status", "observations", "detail"}`` per segment."""
    stdout, index_of = _host_stdout(suite, sources, tests, python, timeout)
    reported = read_report(stdout, set(index_of))
    out: dict[str, list[dict[str, Any]]] = {}
    for index, (test_id, _segment) in sorted(index_of.items()):
        got = reported.results.get(index, {"status": "missing", "observations": []})
        out.setdefault(test_id, []).append({"status": got.get("status"), "observations": got.get("observations"),
                                            "detail": got.get("detail", "")})
    return out


def judge_on_host(suite: ProbeSuite, sources: dict[str, str], tests: list[str], python: str = sys.executable,
                  timeout: float = 600.0) -> ProbeRun:
    """The grader's verdicts for ``sources`` (our own code: the gold or a planted bug), run on the host."""
    stdout, index_of = _host_stdout(suite, sources, tests, python, timeout)
    return verdicts_from_output(suite, index_of, stdout)


def record_project(project_root: Path, sources: dict[str, str], tests: dict[str, str]) -> ProbeSuite:
    """Compile, lay out and record one project's suite from its gold sources.

    A test whose segments do not all run cleanly on the gold (a stateful test whose own model needs
    every call) is compiled again whole, once. Then probe functions are batched (:mod:`.batching`)
    and the gold is run again in those batches: it must observe exactly what it observed with one
    child per function (a function whose observations depend on what ran before it runs alone)."""
    unsegmented: dict[str, list[str]] = {}
    for _ in range(2):
        suite = ProbeSuite.compile(tests, {}, unsegmented=unsegmented)
        attach_views(suite, eq_fields(sources))
        suite.tests, raising = collect_layout(project_root, suite.probes)
        ids = sorted(suite.tests)
        first = run_on_host(suite, sources, ids)
        broken = {(suite.tests[t].module, suite.tests[t].function) for t in ids
                  if any(seg["status"] != "ok" for seg in first[t])
                  and suite.probes[suite.tests[t].module].segments.get(suite.tests[t].function)}
        if not broken:
            break
        for module, function in broken:
            unsegmented.setdefault(module, []).append(function)
    bad = [f"{t}: {seg['status']} {str(seg['detail'])[:300]}" for t in ids for seg in first[t] if seg["status"] != "ok"]
    if bad:
        raise RecordError(f"{project_root.name}: gold probes did not all pass:\n" + "\n".join(bad[:10]))
    expected = _expectations(project_root.name, first, raising)
    suite.batches = _batches(suite, {t: [{"observations": seen["observations"] + want["observations"]}
                                         for seen, want in zip(first[t], expected[t], strict=True)] for t in ids})
    for _ in range(3):
        again = run_on_host(suite, sources, ids)
        moved = [t for t in ids if [s["observations"] for s in first[t]] != [s["observations"] for s in again[t]]]
        if not moved:
            break
        alone = {(suite.tests[t].module, f) for t in moved for f in suite.probes[suite.tests[t].module].functions(
            suite.tests[t].function)}
        suite.batches = {path: [b for batch in batches for b in _split(batch, {f for p, f in alone if p == path})]
                         for path, batches in suite.batches.items()}
    else:
        raise RecordError(f"{project_root.name}: observations differ between two gold runs: {moved[:5]}")
    suite.expected = expected
    suite.gold_s = gold_times(suite, sources, ids)
    return suite


def _expectations(project: str, observed: dict[str, list[dict[str, Any]]],
                  raising: dict[str, dict]) -> dict[str, list[dict[str, Any]]]:
    """The gold's observations as expectations: at a ``pytest.raises`` site, the test's own predicate
    takes the place of what the gold raised -- once the gold is shown to satisfy it."""
    out: dict[str, list[dict[str, Any]]] = {}
    for test_id, segments in sorted(observed.items()):
        out[test_id] = []
        for segment in segments:
            observations = []
            for site, value in segment["observations"]:
                want = raising.get(test_id, {}).get(str(site))
                if want is not None and want[0] == "raises" and not raised_as_expected(value, want):
                    raise RecordError(f"{project}: {test_id}: what the gold raised at site {site} is not what "
                                      f"pytest.raises expects there: {str(value)[:300]} vs {want}")
                if want is not None and want[0] == "approx" and not approx_holds(value, want):
                    raise RecordError(f"{project}: {test_id}: the gold fails its own pytest.approx at site {site}: "
                                      f"{str(value)[:300]} vs {str(want)[:300]}")
                if want is not None and want[0] not in ("raises", "approx") and not holds_as_expected(value, want):
                    raise RecordError(f"{project}: {test_id}: the gold fails its own `in` at site {site}: "
                                      f"{str(value)[:300]} vs {str(want)[:300]}")
                observations.append([site, value if want is None else want])
            out[test_id].append({"status": "ok", "observations": observations})
    return out


def _batches(suite: ProbeSuite, observed: dict[str, list[dict[str, Any]]]) -> dict[str, list[list[str]]]:
    values: dict[str, set[str]] = {}
    test_of: dict[str, str] = {}
    for test_id, segments in observed.items():
        probe_test = suite.tests[test_id]
        for function, segment in zip(suite.probes[probe_test.module].functions(probe_test.function), segments,
                                     strict=True):
            values.setdefault(function, set()).update(expected_values(segment["observations"]))
            test_of[function] = probe_test.function
    out = {}
    for path, probe in suite.probes.items():
        functions = [f for f in probe.modules if f in values]
        out[path] = [b for b in group(functions, probe.modules, values, test_of) if len(b) > 1]
    return {p: b for p, b in out.items() if b}


def _split(batch: list[str], alone: set[str]) -> list[list[str]]:
    rest = [f for f in batch if f not in alone]
    return [rest] if len(rest) > 1 else []
