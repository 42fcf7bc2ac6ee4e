"""Grade a submission with observation probes: the trusted orchestration around a sandbox.

The envhub process holds the expected observations and never sends them anywhere. Into a
*fresh* grading sandbox it writes the submission, the probe modules (tests without expected
values, :mod:`.compiler`), the probe runtime and runner; it runs the runner there with a wall
limit and compares the runner's stdout with the gold observations (:mod:`.compare`).

Whatever the submission does in that sandbox -- crash or kill the runner, flood, hang, fork,
forge output -- can only make its own tests fail: the result is built from the runner's output
alone, a missing or garbled result is a failed test, and a broken grading run is the
submission's failure (``wrong_answer`` with the reason), never an infrastructure outcome.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.util
import json
import marshal
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from envhub.sandboxes.base import ExecResult, Sandbox
from envhub.verifiers.placement import place_files

from .boot import BUNDLE_FILE
from .compare import TestVerdict, judge, read_report
from .compiler import Probe, compile_tests

PROBE_DIR = ".envhub_probe"
RUNTIME_MODULE = "envhub_probe"
RUNNER_FILE = "envhub_probe_runner.py"
BOOT_FILE = "envhub_probe_boot.py"
#: what runs in the grading sandbox: its file name there -> this package's module
SHIPPED = {f"{RUNTIME_MODULE}.py": "runtime.py", "envhub_probe_excinfo.py": "excinfo.py",
           "envhub_probe_batch.py": "batch.py", "envhub_probe_seal.py": "seal.py",
           "envhub_probe_reaper.py": "reaper.py", "envhub_probe_sigfilter.py": "sigfilter.py",
           RUNNER_FILE: "runner.py", BOOT_FILE: "boot.py"}
PACKAGE_DIR = Path(__file__).resolve().parent
#: The runner's interpreter flags: no user site, no script dir on sys.path (the plan decides the
#: path); not ``-I``, which would also ignore the fixed PYTHONHASHSEED that makes set and dict
#: orders -- and so observations -- the same as when the gold was recorded.
PYTHON_FLAGS = ("-s", "-P")
RUNNER_ENV = {"PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1", "PYTHONIOENCODING": "utf-8"}
DEFAULT_PRELOAD = ("collections", "dataclasses", "datetime", "decimal", "enum", "fractions", "functools",
                   "heapq", "itertools", "json", "math", "re", "string", "typing")


@dataclass(frozen=True)
class Deadlines:
    """How long grading may take, from the gold's measured time (``ProbeSuite.gold_s``), never from
    the submission: each batch gets ``max(batch_floor_s, factor * gold)``; the whole run gets one
    budget, ``max(total_floor_s, total_factor * sum of gold)`` (at most the sum of the batch
    deadlines; a sum varies less than its parts), which the runner enforces on its batches. Both
    are spent as the runner's ``BatchClock`` counts -- running and CPU time, never the time a busy
    machine kept a batch waiting -- so a verdict does not depend on what else the machine runs. The
    wall clock is only a ceiling: ``wall_factor`` times the limits in the runner, and on the host
    ``wall_factor`` times the budget plus ``startup_s`` (interpreter start, preloading, reading the
    probes, the last kill). A batch the gold was never timed in (observations recorded before
    timings were) gets ``unmeasured_s``."""

    factor: float = 20.0
    total_factor: float = 10.0
    batch_floor_s: float = 1.0
    total_floor_s: float = 2.0
    startup_s: float = 3.0
    unmeasured_s: float = 20.0
    wall_factor: float = 10.0

    def batch(self, gold: float | None) -> float:
        return self.unmeasured_s if gold is None else max(self.batch_floor_s, self.factor * gold)

    def total(self, golds: Iterable[float | None]) -> float:
        golds = list(golds)
        whole = sum(self.batch(g) for g in golds)
        if any(g is None for g in golds):
            return whole
        return min(whole, max(self.total_floor_s, self.total_factor * sum(g for g in golds if g is not None)))


DEADLINES = Deadlines()


@lru_cache(maxsize=1)
def shipped_sources() -> dict[str, str]:
    """The runner and the runtime it loads, by their file names in the grading sandbox."""
    return {name: (PACKAGE_DIR / module).read_text(encoding="utf-8") for name, module in SHIPPED.items()}


@lru_cache(maxsize=1)
def shipped_code() -> str:
    """The shipped modules compiled here, as ``boot.py`` reads them: this interpreter's bytecode magic
    number, a newline, base64 of the marshalled ``{module name: code}`` (the boot script itself
    excluded). Each is compiled under the file name the runner would give it, at optimization level
    0 whatever this process runs with, so it is the code the sandbox's own compile would make."""
    codes = {name.removesuffix(".py"): compile(source, f"{PROBE_DIR}/{name}", "exec", dont_inherit=True, optimize=0)
             for name, source in shipped_sources().items() if name != BOOT_FILE}
    return importlib.util.MAGIC_NUMBER.hex() + "\n" + base64.b64encode(marshal.dumps(codes)).decode("ascii")


