"""How far to trust a judge: run it over labelled cases and attack it (``envhub judge calibrate``).

Cases. Labels come from the programmatic layers, which we trust: per task, the gold solution
(``gold``) and every verifier-suite case of the env (its name is the case's kind: wrong answers,
stuffed answers, attacks), each played as a real episode; the label is whether the correctness
layer passed (good) or not (bad). Every case of a task shows the judge the gold episode's evidence. Optionally a JSONL file of human labels adds cases of kind
``human``: one object a line, ``{"question": str, "answer": str, "label": bool, "evidence": [str]}``
(``evidence`` optional).

The judge's verdict on a case is its check's score (k samples as configured) read as good at
``q >= 0.5``. The report: agreement, Cohen's kappa with its 95 % interval and the base rate, the
confusion matrix, per-kind agreement, self-consistency over ``consistency_k`` samples at
temperature 1, the length cap's effect on the submissions, and the bias battery
(:mod:`.bias`): every neutral transform applied to the good cases and every adversarial one to the
bad cases, each reported as the mean change of the judge's score (q, in [0, 1]) with a 95 %
interval. A neutral transform should change nothing; an adversarial one should not raise the score.
"""

from __future__ import annotations

import datetime
import json
import random
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..suite import NotApplicable
from .bias import apply, battery
from .check import JudgeCheck
from .quoting import cap_effect
from .stats import cohen_kappa, confusion, mean_difference, self_consistency

if TYPE_CHECKING:
    from envhub.env import Env

GOOD_AT = 0.5


@dataclass
class Case:
    """One labelled submission: what the judge is shown and what the programmatic layers (or a
    person) said of it."""

    case_id: str
    kind: str
    label: bool
    question: str
    answer: str
    evidence: list[str] = field(default_factory=list)


def programmatic_cases(env: Env, check: JudgeCheck, task_ids: list[str],
                       kinds: tuple[str, ...] | None = None) -> list[Case]:
    """The gold solution and every suite case of ``env`` on each task, played as episodes and
    labelled by their correctness layer (a case that never reaches one -- a format error -- or does
    not apply to the task is left out). Every case of a task is shown the evidence of the task's
    gold episode, so that cases differ only in the answer the judge is asked about. ``kinds``: only
    these (``gold`` and suite case names)."""
    cases: list[Case] = []
    scripts = [("gold", env.gold_actions)] + [
        (case.name, lambda task, make=case.actions: make(env, task)) for case in env.adversarial_cases()]
    scripts = [(kind, script) for kind, script in scripts if kinds is None or kind in kinds]
    for task_id in task_ids:
        evidence: list[str] = []
        for kind, script in scripts:
            try:
                verdict = env.play(task_id, script)
            except (NotApplicable, NotImplementedError):
                continue
            episode = env.episode
            correctness = [layer for layer in verdict.layers if layer.layer == "correctness"]
            if episode is None or not correctness or episode.submission is None:
                continue
            if kind == "gold" and check.evidence is not None:
                evidence = list(check.evidence(episode.task, episode.submission, episode))
            cases.append(Case(case_id=f"{task_id}/{kind}", kind=kind, label=correctness[0].passed,
                              question=check.question(episode.task), answer=check.answer(episode.submission),
                              evidence=evidence))
    return cases


def human_cases(path: Path) -> list[Case]:
    """The cases of a JSONL labels file (see the module docstring); ValueError naming the line."""
    cases = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            if not (isinstance(row, dict) and isinstance(row.get("question"), str)
                    and isinstance(row.get("answer"), str) and isinstance(row.get("label"), bool)):
                raise ValueError("needs question (str), answer (str) and label (true/false)")
            evidence = row.get("evidence", [])
            if not (isinstance(evidence, list) and all(isinstance(e, str) for e in evidence)):
                raise ValueError("evidence must be a list of strings")
        except ValueError as exc:
            raise ValueError(f"{path}:{number}: {exc}") from None
        cases.append(Case(case_id=f"human/{number}", kind="human", label=row["label"], question=row["question"],
                          answer=row["answer"], evidence=evidence))
    return cases


def calibrate(check: JudgeCheck, cases: list[Case], *, consistency_k: int = 3, seed: int = 0,
              battery_cases: int = 24) -> dict[str, Any]:
    """Judge every case, then the bias battery (each row on at most ``battery_cases`` of the cases
    it applies to, drawn with ``seed``); the report described in the module docstring."""
    if not cases:
        raise ValueError("no labelled cases to calibrate on")
    scores = [check.score_text(c.question, c.answer, c.evidence).score for c in cases]
    verdicts = [q >= GOOD_AT for q in scores]
    labels = [c.label for c in cases]
    table = confusion(labels, verdicts)
    kinds: dict[str, dict[str, Any]] = {}
    for case, q, verdict in zip(cases, scores, verdicts, strict=True):
        row = kinds.setdefault(case.kind, {"n": 0, "label_good": 0, "agree": 0, "mean_score": 0.0})
        row["n"] += 1
        row["label_good"] += case.label
        row["agree"] += verdict == case.label
        row["mean_score"] += q
    for row in kinds.values():
        row["agreement"], row["mean_score"] = row["agree"] / row["n"], row["mean_score"] / row["n"]
    sampler = JudgeCheck(check.rubric, replace(check.settings, k=consistency_k, temperature=1.0),
                         engine=check.engine, name=check.name)
    consistency = self_consistency([sampler.score_text(c.question, c.answer, c.evidence).details["samples"]
                                    for c in cases])
    return {
        "judge": check.pin().to_dict(), "cases": len(cases), "good_at": GOOD_AT,
        "confusion": table.to_dict(), "kappa": cohen_kappa(labels, verdicts).to_dict(), "by_kind": kinds,
        "self_consistency": {**consistency.to_dict(), "temperature": 1.0},
        "cap": cap_effect([c.answer for c in cases], check.rubric.max_submission_chars),
        "bias": bias_battery(check, cases, scores, seed=seed, limit=battery_cases),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }


def bias_battery(check: JudgeCheck, cases: list[Case], scores: list[float], *, seed: int = 0,
                 limit: int | None = None) -> list[dict[str, Any]]:
    """Each battery case as the mean score change over the cases it applies to (neutral: good
    cases, adversarial: bad cases; at most ``limit`` of them, drawn with ``seed``), with a 95 %
    interval and ``raised`` (how many variants scored higher than their original)."""
    rows = []
    for bias in battery():
        rng = random.Random(f"{seed}/{bias.name}")
        applies = [(c, q) for c, q in zip(cases, scores, strict=True) if c.label == (bias.kind == "neutral")]
        if limit is not None and len(applies) > limit:
            applies = random.Random(f"{seed}/{bias.name}/draw").sample(applies, limit)
        deltas = []
        for case, base in applies:
            variant = apply(bias, case.answer, rng=rng, tool_output="", scale=check.rubric.scale)
            evidence = [*case.evidence, variant.tool_output] if variant.tool_output else case.evidence
            deltas.append(check.score_text(case.question, variant.answer, evidence).score - base)
        rows.append({"case": bias.name, "kind": bias.kind, "description": bias.description,
                     "delta": mean_difference(deltas).to_dict(), "raised": sum(d > 0 for d in deltas)})
    return rows


__all__ = ["GOOD_AT", "Case", "bias_battery", "calibrate", "human_cases", "programmatic_cases"]
