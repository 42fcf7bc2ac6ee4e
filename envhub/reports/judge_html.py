"""The report section of a run graded with an LLM judge: its pin, what it scored, and whether the
env's latest calibration was made with *this* judge (docs/judge.md).

A calibration of another judge -- other weights, another rubric or prompt, other sampling -- says
nothing about this one, so the section compares the pins field by field and says so plainly.
"""

from __future__ import annotations

import json
from typing import Any

from envhub.judges import pin_differences
from envhub.reports.data import RunData
from envhub.reports.tables import Section, html_table
from envhub.reports.transcript import esc
from envhub.verifiers.judge.latest import latest_calibration


def judged(data: RunData) -> bool:
    return bool(data.run.get("judges"))


def _scored(data: RunData, name: str) -> tuple[int, float | None, int]:
    """Episodes the judge ``name`` scored, their mean score, and its unparseable replies."""
    scores, unparseable = [], 0
    for rec in data.records:
        for layer in rec.verdict.layers if rec.verdict else []:
            if layer.layer == "quality" and layer.name == name:
                scores.append(layer.score)
                unparseable += int(layer.details.get("unparseable", 0))
    return len(scores), (sum(scores) / len(scores) if scores else None), unparseable


def _calibration(env_id: str, pin: dict[str, Any]) -> str:
    report = latest_calibration(env_id)
    if report is None:
        return (f"<p class=\"warn\">This judge was never calibrated on {esc(env_id)}: run "
                f"<code>envhub judge calibrate {esc(env_id)} --judge {esc(pin.get('model', 'SPEC'))}</code> "
                "before trusting its scores.</p>")
    differ = pin_differences(report.get("judge") or {}, pin)
    kappa = report.get("kappa") or {}
    value = kappa.get("kappa")
    shown = "undefined" if value is None else f"{value:+.3f}"
    if value is not None and kappa.get("low") is not None:
        shown += f" [{kappa['low']:+.3f}, {kappa['high']:+.3f}]"
    elif kappa.get("reason"):
        shown += f" ({kappa['reason']})"
    head = (f"<p>The env's latest calibration ({esc(str(report.get('date', '?'))[:10])}, "
            f"{esc(report.get('cases', '?'))} labelled cases): Cohen's kappa {esc(shown)}.</p>")
    if differ:
        head += ("<p class=\"warn\">It was made with another judge, so it says nothing about this one: "
                 + esc("; ".join(differ)) + ".</p>")
    else:
        head += "<p>It was made with this judge (the same pin).</p>"
    rows = []
    for row in report.get("bias") or []:
        delta = row.get("delta") or {}
        mean = "n/a" if delta.get("mean") is None else f"{delta['mean']:+.3f}"
        interval = "" if delta.get("low") is None else f" [{delta['low']:+.3f}, {delta['high']:+.3f}]"
        cls = ' class="warn"' if row.get("kind") == "adversarial" and (delta.get("mean") or 0) > 0 else ""
        rows.append([esc(row.get("case", "?")), esc(row.get("kind", "?")),
                     f"<span{cls}>{esc(mean + interval)}</span>", f"{esc(row.get('raised'))} of {esc(delta.get('n'))}"])
    table = html_table(["bias case", "kind", "mean change of the score [95 %]", "raised"], rows, "judge-bias")
    return head + table


def _judge(data: RunData, plots: dict[str, str]) -> str:
    env_id = str(data.run.get("env_id", "?"))
    parts = ["<p>An LLM judge added a bounded quality term to this run's successes (it never scores a failed "
             "correctness layer). Its pin is in every judged verdict and in run.json.</p>"]
    for name, pin in sorted((data.run.get("judges") or {}).items()):
        count, mean, unparseable = _scored(data, name)
        rows = [[esc(k), f"<code>{esc(json.dumps(v, sort_keys=True) if isinstance(v, dict) else v)}</code>"]
                for k, v in pin.items()]
        parts.append(f"<h3>{esc(name)}</h3>" + html_table(["pin", "value"], rows, "judge-pin"))
        scored = "no episode" if mean is None else f"{count} episodes, mean score {mean:.3f}"
        parts.append(f"<p>Scored: {esc(scored)}; unparseable replies: {unparseable} (each scored 0).</p>")
        parts.append(_calibration(env_id, pin))
    return "\n".join(parts)


SECTION: Section[RunData] = Section("judge", "LLM judge: pin, scores and calibration", _judge, when=judged)

__all__ = ["SECTION", "judged"]