@dataclass(frozen=True)
class ProbeTest:
    """Where one hidden test lives in the probes: its module, pytest function and parametrize rows
    (``indices``: argument name -> row of the table that binds it, as pytest's ``callspec.indices``)."""

    module: str
    function: str
    indices: dict[str, int] = field(default_factory=dict)


@dataclass
class ProbeSuite:
    """A project's compiled probes, the map from test ids to probe calls, and the gold's observations
    (``expected[test_id]``: one ``{"status", "observations"}`` per segment of the test)."""

    probes: dict[str, Probe]
    tests: dict[str, ProbeTest]
    expected: dict[str, list[dict[str, Any]]]

    #: test module -> test functions kept whole (see :func:`compile_tests`)
    unsegmented: dict[str, list[str]] = field(default_factory=dict)
    #: test module -> probe functions that share a child (:mod:`.batching`); absent: one child each
    batches: dict[str, list[list[str]]] = field(default_factory=dict)
    #: batch module (as ``batch_module`` places it) -> seconds the gold's batch ran when it was recorded
    gold_s: dict[str, float] = field(default_factory=dict)
    #: what each gold class's ``==`` compares (:func:`.equality.eq_fields`), for :func:`.compare.same_value`
    classes: dict[str, tuple[str, ...]] = field(default_factory=dict)
    _batch_sources: dict[tuple[str, tuple[str, ...]], str] = field(default_factory=dict, repr=False, compare=False)

    def batch_of(self, path: str, function: str) -> tuple[str, ...]:
        """The probe functions that run in one child with ``function``."""
        for batch in self.batches.get(path, ()):
            if function in batch:
                return tuple(batch)
        return (function,)

    def batch_module(self, path: str, batch: tuple[str, ...]) -> tuple[str, str]:
        """Where the module of a batch goes (relative to the probe dir) and its source."""
        probe = self.probes[path]
        if len(batch) == 1:
            return probe.module_path(batch[0]), probe.modules[batch[0]]
        key = (path, batch)
        if key not in self._batch_sources:  # unparsing takes a few ms: once per suite, not per grading
            self._batch_sources[key] = probe.module_for(list(batch))
        return probe.module_path(f"{batch[0]}__batch"), self._batch_sources[key]

    @classmethod
    def compile(cls, tests: dict[str, str], layout: dict[str, ProbeTest],
                expected: dict[str, list[dict[str, Any]]] | None = None,
                unsegmented: dict[str, list[str]] | None = None,
                batches: dict[str, list[list[str]]] | None = None) -> ProbeSuite:
        whole = unsegmented or {}
        probes = {path: compile_tests(path, text, frozenset(whole.get(path, ()))) for path, text in sorted(tests.items())}
        return cls(probes, layout, expected or {}, {p: sorted(f) for p, f in whole.items() if f}, batches or {})

    def fingerprint(self) -> str:
        """What the expected observations were recorded against: probes, batches, the runner and the
        runtime it loads."""
        h = hashlib.sha256()
        for path, probe in sorted(self.probes.items()):
            for function, source in sorted(probe.modules.items()):
                h.update(f"{path}::{function}".encode() + b"\0" + source.encode() + b"\0")
        h.update(json.dumps(self.batches, sort_keys=True).encode() + b"\0")
        for name, source in sorted(shipped_sources().items()):
            h.update(name.encode() + b"\0" + source.encode() + b"\0")
        return h.hexdigest()


