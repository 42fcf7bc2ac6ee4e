"""``envhub bench judge``: judged episodes per second when concurrent episodes' judge calls reach
the in-process engine together (it batches them) against one call at a time, in one run.

The prompts are the judge's own on real cases: the gold and the suite's wrong answers of the
first tasks of a judged env (default ``envhub/Retrieval-v0``, the evidence-support judge), each
judged once (k = 1, temperature 0). Per round, both sides judge every prompt -- ``one at a time``
from one thread, ``concurrent`` from ``concurrency`` threads as concurrent episodes would -- the
order alternating between rounds; the result is each side's median judged per second with its
range, and their ratio. Both sides share one engine, warmed first, so loading is not measured.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envhub.rollout.stats import spread

from .calibrate import Case, programmatic_cases
from .check import JudgeCheck

#: Below this median speed-up the bench says batching did not help.
HELPED = 1.2


@dataclass(frozen=True)
class JudgeBenchSettings:
    judge: str = "hf:smollm2-135m"
    env_id: str = "envhub/Retrieval-v0"
    tasks: int = 4
    rounds: int = 3
    concurrency: int = 8


def judge_all(check: JudgeCheck, cases: list[Case], workers: int) -> float:
    """Judge every case with ``workers`` threads; judged per second."""
    t0 = time.perf_counter()
    if workers == 1:
        for case in cases:
            check.score_text(case.question, case.answer, case.evidence)
    else:
        with ThreadPoolExecutor(max_workers=workers) as pool:
            list(pool.map(lambda c: check.score_text(c.question, c.answer, c.evidence), cases))
    return len(cases) / (time.perf_counter() - t0)


def run_bench(s: JudgeBenchSettings, *, out: Callable[[str], object] = print) -> dict[str, Any]:
    from envhub.registry import make

    with make(s.env_id, split="test", judge=s.judge, judge_weight=0.2) as env:
        checks = [c for c, _ in env.verifier.quality if isinstance(c, JudgeCheck)]
        if not checks:
            raise ValueError(f"{s.env_id} has no judged quality layer")
        check = checks[0]
        cases = programmatic_cases(env, check, env.tasks.task_ids("test")[:s.tasks], kinds=("gold", "wrong_answer"))
        judge_all(check, cases[:2], 1)  # warm: load the engine and its first shapes
        rounds = []
        for number in range(s.rounds):
            order = ("one", "concurrent") if number % 2 == 0 else ("concurrent", "one")
            figures = {side: judge_all(check, cases, 1 if side == "one" else s.concurrency) for side in order}
            rounds.append({"order": list(order), **figures, "ratio": figures["concurrent"] / figures["one"]})
        pin = check.pin().to_dict()
    result = {"settings": s.__dict__, "judge": pin, "cases": len(cases), "rounds": rounds,
              "one_at_a_time": spread([r["one"] for r in rounds]),
              "concurrent": spread([r["concurrent"] for r in rounds]),
              "ratio": spread([r["ratio"] for r in rounds])}
    for line in report_lines(result):
        out(line)
    return result


def report_lines(result: dict[str, Any]) -> list[str]:
    s, ratio = result["settings"], result["ratio"]

    def fig(f: dict[str, Any]) -> str:
        return f"{f['median']:.2f} [{f['min']:.2f}, {f['max']:.2f}]"

    lines = [f"judge {s['judge']} on {result['cases']} cases of {s['env_id']}, {s['rounds']} rounds (order alternating)",
             f"  one at a time      {fig(result['one_at_a_time'])} judged/s",
             f"  {s['concurrency']} concurrent       {fig(result['concurrent'])} judged/s",
             f"  concurrent / one at a time: {fig(ratio)}x (median [min, max] over the rounds)"]
    if ratio["median"] < HELPED:
        lines.append("  Batching did NOT help here: a judge call is one prompt's prefill and a single token, and where "
                     "the prefill is compute-bound (a CPU) a batch of prefills costs what they cost one by one, plus "
                     "padding; judge concurrently on a GPU or a server with prefix caching")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="envhub bench judge", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    defaults = JudgeBenchSettings()
    parser.add_argument("--judge", default=defaults.judge, help="judge spec (hf:NAME_OR_PATH, sglang:URL, openai:URL)")
    parser.add_argument("--env", dest="env_id", default=defaults.env_id, help="a judged env")
    parser.add_argument("--tasks", type=int, default=defaults.tasks)
    parser.add_argument("--rounds", type=int, default=defaults.rounds)
    parser.add_argument("--concurrency", type=int, default=defaults.concurrency)
    parser.add_argument("--out", type=Path, help="write the figures as JSON")
    args = parser.parse_args(argv)
    if min(args.tasks, args.rounds, args.concurrency) < 1:
        parser.error("--tasks, --rounds and --concurrency must be at least 1")
    settings = JudgeBenchSettings(**{k: v for k, v in vars(args).items() if k != "out"})
    try:
        result = run_bench(settings)
    except ValueError as exc:
        print(f"error: {exc}")
        return 2
    if args.out is not None:
        from envhub.store import write_json_atomic

        write_json_atomic(args.out, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


__all__ = ["JudgeBenchSettings", "judge_all", "main", "report_lines", "run_bench"]
