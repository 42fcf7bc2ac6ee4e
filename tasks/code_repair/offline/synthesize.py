"""Synthesize validated code-repair instances from the projects under ``projects/``.

For every project: run its tests on the original code (all must pass, twice, so flaky tests are
caught), then try seeded mutants (:mod:`.mutate`) one at a time in a fresh temporary copy and keep
a mutant only if it makes at least one originally passing test fail (fail-to-pass) while at least
one still passes (pass-to-pass).  Mutants that change no test outcome (equivalent), that break
every test, that break collection or that time out are dropped; identical mutated sources are
tried once.  Harder levels combine two or three validated single bugs in different functions
and are validated again as a whole, because bugs can mask each other.

Every test run is a separate pytest process (:mod:`.runs`).  The processes run from a small
thread pool (the threads only wait on children, so threads are enough for a process pool's
parallelism without pickling).  Decisions are taken in candidate order after each batch, never
in completion order, so the manifest is identical for any ``--jobs``.

    python -m envhub.tasks.code_repair.offline.synthesize --seed 0 --out tasks/code_repair/data/manifest.json.gz

Every project's instances depend only on the seed and that project's files, so ``--reuse`` redoes
only the projects whose fingerprint changed since the manifest at ``--out`` and gives the same
bytes as a full run.  The manifest must be regenerated whenever a project changes (a test checks
the fingerprints).
"""

from __future__ import annotations

import argparse
import itertools
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from envhub.tasks.code_repair.manifest import (
    DEFAULT_MANIFEST,
    PROJECTS_DIR,
    Instance,
    Manifest,
    ProjectInfo,
    assign_split,
    load_manifest,
    project_fingerprint,
    save_manifest,
)

from .candidates import (
    Accepted,
    Candidate,
    Evidence,
    build_instance,
    combined_evidence,
    hardcode_resistant,
    make_candidate,
    ordered_sites,
)
from .issue_text import stable_rng
from .runs import Project, Runner, RunResult, Verdict, classify, discover_projects, run_tests


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
