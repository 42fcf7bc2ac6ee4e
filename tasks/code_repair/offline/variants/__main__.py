"""Build the differential corpus, or grade it with the probes and report the false negatives.

    python -m envhub.tasks.code_repair.offline.variants build [--out tasks/code_repair/data/variants.json.gz]
    python -m envhub.tasks.code_repair.offline.variants measure [--json report.json] [--explain]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path


def _build(args: argparse.Namespace) -> int:
    from .build import Limits, build, save

    start = time.monotonic()
    corpus = build(args.projects or None, jobs=args.jobs,
                   limits=Limits(cap=args.cap, form_cap=args.form_cap, tries=args.tries))
    if args.projects and args.out.exists():  # rebuild only these projects, keep the others
        from .corpus import load_corpus

        old = load_corpus(args.out)
        keep = [v for v in old.variants if v.project not in args.projects]
        corpus.variants = sorted(keep + corpus.variants, key=lambda v: v.project)
        corpus.projects = {**old.projects, **corpus.projects}
        corpus.stats = {**old.stats, **corpus.stats}
    save(corpus, args.out)
    counts = {name: len(vs) for name, vs in sorted(corpus.by_project().items())}
    print(json.dumps({"variants": len(corpus.variants), "per_project": counts}, indent=1))
    print(f"wrote {len(corpus.variants)} variants to {args.out} in {time.monotonic() - start:.0f} s", file=sys.stderr)
    return 0


def _measure(args: argparse.Namespace) -> int:
    import envhub

    from .corpus import load_corpus, stale_projects
    from .grade import explain, grade, summarize

    corpus = load_corpus(args.corpus)
    stale = stale_projects(corpus)
    if stale:
        print(f"the corpus is stale for {', '.join(stale)}: rebuild it", file=sys.stderr)
        return 2
    variants = [v for v in corpus.variants if not args.projects or v.project in args.projects]
    env = envhub.make("envhub/CodeRepair-v0", split="train")
    start = time.monotonic()
    try:
        results = grade(variants, env.grading_sandbox, jobs=args.jobs, per_project=args.per_project)
    finally:
        env.close()
    report = summarize(results)
    report["wall_seconds"] = time.monotonic() - start
    if args.explain:
        for row, result in zip(report["rejected_variants"], [r for r in results if not r.accepted], strict=True):
            row["explain"] = explain(result)
    text = json.dumps(report, indent=1)
    if args.json:
        args.json.write_text(text + "\n", encoding="utf-8")
    print(text)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    from .corpus import CORPUS

    parser = argparse.ArgumentParser(prog="python -m envhub.tasks.code_repair.offline.variants", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="apply the rules, keep the correct variants, write the corpus")
    b.add_argument("--out", type=Path, default=CORPUS)
    b.add_argument("--projects", nargs="*", help="only these projects (the corpus keeps the others)")
    b.add_argument("--jobs", type=int, default=2)
    b.add_argument("--cap", type=int, default=3, help="variants kept per project and observable rule")
    b.add_argument("--form-cap", type=int, default=2, help="variants kept per project and form rule")
    b.add_argument("--tries", type=int, default=12, help="candidates tried per project and rule")
    m = sub.add_parser("measure", help="grade every variant with the probes; report the rejected ones")
    m.add_argument("--corpus", type=Path, default=CORPUS)
    m.add_argument("--projects", nargs="*")
    m.add_argument("--jobs", type=int, default=2)
    m.add_argument("--per-project", action="store_true", help="one grading sandbox per project")
    m.add_argument("--explain", action="store_true", help="say where each rejected variant's observations differ")
    m.add_argument("--json", type=Path, help="also write the report here")
    args = parser.parse_args(argv)
    return _build(args) if args.command == "build" else _measure(args)


if __name__ == "__main__":
    sys.exit(main())
