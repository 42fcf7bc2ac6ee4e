"""The sections of a rollout's HTML report, in report order (:data:`SECTIONS`); the page around
them is :mod:`envhub.reports.html`.
"""

from __future__ import annotations

from typing import Any

from envhub.reports.data import Group, RunData
from envhub.reports.judge_html import SECTION as JUDGE_SECTION
from envhub.reports.tables import Section, html_table, img, num, seed_rows, seed_table
from envhub.reports.transcript import esc, transcript
from envhub.types import Outcome, OutcomeClass, TrajectoryRecord

#: Example transcripts per outcome; the slowest and failing-task tables are cut at these sizes.
EXAMPLES_PER_OUTCOME = 3
SLOWEST = 10
FAILING_TASKS = 50


def anchors(data: RunData) -> dict[Outcome, list[tuple[int, TrajectoryRecord]]]:
    """Example episodes by outcome: (report-local index, record); the index makes the anchor."""
    chosen: dict[Outcome, list[tuple[int, TrajectoryRecord]]] = {}
    for i, rec in enumerate(data.records):
        bucket = chosen.setdefault(rec.outcome, [])
        if len(bucket) < EXAMPLES_PER_OUTCOME:
            bucket.append((i, rec))
    return chosen


def ep_anchor(i: int) -> str:
    return f"ep-{i}"


def _headline(data: RunData, plots: dict[str, str]) -> str:
    rows = seed_rows(data.headline())
    s = data.summary
    rows.append(["run wall seconds", f"{float(s.get('wall_seconds', 0.0)):.1f}",
                 f"{float(s.get('episodes_per_second', 0.0)):.2f} episodes/s (last invocation)"])
    if "planned" in s:
        rows.append(["planned", str(s["planned"]), "episodes the run was asked for"])
    warn = ""
    if s.get("incomplete"):
        warn = f'<p class="warn">incomplete run: {esc(s["incomplete"])}</p>'
    return warn + seed_table(rows)


def _outcomes(data: RunData, plots: dict[str, str]) -> str:
    examples = anchors(data)
    attempted = data.summary["attempted"] or 1
    rows = []
    for cls in OutcomeClass:
        members = [o for o in Outcome if o.outcome_class is cls]
        n_cls = data.summary["by_class"][cls.value]
        for j, outcome in enumerate(members):
            n = data.summary["by_outcome"][outcome.value]
            links = " ".join(f'<a href="#{ep_anchor(i)}">#{i}</a>' for i, _ in examples.get(outcome, []))
            rows.append([f'<span class="cls {esc(cls.value)}">{esc(cls.value)}</span>' if j == 0 else "",
                         str(n_cls) if j == 0 else "", esc(outcome.value), str(n), f"{n / attempted:.1%}",
                         links or "&ndash;"])
    return (img(plots, "outcome_mix", "episodes by outcome, coloured by class")
            + html_table(["class", "class total", "outcome", "episodes", "share", "example episodes"], rows,
                     "outcomes"))


def _group_rows(groups: dict[Any, Group]) -> list[list[str]]:
    rows = []
    for key, g in groups.items():
        excl = g.rate_excluding_infra
        rows.append([esc("?" if key is None else key), str(g.attempted), str(g.successes), str(g.infra),
                     f"{g.strict_rate:.3f}", "n/a" if excl is None else f"{excl:.3f}"])
    return rows


_GROUP_HEAD = ["", "attempted", "successes", "infra", "strict success", "success excl. infra"]


def _rewards(data: RunData, plots: dict[str, str]) -> str:
    counts: dict[float, int] = {}
    for rec in data.records:
        r = round(rec.reward, 3)
        counts[r] = counts.get(r, 0) + 1
    rows = [[f"{r:.3f}", str(n)] for r, n in sorted(counts.items())[:30]]
    return img(plots, "reward_distribution", "histogram of episode rewards") + html_table(["reward", "episodes"], rows)


def _difficulty(data: RunData, plots: dict[str, str]) -> str:
    return (img(plots, "success_by_difficulty", "strict success rate per difficulty")
            + html_table(["difficulty", *_GROUP_HEAD[1:]], _group_rows(data.by_difficulty())))


def _family(data: RunData, plots: dict[str, str]) -> str:
    return (img(plots, "success_by_family", "strict success rate per task family")
            + html_table(["family", *_GROUP_HEAD[1:]], _group_rows(data.by_family())))


