"""Synthesize validated code-repair instances from the projects under ``projects/``.

For every project: run its tests on the original code (all must pass, twice, so flaky tests are
caught), then try seeded mutants (``mutate.py``) one at a time in a fresh temporary copy and keep
a mutant only if it makes at least one originally passing test fail (fail-to-pass) while at least
one still passes (pass-to-pass).  Mutants that change no test outcome (equivalent), that break
every test, that break collection or that time out are dropped; identical mutated sources are
tried once.  Harder levels combine two or three validated single bugs in different functions
and are validated again as a whole, because bugs can mask each other.

Every test run is a separate ``python -m pytest`` subprocess: an in-process run would share
imported modules between mutants and could be wedged by an infinite loop.  The subprocesses run
from a small thread pool (the threads only wait on children, so threads are enough for a process
pool's parallelism without pickling).  Decisions are taken in candidate order after each batch,
never in completion order, so the manifest is identical for any ``--jobs``.

    python -m envhub.tasks.code_repair.synthesize --seed 0 --out tasks/code_repair/data/manifest.json.gz

Every project's instances depend only on the seed and that project's files, so ``--reuse`` redoes
only the projects whose fingerprint changed since the manifest at ``--out`` and gives the same
bytes as a full run.  The manifest must be regenerated whenever a project changes (a test checks
the fingerprints).
"""

from __future__ import annotations

import argparse
import difflib
import hashlib
import itertools
import json
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envhub.tasks.code_repair import issue_text
from envhub.tasks.code_repair.issue_text import choose_visible_tests, rank, render_issue, stable_rng
from envhub.tasks.code_repair.manifest import (
    DEFAULT_MANIFEST,
    PROJECTS_DIR,
    Instance,
    Manifest,
    Mutation,
    ProjectInfo,
    assign_split,
    instance_id,
    load_manifest,
    project_fingerprint,
    save_manifest,
)
from envhub.tasks.code_repair.mutate import (
    OPERATORS,
    MutationError,
    MutationResult,
    SiteRef,
    apply_mutations,
    enumerate_sites,
    normalized,
)


@dataclass(frozen=True)
class Settings:
    """How many instances of each level to make per project and how hard to try."""

    singles: int = 10
    pairs: int = 5
    triples: int = 3
    max_single_runs: int = 60
    max_combo_runs: int = 16
    per_function: int = 2
    timeout_floor: float = 10.0

    def as_dict(self) -> dict[str, int]:
        return {"singles": self.singles, "pairs": self.pairs, "triples": self.triples,
                "max_single_runs": self.max_single_runs, "max_combo_runs": self.max_combo_runs,
                "per_function": self.per_function}


