"""``envhub report RUN_DIR``: one self-contained HTML file, and the same plots as PNG files beside it.

The HTML has no script, no external asset and no network reference: styles are inline, images are
``data:`` URIs, and a Content-Security-Policy forbids anything else, so even a string that got past
escaping could not run or fetch. Tables are plain HTML; transcripts open with ``<details>``.

:func:`load_run` loads a run of either kind, and :func:`builder` picks that kind's plots and
sections: a rollout's (:mod:`envhub.reports.plots`, :mod:`envhub.reports.rollout_html`) or a
training run's (:mod:`envhub.reports.training_plots`, :mod:`envhub.reports.training_html`).
Files are written atomically: the PNGs first, then the HTML that shows them.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Generic

import typer

from envhub.reports import plots, rollout_html, training_html, training_plots
from envhub.reports.data import RunData, load_rollout
from envhub.reports.tables import D, Section
from envhub.reports.training import TrainingData, load_training
from envhub.reports.transcript import esc
from envhub.run_dir import TRAJECTORIES, RunFileError
from envhub.store import atomic_path, write_text_atomic


def load_run(run_dir: str | Path) -> RunData:
    """Load a run directory of either kind; RunFileError names what is wrong."""
    path = Path(run_dir)
    if not path.is_dir():
        raise RunFileError(f"{path} is not a directory")
    data = load_rollout(path) or load_training(path)
    if data is None:
        raise RunFileError(f"{path} holds no run: expected {TRAJECTORIES} (a rollout, `envhub rollout --out`) "
                           "or steps.jsonl and config.json (a training run, `envhub train`)")
    return data


@dataclass(frozen=True)
class Builder(Generic[D]):
    """A run's report as its kind builds it: the plots it draws and the sections it shows."""

    data: D
    plotters: Mapping[str, Callable[[D], bytes | None]]
    sections: Sequence[Section[D]]

    def draw(self) -> dict[str, bytes]:
        """Every plot that has something to show, as PNG bytes."""
        images = {name: plot(self.data) for name, plot in self.plotters.items()}
        return {name: image for name, image in images.items() if image is not None}

    def shown(self) -> list[Section[D]]:
        """The sections this run has."""
        return [s for s in self.sections if s.applies(self.data)]

    def body(self, uris: dict[str, str]) -> list[str]:
        """Each section as HTML (``uris``: plot name -> ``data:`` URI)."""
        return [f'<section id="{esc(s.id)}"><h2>{esc(s.title)}</h2>{s.render(self.data, uris)}</section>'
                for s in self.shown()]


#: a report builder of either kind
Report = Builder[TrainingData] | Builder[RunData]


def builder(data: RunData) -> Report:
    """The report builder of the run's kind."""
    match data:
        case TrainingData():
            return Builder(data, training_plots.PLOTS, training_html.SECTIONS)
        case _:
            return Builder(data, plots.PLOTS, rollout_html.SECTIONS)


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


def render_html(report: Report, images: dict[str, bytes]) -> str:
    """The whole report as one HTML document (plots inlined as data: URIs)."""
    data = report.data
    uris = {name: "data:image/png;base64," + base64.b64encode(png).decode("ascii") for name, png in images.items()}
    title = f"envhub {data.kind} report: {data.summary.get('env_id', '')}"
    nav = " &middot; ".join(f'<a href="#{esc(s.id)}">{esc(s.title)}</a>' for s in report.shown())
    body = report.body(uris)
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
    ``<out stem>.<plot>.png`` beside it. Raises RunFileError for a directory that is not a run."""
    report = builder(load_run(run_dir))
    html_path = Path(out) if out is not None else Path(run_dir) / "report.html"
    if html_path.suffix.lower() not in (".html", ".htm"):
        raise RunFileError(f"--out must name an .html file, got {html_path}")
    images = report.draw()
    written: dict[str, Path] = {}
    for name, png in images.items():
        path = html_path.with_name(f"{html_path.stem}.{name}.png")
        with atomic_path(path) as tmp:
            tmp.write_bytes(png)
        written[name] = path
    write_text_atomic(html_path, render_html(report, images))
    return ReportFiles(html_path, written)


def report_command(
    run_dir: Annotated[Path, typer.Argument(help="a rollout directory (trajectories.jsonl, report.json, run.json) "
                                                 "or a training run (steps.jsonl, config.json)")],
    out: Annotated[Path | None, typer.Option("--out", help="HTML file to write (default RUN_DIR/report.html)")] = None,
) -> None:
    """Render a run as one self-contained HTML report, with its plots also written as PNG files."""
    try:
        files = write_report(run_dir, out)
    except RunFileError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    except ImportError as exc:  # matplotlib: the report extra
        typer.echo(f"error: the report needs matplotlib ({exc}); pip install 'envhub[report]'", err=True)
        raise typer.Exit(2) from None
    except OSError as exc:
        typer.echo(f"error: cannot write the report: {exc.strerror or exc}", err=True)
        raise typer.Exit(1) from None
    typer.echo(f"wrote {files.html} and {len(files.plots)} plots beside it")