def _profile(data: RunData, plots: dict[str, str]) -> str:
    p = data.profile
    if not p:
        return '<p class="none">no profile.json in this run (<code>envhub profile</code> writes one)</p>'
    k = p.get("k")
    rows = [[esc(key), esc(p.get(key))] for key in ("k", "tasks_profiled", "informative_tasks", "all_fail_tasks",
                                                     "all_pass_tasks", "undetermined_tasks", f"mean_pass@{k}",
                                                     "mean_pass@1") if key in p]
    return (img(plots, "difficulty_histogram", "tasks by per-sample success rate")
            + html_table(["profile", "value"], rows)
            + "<p>informative tasks (0 &lt; success rate &lt; 1) are the curriculum list in "
              "<code>curriculum.json</code>.</p>")


def _cost(data: RunData, plots: dict[str, str]) -> str:
    split = data.time_split()
    total = sum(split.values()) or 1.0
    rows = [[esc(k), f"{v:.3f}", f"{v / total:.1%}"] for k, v in split.items()]
    cost = data.cost()
    crow = [[esc(k), num(v, 3)] for k, v in cost.items() if k != "episode_seconds_total"]
    return (html_table(["per success", "value"], crow, "cost") + img(plots, "time_split", "time split")
            + html_table(["time in", "seconds (summed over episodes)", "share"], rows, "time"))


def _slowest(data: RunData, plots: dict[str, str]) -> str:
    order = sorted(range(len(data.records)), key=lambda i: -data.records[i].metrics.wall_seconds)
    rows = []
    for i in order[:SLOWEST]:
        rec = data.records[i]
        rows.append([f'<a href="#{ep_anchor(i)}">#{i}</a>' if ep_anchor(i) in _rendered(data) else f"#{i}",
                     esc(rec.task_id), esc(rec.outcome), f"{rec.metrics.wall_seconds:.3f}",
                     f"{rec.metrics.sandbox_seconds:.3f}", esc(rec.outcome_detail, 300)])
    return html_table(["episode", "task", "outcome", "wall s", "sandbox s", "outcome detail"], rows, "slowest")


def _failing(data: RunData, plots: dict[str, str]) -> str:
    first_detail: dict[str, tuple[int, TrajectoryRecord]] = {}
    for i, rec in enumerate(data.records):
        if rec.outcome is not Outcome.SUCCESS:
            first_detail.setdefault(rec.task_id, (i, rec))
    groups = {k: g for k, g in data.by_task().items() if g.successes < g.attempted}
    rows = []
    for task_id, g in list(groups.items())[:FAILING_TASKS]:
        i, rec = first_detail[task_id]
        info = data.task(rec)
        mix = ", ".join(f"{esc(o)} {n}" for o, n in sorted(g.outcomes.items()))
        rows.append([esc(task_id), esc(info.family), esc("?" if info.difficulty is None else info.difficulty),
                     f"{g.successes}/{g.attempted}", mix, esc(rec.outcome_detail, 300)])
    more = (f"<p>{len(groups) - FAILING_TASKS} more failing tasks are in trajectories.jsonl.</p>"
            if len(groups) > FAILING_TASKS else "")
    if not rows:
        return '<p class="none">no task failed</p>'
    return html_table(["task", "family", "difficulty", "successes", "outcomes", "first outcome detail"], rows,
                  "failing") + more


def _rendered(data: RunData) -> set[str]:
    return {ep_anchor(i) for bucket in anchors(data).values() for i, _ in bucket}


def _examples(data: RunData, plots: dict[str, str]) -> str:
    parts = [f"<p>Up to {EXAMPLES_PER_OUTCOME} episodes per outcome, failures first. "
             "Model-written text is shown as text.</p>"]
    chosen = anchors(data)
    order = sorted(chosen, key=lambda o: o is Outcome.SUCCESS)
    for outcome in order:
        parts.append(f"<h3>{esc(outcome.value)} ({esc(outcome.outcome_class.value)})</h3>")
        for i, rec in chosen[outcome]:
            parts.append(f'<details open><summary>#{i} {esc(rec.task_id)}</summary>{transcript(rec, ep_anchor(i))}'
                         "</details>")
    return "\n".join(parts)


SECTIONS: list[Section[RunData]] = [
    Section("headline", "Headline", _headline),
    Section("outcomes", "Outcome mix", _outcomes),
    Section("rewards", "Reward distribution", _rewards),
    Section("difficulty", "Success by difficulty", _difficulty),
    Section("family", "Success by task family", _family),
    Section("profile", "Difficulty profile (pass@k)", _profile),
    Section("cost", "Cost per success and time split", _cost),
    Section("slowest", "Slowest episodes", _slowest),
    Section("failing", "Failing tasks", _failing),
    JUDGE_SECTION,
    Section("examples", "Example episodes", _examples),
]