# ---------------------------------------------------------------------------------------------
# Projects and test runs
# ---------------------------------------------------------------------------------------------


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
_PYTEST_ARGS = ["tests", "-q", "--tb=no", "-p", "no:cacheprovider", "-p", issue_text.PROBE_MODULE,
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
        shutil.copyfile(issue_text.__file__, probe / f"{issue_text.PROBE_MODULE}.py")
        out = Path(tmp) / "probe.json"
        start = time.monotonic()
        timed_out = (runner or _DEFAULT_RUNNER).run(
            repo, [str(repo / "src"), str(probe)], {issue_text.PROBE_ENV: str(out)}, timeout)
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


# ---------------------------------------------------------------------------------------------
# Candidates
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Candidate:
    """A (possibly multi-site) mutant ready to be tested."""

    refs: tuple[SiteRef, ...]
    result: MutationResult
    key: str

    @property
    def functions(self) -> set[tuple[str, str]]:
        return {(r.file, r.function) for r in self.refs}


Evidence = dict[SiteRef, tuple[str, ...]]


@dataclass
class Accepted:
    """A validated mutant; ``evidence`` maps each planted bug to the tests that show it."""

    candidate: Candidate
    verdict: Verdict
    run: RunResult
    evidence: Evidence


def _symptom(record: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(record.get(k) for k in ("kind", "exc_type", "exc_message", "raised_in", "call", "actual"))


def combined_evidence(singles: dict[SiteRef, Accepted], run: RunResult, verdict: Verdict) -> Evidence:
    """For each bug of a combination, the failing tests that fail exactly as with that bug alone.

    A bug without such a test is masked by another (its function is never reached, say), so
    no report of the observed behaviour could mention it.
    """
    return {
        ref: tuple(t for t in verdict.fail_to_pass if t in single.verdict.fail_to_pass
                   and _symptom(run.failures.get(t, {})) == _symptom(single.run.failures.get(t, {})))
        for ref, single in singles.items()
    }


def make_candidate(project: Project, refs: Sequence[SiteRef]) -> Candidate | None:
    """Apply mutations; ``None`` if a site cannot be applied faithfully."""
    refs = tuple(sorted(refs))
    try:
        result = apply_mutations(project.read, refs)
    except MutationError:
        return None
    key = hashlib.sha256(json.dumps(sorted((f, normalized(t)) for f, t in result.files.items())).encode()).hexdigest()
    return Candidate(refs, result, key)


def ordered_sites(project: Project, seed: int) -> list[SiteRef]:
    """All sites, shuffled per operator and interleaved so every operator gets its turn."""
    rng = stable_rng("sites", seed, project.name)
    by_op: dict[str, list[SiteRef]] = {name: [] for name in OPERATORS}
    for rel in project.modules:
        for ref in enumerate_sites(project.read(rel), rel):
            by_op[ref.operator].append(ref)
    queues = []
    for name in OPERATORS:
        refs = by_op[name]
        rng.shuffle(refs)
        queues.append(refs)
    rng.shuffle(queues)
    return [ref for group in itertools.zip_longest(*queues) for ref in group if ref is not None]


@dataclass
class Stats:
    """Per-project effort: test runs made, candidates dropped by reason, wall time."""

    runs: int = 0
    dropped: Counter[str] = field(default_factory=Counter)
    seconds: float = 0.0


class Synthesizer:
    """Validates candidates for one project in parallel batches, deciding in candidate order."""

    def __init__(self, project: Project, seed: int, settings: Settings, pool: ThreadPoolExecutor,
                 jobs: int, runner: Runner | None = None) -> None:
        self.project, self.seed, self.settings, self.pool, self.jobs = project, seed, settings, pool, jobs
        self.runner = runner
        self.stats = Stats()
        self.seen: set[str] = set()
        self.baseline: set[str] = set()
        self.timeout = settings.timeout_floor

    def check_baseline(self) -> str | None:
        """Run the original tests twice; returns a reason if the project is unusable."""
        runs = list(self.pool.map(lambda _: run_tests(self.project, runner=self.runner), range(2)))
        self.stats.runs += 2
        first, second = runs
        if first.timed_out or first.collection_errors:
            return "original tests do not run"
        failing = sorted(t for t, o in first.outcomes.items() if o == "failed")
        if failing:
            return f"original tests fail: {', '.join(failing[:3])}"
        self.baseline = first.passed() & second.passed()
        if len(self.baseline) < 2:
            return "fewer than two passing tests"
        self.timeout = max(self.settings.timeout_floor, 5 * max(first.seconds, second.seconds))
        return None

    def validate(self, candidates: Iterable[Candidate], want: int, max_runs: int,
                 admit: Callable[[Candidate, list[Accepted]], bool] | None = None,
                 evidence: Callable[[Candidate, RunResult, Verdict], Evidence] | None = None) -> Batch:
        """Test candidates in batches until ``want`` are accepted or ``max_runs`` are spent.

        ``admit`` (a quota, say) is asked before a candidate is run and again, in candidate
        order, before a valid one is accepted; refused ones are handed back for a later pass.
        ``evidence`` attributes failing tests to bugs; a bug with none makes the mutant "masked".
        """
        out = Batch()
        stream = iter(candidates)
        runs = 0

        def ok(cand: Candidate) -> bool:
            return admit is None or admit(cand, out.accepted)

        while len(out.accepted) < want and runs < max_runs:
            batch: list[Candidate] = []
            for cand in stream:
                if cand.key in self.seen:
                    continue
                if not ok(cand):
                    out.deferred.append(cand)
                    continue
                self.seen.add(cand.key)
                batch.append(cand)
                # Small batches near the goal: valid extras would be wasted runs.
                if len(batch) >= min(3 * self.jobs, max(self.jobs, want - len(out.accepted)), max_runs - runs):
                    break
            if not batch:
                break
            results = list(self.pool.map(lambda c: run_tests(self.project, c.result.files, self.timeout, self.runner),
                                         batch))
            runs += len(batch)
            self.stats.runs += len(batch)
            for cand, run in zip(batch, results, strict=True):
                verdict = classify(self.baseline, run)
                if verdict.status != "ok":
                    self.stats.dropped[verdict.status] += 1
                    continue
                shown = evidence(cand, run, verdict) if evidence else {cand.refs[0]: verdict.fail_to_pass}
                if not all(shown.values()):
                    self.stats.dropped["masked"] += 1
                elif len(out.accepted) < want and ok(cand):
                    out.accepted.append(Accepted(cand, verdict, run, shown))
                else:
                    out.spare.append(Accepted(cand, verdict, run, shown))
        return out

    def singles(self) -> list[Accepted]:
        """Validated single bugs, at most ``per_function`` per function unless that is too few."""

        def capped(cand: Candidate, accepted: list[Accepted]) -> bool:
            (func,) = cand.functions
            return sum(func in a.candidate.functions for a in accepted) < self.settings.per_function

        def stream() -> Iterator[Candidate]:
            for ref in ordered_sites(self.project, self.seed):
                cand = make_candidate(self.project, [ref])
                if cand is None:
                    self.stats.dropped["unappliable"] += 1
                else:
                    yield cand

        want = self.settings.singles
        first = self.validate(stream(), want, self.settings.max_single_runs, capped)
        accepted = first.accepted + first.spare[: want - len(first.accepted)]
        if len(accepted) < want:  # a small project: allow more bugs per function
            accepted += self.validate(first.deferred, want - len(accepted), self.settings.max_single_runs // 2).accepted
        return accepted

    def combos(self, singles: list[Accepted], size: int, want: int) -> list[Accepted]:
        """Validated combinations of ``size`` single bugs in distinct functions."""
        if want <= 0 or len(singles) < size:
            return []
        rng = stable_rng("combo", self.seed, self.project.name, size)
        refs = [s.candidate.refs[0] for s in singles]
        groups = [g for g in itertools.combinations(range(len(refs)), size)
                  if len({(refs[i].file, refs[i].function) for i in g}) == size]
        rng.shuffle(groups)
        failing = [set(s.verdict.fail_to_pass) for s in singles]

        def overlap(group: tuple[int, ...]) -> int:
            return sum(len(failing[a] & failing[b]) for a, b in itertools.combinations(group, 2))

        # Prefer bugs whose failing tests do not overlap (so none masks another), then bugs spread
        # over several modules; the stable sort keeps the seeded order among equals.
        groups.sort(key=lambda g: (overlap(g) > 0, -len({refs[i].file for i in g})))
        limit = max(1, -(-want * size // len(singles)))  # spread the singles over the combinations

        def spread(cand: Candidate, accepted: list[Accepted]) -> bool:
            return all(sum(ref in a.candidate.refs for a in accepted) < limit for ref in cand.refs)

        by_ref = dict(zip(refs, singles, strict=True))

        def shown(cand: Candidate, run: RunResult, verdict: Verdict) -> Evidence:
            return combined_evidence({r: by_ref[r] for r in cand.refs}, run, verdict)

        stream = (c for g in groups if (c := make_candidate(self.project, [refs[i] for i in g])) is not None)
        return self.validate(stream, want, self.settings.max_combo_runs, spread, shown).accepted


@dataclass
class Batch:
    """Outcome of :meth:`Synthesizer.validate`."""

    accepted: list[Accepted] = field(default_factory=list)
    spare: list[Accepted] = field(default_factory=list)  # valid but refused by the quota
    deferred: list[Candidate] = field(default_factory=list)  # not run because of the quota


# ---------------------------------------------------------------------------------------------
# Instances
# ---------------------------------------------------------------------------------------------


def unified_diff(old: str, new: str, rel: str) -> str:
    """``git apply``-compatible diff of one file, including the no-newline marker."""
    lines = difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True),
                                 fromfile=f"a/{rel}", tofile=f"b/{rel}")
    return "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines)


def pick_issue_tests(acc: Accepted, key: str) -> list[str]:
    """One failing test per planted bug (from its evidence), preferring clearly described calls."""
    rng = stable_rng("issue-tests", key)
    chosen: list[str] = []
    for ref in acc.candidate.refs:
        pool = [t for t in acc.evidence.get(ref, ()) if t not in chosen]
        if not pool:
            continue
        ranked = sorted(pool, key=lambda t: (rank(acc.run.failures.get(t, {})), t))
        best = rank(acc.run.failures.get(ranked[0], {}))[0]
        chosen.append(rng.choice([t for t in ranked if rank(acc.run.failures.get(t, {}))[0] == best][:3]))
    return chosen


def build_instance(project: Project, split: str, acc: Accepted) -> Instance:
    files = acc.candidate.result.files
    iid = instance_id(project.name, files)
    issue_tests = pick_issue_tests(acc, iid)
    text = render_issue([acc.run.failures.get(t, {"kind": "other"}) for t in issue_tests], project=project.name,
                        rng=stable_rng("issue", iid))
    return Instance(
        instance_id=iid,
        project=project.name,
        split=split,  # type: ignore[arg-type]
        difficulty=len(acc.candidate.refs),
        mutations=[Mutation(file=r.file, function=r.function, operator=r.operator, site=r.site, description=d)
                   for r, d in zip(acc.candidate.refs, acc.candidate.result.descriptions, strict=True)],
        patch="".join(unified_diff(files[rel], project.read(rel), rel) for rel in sorted(files)),
        buggy_files=dict(sorted(files.items())),
        fail_to_pass=list(acc.verdict.fail_to_pass),
        pass_to_pass=list(acc.verdict.pass_to_pass),
        visible_tests=choose_visible_tests(iid, acc.verdict.fail_to_pass, acc.verdict.pass_to_pass, issue_tests),
        issue_text=text,
    )


def hardcode_resistant(inst: Instance) -> bool:
    """At least one failing test is neither described in the issue (one per bug) nor visible.

    Otherwise special-casing the examples the agent can see -- hard-coding the issue's call --
    could pass every hidden test without fixing anything.
    """
    return len(set(inst.fail_to_pass) - set(inst.visible_tests)) > inst.difficulty


@dataclass
class ProjectResult:
    info: ProjectInfo | None
    instances: list[Instance]
    stats: Stats
    skipped: str | None = None


def synthesize_project(project: Project, seed: int, settings: Settings, pool: ThreadPoolExecutor,
                       jobs: int, runner: Runner | None = None) -> ProjectResult:
    """All instances of one project (independent of every other project)."""
    start = time.monotonic()
    synth = Synthesizer(project, seed, settings, pool, jobs, runner)
    reason = synth.check_baseline()
    if reason:
        return ProjectResult(None, [], synth.stats, reason)
    split = assign_split(project.name)
    singles = synth.singles()
    accepted = singles + synth.combos(singles, 2, settings.pairs) + synth.combos(singles, 3, settings.triples)
    instances = sorted((build_instance(project, split, a) for a in accepted),
                       key=lambda i: (i.difficulty, i.instance_id))
    info = ProjectInfo(name=project.name, split=split, description=project.description, tags=list(project.tags),
                       source_sha256=project_fingerprint(project.root), tests=sorted(synth.baseline))
    synth.stats.seconds = time.monotonic() - start
    return ProjectResult(info, instances, synth.stats)


def synthesize(projects: Sequence[Project], seed: int, settings: Settings, jobs: int = 2,
               reuse: Manifest | None = None, log: Callable[[str], None] = print, fork: bool = True) -> Manifest:
    """Build the manifest; projects unchanged since ``reuse`` keep their instances."""
    infos: list[ProjectInfo] = []
    instances: list[Instance] = []
    old = {p.name: p for p in reuse.projects} if reuse else {}
    log(f"{'project':<18} {'split':<10} {'tests':>5} {'L1':>3} {'L2':>3} {'L3':>3} {'runs':>5} {'secs':>6}  dropped")
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool, Runner(fork=fork, size=jobs) as runner:
        for project in projects:
            prev = old.get(project.name)
            if reuse is not None and prev is not None and prev.source_sha256 == project_fingerprint(project.root):
                infos.append(prev)
                kept = [i for i in reuse.instances if i.project == project.name]
                instances += kept
                log(f"{project.name:<18} {prev.split:<10} {len(prev.tests):>5} "
                    + " ".join(f"{sum(i.difficulty == d for i in kept):>3}" for d in (1, 2, 3)) + "  (reused)")
                continue
            result = synthesize_project(project, seed, settings, pool, jobs, runner)
            if result.info is None:
                log(f"{project.name:<18} SKIPPED: {result.skipped}")
                continue
            infos.append(result.info)
            kept = [i for i in result.instances if hardcode_resistant(i)]
            instances += kept
            counts = [sum(i.difficulty == d for i in kept) for d in (1, 2, 3)]
            dropped = ", ".join(f"{k}={v}" for k, v in sorted(result.stats.dropped.items()))
            log(f"{project.name:<18} {result.info.split:<10} {len(result.info.tests):>5} "
                f"{counts[0]:>3} {counts[1]:>3} {counts[2]:>3} {result.stats.runs:>5} {result.stats.seconds:>6.1f}  "
                f"{dropped}")
    return Manifest(seed=seed, settings=settings.as_dict(), projects=infos, instances=instances)


def summarize(manifest: Manifest) -> str:
    """Counts by split and difficulty, and by operator."""
    by = Counter((i.split, i.difficulty) for i in manifest.instances)
    lines = [f"{len(manifest.instances)} instances from {len(manifest.projects)} projects"]
    for split in ("train", "validation", "test"):
        projects = sum(p.split == split for p in manifest.projects)
        lines.append(f"  {split:<10} projects={projects:>2}  " + "  ".join(
            f"L{d}={by[(split, d)]:>3}" for d in (1, 2, 3)) + f"  total={sum(by[(split, d)] for d in (1, 2, 3))}")
    ops = Counter(m.operator for i in manifest.instances for m in i.mutations)
    lines.append("  operators: " + ", ".join(f"{k}={v}" for k, v in sorted(ops.items())))
    visible = sum(bool(i.visible_tests) for i in manifest.instances)
    lines.append(f"  with visible tests: {visible}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=DEFAULT_MANIFEST)
    parser.add_argument("--projects", default="", help="comma-separated project names (default: all)")
    parser.add_argument("--projects-dir", type=Path, default=PROJECTS_DIR)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--singles", type=int, default=Settings.singles)
    parser.add_argument("--pairs", type=int, default=Settings.pairs)
    parser.add_argument("--triples", type=int, default=Settings.triples)
    parser.add_argument("--no-fork", action="store_true",
                        help="start a new interpreter for every test run instead of forking a warm one")
    parser.add_argument("--reuse", action="store_true",
                        help="keep instances of projects unchanged since the manifest at --out (same seed/settings)")
    args = parser.parse_args(argv)
    settings = Settings(singles=args.singles, pairs=args.pairs, triples=args.triples)
    projects = discover_projects(args.projects_dir, [p for p in args.projects.split(",") if p] or None)
    reuse = None
    if args.reuse and args.out.exists():
        prior = load_manifest(args.out)
        if prior.seed == args.seed and prior.settings == settings.as_dict():
            reuse = prior
    start = time.monotonic()
    manifest = synthesize(projects, args.seed, settings, jobs=args.jobs, reuse=reuse, fork=not args.no_fork)
    checksum = save_manifest(manifest, args.out)
    print(summarize(manifest))
    print(f"wrote {args.out} (sha256 {checksum[:12]}) in {time.monotonic() - start:.1f}s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