@dataclass
class ProbeRun:
    """Per-test verdicts of one grading run, and what the run looked like from outside."""

    verdicts: dict[str, TestVerdict]
    exit_code: int | None = None
    timed_out: bool = False
    complete: bool = False
    anomalies: list[str] = field(default_factory=list)
    output_tail: str = ""
    #: the wall limit the runner ran under, and the seconds it took (the host's clock)
    limit_s: float = 0.0
    duration_s: float = 0.0

    def passed(self, tests: list[str]) -> list[str]:
        return [t for t in tests if self.verdicts.get(t, TestVerdict(False, "")).passed]

    def failed(self) -> list[str]:
        return sorted(t for t, v in self.verdicts.items() if not v.passed)

    def all_passed(self, tests: list[str]) -> bool:
        """Every one of ``tests`` was judged and passed (a test never judged is a failure)."""
        return len(self.passed(tests)) == len(tests)


def plan(suite: ProbeSuite, tests: list[str], *, timeout_s: float | None = None, paths: tuple[str, ...] = ("src",),
         max_bytes: int = 4 * 1024 * 1024, deadlines: Deadlines = DEADLINES,
         ) -> tuple[dict[str, Any], dict[int, tuple[str, int]]]:
    """The runner's plan for ``tests`` and the map from its opaque indices to (test id, segment).

    One batch per child: a probe function's parametrized cases, or the functions the suite groups
    (``ProbeSuite.batches``), in order. No test id goes into the plan: ids embed parametrize
    values, expected ones included. Each batch has its deadline and the run its budget (``budget_s``)
    from the gold's times (:class:`Deadlines`), or ``timeout_s`` for every batch where it is given.
    """
    batches: dict[tuple[str, tuple[str, ...]], list[dict[str, Any]]] = {}
    index_of: dict[int, tuple[str, int]] = {}
    for test_id in sorted(tests):
        probe_test = suite.tests[test_id]
        probe = suite.probes[probe_test.module]
        for segment, function in enumerate(probe.functions(probe_test.function)):
            index = len(index_of)
            index_of[index] = (test_id, segment)
            bound = {name for table in probe.tables.get(function, []) for name in table}
            batches.setdefault((probe_test.module, suite.batch_of(probe_test.module, function)), []).append(
                {"index": index, "function": function,
                 "indices": {k: v for k, v in probe_test.indices.items() if k in bound}})
    out = [{"module": f"{PROBE_DIR}/{suite.batch_module(path, batch)[0]}",
            "tests": sorted(entries, key=lambda e: (batch.index(e["function"]), e["index"]))}
           for (path, batch), entries in sorted(batches.items())]
    golds = [None if timeout_s is not None else suite.gold_s.get(b["module"].removeprefix(f"{PROBE_DIR}/"))
             for b in out]
    for batch, gold in zip(out, golds, strict=True):
        batch["timeout_s"] = timeout_s if timeout_s is not None else round(deadlines.batch(gold), 3)
    budget = sum(b["timeout_s"] for b in out) if timeout_s is not None else deadlines.total(golds)
    return {
        "probe_dir": PROBE_DIR, "paths": list(paths), "preload": list(DEFAULT_PRELOAD),
        "timeout_s": timeout_s or deadlines.unmeasured_s, "budget_s": round(max(budget, 0.001), 3),
        "wall_factor": deadlines.wall_factor, "max_bytes": max_bytes, "batches": out,
    }, index_of


def wall_limit(run_plan: dict[str, Any], deadlines: Deadlines = DEADLINES) -> float:
    """The host's wall limit on the runner of ``run_plan``: a ceiling, ``wall_factor`` times its
    budget and the startup margin (the runner itself counts the budget as time the batches ran)."""
    return deadlines.wall_factor * (run_plan["budget_s"] + deadlines.startup_s)


