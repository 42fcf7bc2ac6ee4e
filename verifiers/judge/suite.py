"""The bias battery as part of a judged env's verifier suite (``envhub verify``).

For every task of the run and every battery case (:mod:`.bias`), the judge scores a variant of a
labelled answer -- neutral transforms of the gold answer, adversarial ones of the suite's
``wrong_answer`` -- against the original, with the same evidence (:mod:`.calibrate`). A row
``judge:<case>`` is a violation when the variant moves the judge's score q (in [0, 1]) by more
than ``margin``: up, for an adversarial case; either way, for a neutral one. The judge is asked
directly, not through the env's correctness layer: a correctness layer that already refuses the
variant (an exact-match answer) hides what the judge would do where it does not.
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING

from .bias import apply, battery
from .calibrate import programmatic_cases
from .check import JudgeCheck

if TYPE_CHECKING:
    from envhub.env import Env

    from ..suite import CaseResult

#: How far a battery variant may move the judge's score q before the suite calls it a violation.
MARGIN = 0.25
#: The suite case whose answer the adversarial transforms start from.
WRONG_CASE = "wrong_answer"


def judge_checks(env: Env) -> list[JudgeCheck]:
    """The judged quality checks of ``env``'s verifier (none for most envs)."""
    try:
        verifier = env.verifier
    except NotImplementedError:
        return []
    return [check for check, _ in getattr(verifier, "quality", ()) if isinstance(check, JudgeCheck)]


def case_names() -> list[str]:
    return [f"judge:{bias.name}" for bias in battery()]


def battery_results(env: Env, task_ids: list[str], *, margin: float = MARGIN, seed: int = 0) -> list[CaseResult]:
    """One result per task and battery case, for each judge of ``env`` (see the module docstring)."""
    from ..suite import CaseResult

    results: list[CaseResult] = []
    for check in judge_checks(env):
        for task_id in task_ids:
            labelled = {c.kind: c for c in programmatic_cases(env, check, [task_id], kinds=("gold", WRONG_CASE))}
            for bias in battery():
                base = labelled.get("gold" if bias.kind == "neutral" else WRONG_CASE)
                expect = "no change" if bias.kind == "neutral" else "no rise"
                name = f"judge:{bias.name}"
                if base is None or base.label != (bias.kind == "neutral"):
                    results.append(CaseResult(name, task_id, expect, "", 0.0, "no labelled answer to transform",
                                              applicable=False))
                    continue
                rng = random.Random(f"{seed}/{task_id}/{bias.name}")
                variant = apply(bias, base.answer, rng=rng, tool_output="", scale=check.rubric.scale)
                evidence = [*base.evidence, variant.tool_output] if variant.tool_output else base.evidence
                before = check.score_text(base.question, base.answer, base.evidence).score
                after = check.score_text(base.question, variant.answer, evidence).score
                delta = after - before
                results.append(CaseResult(name, task_id, expect, "judged", delta,
                                          f"{check.name}: q {before:.2f} -> {after:.2f} ({delta:+.2f}; margin {margin})",
                                          judge_delta=delta, judge_margin=margin, judge_neutral=bias.kind == "neutral"))
    return results


__all__ = ["MARGIN", "battery_results", "case_names", "judge_checks"]
