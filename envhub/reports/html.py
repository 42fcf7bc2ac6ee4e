"""``envhub report RUN_DIR``: one self-contained HTML file, and the same plots as PNG files beside it.

The HTML has no script, no external asset and no network reference: styles are inline, images are
``data:`` URIs, and a Content-Security-Policy forbids anything else, so even a string that got past
escaping could not run or fetch. Tables are plain HTML; transcripts open with ``<details>``.

Sections are registered per run kind (:data:`SECTIONS`); a training run registers its own list
(:mod:`envhub.reports.training_html`), reusing the helpers here (:func:`html_table`, :func:`img`,
:func:`seed_rows`).
Files are written atomically: the PNGs first, then the HTML that shows them.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer

from envhub.reports.data import Group, RunData, RunDirError, load_run
from envhub.reports.plots import draw
from envhub.reports.transcript import esc, transcript
from envhub.store import atomic_path, write_text_atomic
from envhub.types import Outcome, OutcomeClass

#: Example transcripts per outcome; the slowest and failing-task tables are cut at these sizes.
EXAMPLES_PER_OUTCOME = 3
SLOWEST = 10
FAILING_TASKS = 50


@dataclass(frozen=True)
class Section:
    id: str
    title: str
    render: Callable[[RunData, dict[str, str]], str]  # (data, plot name -> data: URI) -> HTML


SECTIONS: dict[str, list[Section]] = {"rollout": []}


def section(kind: str, id: str, title: str) -> Callable[[Callable[..., str]], Callable[..., str]]:
    """Register a section renderer for runs of ``kind``, in report order."""
    def add(fn: Callable[[RunData, dict[str, str]], str]) -> Callable[[RunData, dict[str, str]], str]:
        SECTIONS.setdefault(kind, []).append(Section(id, title, fn))
        return fn
    return add


def num(value: float | None, digits: int = 3) -> str:
    if value is None:
        return "n/a (no success)"
    return f"{value:,.{digits}f}" if isinstance(value, float) and not value.is_integer() else f"{value:,.0f}"


def html_table(head: list[str], rows: list[list[str]], cls: str = "") -> str:
    """``rows`` are HTML already (escaped by the caller)."""
    th = "".join(f"<th>{esc(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f'<table class="{esc(cls)}"><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>'


def img(plots: dict[str, str], name: str, alt: str) -> str:
    if name not in plots:
        return ""
    return f'<figure><img id="plot-{esc(name)}" src="{plots[name]}" alt="{esc(alt)}"></figure>'


def anchors(data: RunData) -> dict[str, list[tuple[int, dict[str, Any]]]]:
    """Example episodes by outcome: (report-local index, record); the index makes the anchor."""
    chosen: dict[str, list[tuple[int, dict[str, Any]]]] = {}
    for i, rec in enumerate(data.records):
        bucket = chosen.setdefault(rec["outcome"], [])
        if len(bucket) < EXAMPLES_PER_OUTCOME:
            bucket.append((i, rec))
    return chosen


def ep_anchor(i: int) -> str:
    return f"ep-{i}"


def seed_rows(h: dict[str, Any], prefix: str = "") -> list[list[str]]:
    """The seed's numbers of a :meth:`RunData.headline` as ``[name, value HTML, what it counts]`` rows;
    the values carry ids ``{prefix}n-attempted``, ``{prefix}strict-success``, ... (unique per page)."""
    def tag(name: str, value: str, el: str = "span") -> str:
        return f'<{el} id="{esc(prefix)}{name}">{value}</{el}>'

    return [
        ["attempted", tag("n-attempted", str(h["attempted"])), "episodes with a record (infra included)"],
        ["successes", tag("n-successes", str(h["successes"])), ""],
        ["failed by policy", tag("n-policy-failures", str(h["policy_failures"])),
         "wrong_answer, format_error: the model's fault, signal for training"],
        ["truncated", str(h["truncations"]), "budget_exhausted, context_overflow (the model's, cut)"],
        ["failed by environment", tag("n-infra-failures", str(h["infra_failures"])),
         "env_error, verifier_error, engine_error: ours, never scored as the model's"],
        ["strict success rate", tag("strict-success", f'{h["strict_success_rate"]:.3f}', "b"), "success / attempted"],
        ["success excluding infra", f'{h["success_rate_excluding_infra"]:.3f}',
         "success / (attempted - infra); shown beside the strict rate, never instead"],
        ["mean reward", f'{h["mean_reward"]:.3f}', ""],
        ["tokens per success", tag("tokens-per-success", num(h["tokens_per_success"], 1)),
         "prompt + response tokens of all episodes / successes"],
        ["sampled tokens per success", num(h["sampled_tokens_per_success"], 1), "tokens the model sampled"],
        ["tool calls per success", tag("tool-calls-per-success", num(h["tool_calls_per_success"], 2)),
         "all tool calls / successes"],
        ["seconds per success", tag("seconds-per-success", num(h["seconds_per_success"], 3)),
         "episode wall seconds summed / successes"],
    ]


def seed_table(rows: list[list[str]]) -> str:
    """:func:`seed_rows` (and any rows added to them) as the headline table."""
    return html_table(["number", "value", "what it counts"], [[esc(a), b, esc(c)] for a, b, c in rows], "headline")


@section("rollout", "headline", "Headline")
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


@section("rollout", "outcomes", "Outcome mix")
def _outcomes(data: RunData, plots: dict[str, str]) -> str:
    examples = anchors(data)
    attempted = data.summary["attempted"] or 1
    rows = []
    for cls in OutcomeClass:
        members = [o for o in Outcome if o.outcome_class is cls]
        n_cls = data.summary["by_class"][cls.value]
        for j, outcome in enumerate(members):
            n = data.summary["by_outcome"][outcome.value]
            links = " ".join(f'<a href="#{ep_anchor(i)}">#{i}</a>' for i, _ in examples.get(outcome.value, []))
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


@section("rollout", "rewards", "Reward distribution")
def _rewards(data: RunData, plots: dict[str, str]) -> str:
    counts: dict[float, int] = {}
    for rec in data.records:
        r = round(float(rec.get("reward", 0.0) or 0.0), 3)
        counts[r] = counts.get(r, 0) + 1
    rows = [[f"{r:.3f}", str(n)] for r, n in sorted(counts.items())[:30]]
    return img(plots, "reward_distribution", "histogram of episode rewards") + html_table(["reward", "episodes"], rows)


@section("rollout", "difficulty", "Success by difficulty")
def _difficulty(data: RunData, plots: dict[str, str]) -> str:
    return (img(plots, "success_by_difficulty", "strict success rate per difficulty")
            + html_table(["difficulty", *_GROUP_HEAD[1:]], _group_rows(data.by_difficulty())))


@section("rollout", "family", "Success by task family")
def _family(data: RunData, plots: dict[str, str]) -> str:
    return (img(plots, "success_by_family", "strict success rate per task family")
            + html_table(["family", *_GROUP_HEAD[1:]], _group_rows(data.by_family())))


@section("rollout", "profile", "Difficulty profile (pass@k)")
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


@section("rollout", "cost", "Cost per success and time split")
def _cost(data: RunData, plots: dict[str, str]) -> str:
    split = data.time_split()
    total = sum(split.values()) or 1.0
    rows = [[esc(k), f"{v:.3f}", f"{v / total:.1%}"] for k, v in split.items()]
    cost = data.cost()
    crow = [[esc(k), num(v, 3)] for k, v in cost.items() if k != "episode_seconds_total"]
    return (html_table(["per success", "value"], crow, "cost") + img(plots, "time_split", "time split")
            + html_table(["time in", "seconds (summed over episodes)", "share"], rows, "time"))


@section("rollout", "slowest", "Slowest episodes")
def _slowest(data: RunData, plots: dict[str, str]) -> str:
    order = sorted(range(len(data.records)),
                   key=lambda i: -float(data.records[i].get("metrics", {}).get("wall_seconds", 0.0) or 0.0))
    rows = []
    for i in order[:SLOWEST]:
        rec = data.records[i]
        m = rec.get("metrics", {})
        rows.append([f'<a href="#{ep_anchor(i)}">#{i}</a>' if ep_anchor(i) in _rendered(data) else f"#{i}",
                     esc(rec["task_id"]), esc(rec["outcome"]), f"{float(m.get('wall_seconds', 0) or 0):.3f}",
                     f"{float(m.get('sandbox_seconds', 0) or 0):.3f}", esc(rec.get("outcome_detail", ""), 300)])
    return html_table(["episode", "task", "outcome", "wall s", "sandbox s", "outcome detail"], rows, "slowest")


@section("rollout", "failing", "Failing tasks")
def _failing(data: RunData, plots: dict[str, str]) -> str:
    first_detail: dict[str, tuple[int, dict[str, Any]]] = {}
    for i, rec in enumerate(data.records):
        if rec["outcome"] != Outcome.SUCCESS.value:
            first_detail.setdefault(rec["task_id"], (i, rec))
    groups = {k: g for k, g in data.by_task().items() if g.successes < g.attempted}
    rows = []
    for task_id, g in list(groups.items())[:FAILING_TASKS]:
        i, rec = first_detail[task_id]
        info = data.task(rec)
        mix = ", ".join(f"{esc(o)} {n}" for o, n in sorted(g.outcomes.items()))
        rows.append([esc(task_id), esc(info.family), esc("?" if info.difficulty is None else info.difficulty),
                     f"{g.successes}/{g.attempted}", mix, esc(rec.get("outcome_detail", ""), 300)])
    more = (f"<p>{len(groups) - FAILING_TASKS} more failing tasks are in trajectories.jsonl.</p>"
            if len(groups) > FAILING_TASKS else "")
    if not rows:
        return '<p class="none">no task failed</p>'
    return html_table(["task", "family", "difficulty", "successes", "outcomes", "first outcome detail"], rows,
                  "failing") + more


def _rendered(data: RunData) -> set[str]:
    return {ep_anchor(i) for bucket in anchors(data).values() for i, _ in bucket}


@section("rollout", "examples", "Example episodes")
def _examples(data: RunData, plots: dict[str, str]) -> str:
    parts = [f"<p>Up to {EXAMPLES_PER_OUTCOME} episodes per outcome, failures first. "
             "Model-written text is shown as text.</p>"]
    chosen = anchors(data)
    order = sorted(chosen, key=lambda o: Outcome(o) is Outcome.SUCCESS)
    for outcome in order:
        parts.append(f"<h3>{esc(outcome)} ({esc(Outcome(outcome).outcome_class.value)})</h3>")
        for i, rec in chosen[outcome]:
            parts.append(f'<details open><summary>#{i} {esc(rec["task_id"])}</summary>{transcript(rec, ep_anchor(i))}'
                         "</details>")
    return "\n".join(parts)


STYLE = """
body{font-family:system-ui,sans-serif;margin:2em;max-width:72em;color:#212121}
table{border-collapse:collapse;margin:.6em 0}th,td{border:1px solid #ccc;padding:.2em .5em;vertical-align:top;text-align:left}
th{background:#f0f0f0}pre{white-space:pre-wrap;word-break:break-word;margin:.2em 0;font-size:.85em}
figure{margin:.5em 0}img{max-width:100%}.warn{color:#b71c1c;font-weight:bold}
.msg{border-left:3px solid #90a4ae;padding-left:.5em;margin:.3em 0}.msg.assistant{border-color:#1565c0}
.msg.tool{border-color:#00838f}.role{font-size:.8em;color:#555}.sampled{background:#fff3cd;padding:0 .3em}
.episode{border:1px solid #ddd;padding:.5em;margin:.5em 0}.detail pre{background:#fbe9e7}
.cls.infra_failure{color:#6a1b9a;font-weight:bold}.cls.policy_failure{color:#c62828}
.cls.success{color:#2e7d32}.cls.truncation{color:#ef6c00}.turn-head{font-weight:bold;margin-top:.4em}
"""
CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'"


def render_html(data: RunData, plots: dict[str, bytes]) -> str:
    """The whole report as one HTML document (plots inlined as data: URIs)."""
    uris = {name: "data:image/png;base64," + base64.b64encode(png).decode("ascii") for name, png in plots.items()}
    sections = SECTIONS.get(data.kind, [])
    title = f"envhub {data.kind} report: {data.summary.get('env_id', '')}"
    nav = " &middot; ".join(f'<a href="#{esc(s.id)}">{esc(s.title)}</a>' for s in sections)
    body = [f'<section id="{esc(s.id)}"><h2>{esc(s.title)}</h2>{s.render(data, uris)}</section>' for s in sections]
    notes = "".join(f"<li>{esc(n)}</li>" for n in data.notes)
    policy = data.run.get("policy", {})
    who = policy.get("policy") if isinstance(policy, dict) else policy
    meta = (f"<p>kind <b>{esc(data.kind)}</b> &middot; policy <b>{esc(who or data.summary.get('policy', '?'))}</b>"
            f" &middot; split {esc(data.run.get('split', '?'))} &middot; run dir <code>{esc(str(data.run_dir))}</code></p>")
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
            f'<meta name="envhub-report-kind" content="{esc(data.kind)}">'
            f"<title>{esc(title)}</title><style>{STYLE}</style></head><body>"
            f"<h1>{esc(title)}</h1>{meta}<nav>{nav}</nav>"
            + (f'<ul class="notes">{notes}</ul>' if notes else "") + "\n".join(body) + "</body></html>\n")


@dataclass(frozen=True)
class ReportFiles:
    html: Path
    plots: dict[str, Path]


def write_report(run_dir: str | Path, out: str | Path | None = None) -> ReportFiles:
    """Render ``run_dir``'s report to ``out`` (default ``RUN_DIR/report.html``) and each plot to
    ``<out stem>.<plot>.png`` beside it. Raises :class:`RunDirError` for a directory that is not a run."""
    data = load_run(run_dir)
    html_path = Path(out) if out is not None else Path(run_dir) / "report.html"
    if html_path.suffix.lower() not in (".html", ".htm"):
        raise RunDirError(f"--out must name an .html file, got {html_path}")
    plots = draw(data)
    written: dict[str, Path] = {}
    for name, png in plots.items():
        path = html_path.with_name(f"{html_path.stem}.{name}.png")
        with atomic_path(path) as tmp:
            tmp.write_bytes(png)
        written[name] = path
    write_text_atomic(html_path, render_html(data, plots))
    return ReportFiles(html_path, written)


def report_command(
    run_dir: Annotated[Path, typer.Argument(help="a rollout directory (trajectories.jsonl, report.json, run.json) "
                                                 "or a training run (steps.jsonl, config.json)")],
    out: Annotated[Path | None, typer.Option("--out", help="HTML file to write (default RUN_DIR/report.html)")] = None,
) -> None:
    """Render a run as one self-contained HTML report, with its plots also written as PNG files."""
    try:
        files = write_report(run_dir, out)
    except RunDirError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    except ImportError as exc:  # matplotlib: the report extra
        typer.echo(f"error: the report needs matplotlib ({exc}); pip install 'envhub[report]'", err=True)
        raise typer.Exit(2) from None
    except OSError as exc:
        typer.echo(f"error: cannot write the report: {exc.strerror or exc}", err=True)
        raise typer.Exit(1) from None
    typer.echo(f"wrote {files.html} and {len(files.plots)} plots beside it")