def probe_files(suite: ProbeSuite, run_plan: dict[str, Any]) -> dict[str, str]:
    """Everything the grading sandbox gets besides the submission."""
    wanted = {b["module"] for b in run_plan["batches"]}
    files = {}
    for path, probe in suite.probes.items():
        for batch in dict.fromkeys(suite.batch_of(path, f) for f in probe.modules):
            where, source = suite.batch_module(path, batch)
            if f"{PROBE_DIR}/{where}" in wanted:
                files[f"{PROBE_DIR}/{where}"] = source
    files.update({f"{PROBE_DIR}/{name}": source for name, source in shipped_sources().items()})
    files[f"{PROBE_DIR}/{BUNDLE_FILE}"] = shipped_code()
    files[f"{PROBE_DIR}/plan.json"] = json.dumps(run_plan)
    return files


def runner_command(python: str = "python3") -> list[str]:
    return [python, *PYTHON_FLAGS, f"{PROBE_DIR}/{BOOT_FILE}", f"{PROBE_DIR}/plan.json"]


def verdicts_from_output(suite: ProbeSuite, index_of: dict[int, tuple[str, int]], stdout: str) -> ProbeRun:
    """Judge every planned test from the runner's stdout (the only thing that is read back).

    A test split into segments passes when every segment does."""
    reported = read_report(stdout, set(index_of))
    run = ProbeRun(verdicts={}, complete=reported.done)
    for index, (test_id, segment) in index_of.items():
        rules = {str(k): v for k, v in suite.probes[suite.tests[test_id].module].sites.items()}
        verdict = judge(reported, index, suite.expected[test_id][segment], rules, suite.classes)
        if test_id not in run.verdicts or run.verdicts[test_id].passed:  # the first failing segment decides
            run.verdicts[test_id] = verdict
    if reported.duplicated:
        run.anomalies.append(f"{len(reported.duplicated)} tests reported more than once")
    if reported.undecodable or reported.unknown:
        run.anomalies.append(f"{reported.undecodable} undecodable and {reported.unknown} unknown output lines")
    return run


def run_probes(sandbox: Sandbox, suite: ProbeSuite, *, files: dict[str, str], tests: list[str],
               timeout: float | None = None, batch_timeout: float | None = None,
               deadlines: Deadlines = DEADLINES) -> ProbeRun:
    """Write ``files`` (the submission) and the probes into ``sandbox``, run ``tests``, judge them.

    ``sandbox`` must be fresh: nothing an agent touched. Exceptions from the sandbox after the
    submission started running are the submission's doing and come back as failed tests. Batches
    get their deadlines from the gold's times (``batch_timeout``: one fixed deadline instead); the
    runner's process gets ``timeout``, by default :func:`wall_limit` of the plan -- past it (the
    submission stopped or starved the runner) every test not yet reported fails.
    """
    missing = [t for t in tests if t not in suite.expected or t not in suite.tests]
    if missing:
        raise ValueError(f"no recorded observations for {len(missing)} tests, e.g. {missing[0]}")
    run_plan, index_of = plan(suite, tests, timeout_s=batch_timeout, deadlines=deadlines)
    limit = wall_limit(run_plan, deadlines) if timeout is None else timeout
    place_files(sandbox, files, probe_files(suite, run_plan))  # SubmissionTooLarge: the submission's size
    t0 = time.monotonic()
    try:
        result: ExecResult = sandbox.exec(runner_command(), timeout=limit, env=RUNNER_ENV, contain=True)
    except Exception as exc:  # the submission brought the grading sandbox down
        run = verdicts_from_output(suite, index_of, "")
        run.anomalies.append(f"the grading run broke: {exc}")
        run.limit_s, run.duration_s = limit, time.monotonic() - t0
        return run
    run = verdicts_from_output(suite, index_of, result.stdout)
    run.exit_code, run.timed_out = result.exit_code, result.timed_out
    run.limit_s, run.duration_s = limit, time.monotonic() - t0
    run.output_tail = result.stderr[-2000:]
    if result.truncated:
        run.anomalies.append("the runner's output was cut at the sandbox's output limit")
    return run
