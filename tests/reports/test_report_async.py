"""An async training run's report: a section with the four async series over steps, the staleness
distribution of the trained samples (counted here from the run's own files) and the table of every
async key; a sync run has no such section and no such plot."""

import json
import os
import re
import shutil
from collections import Counter

import pytest
from cdp import chromium, load_page
from report_training_runs import fixture_training_run

from envhub.reports.html import load_run, write_report
from envhub.reports.training_plots import ASYNC_PANELS, merged_series
from envhub.store import read_jsonl
from envhub.trainer.async_metrics import ASYNC_KEYS

ASYNC_PLOTS = {"async_over_steps", "staleness_distribution"}
FOUR = ("async_queue_groups", "async_version_lag_mean", "async_version_lag_max", "async_trainer_idle_ratio",
        "async_rollout_idle_ratio")


def _table(text: str, cls: str) -> list[list[str]]:
    """The body rows of the table of class ``cls``, each cell's text (tags stripped)."""
    table = re.search(rf'<table class="{cls}">.*?<tbody>(.*?)</tbody>', text, re.S)
    assert table, cls
    return [[re.sub(r"<[^>]+>", "", c) for c in re.findall(r"<td>(.*?)</td>", row)]
            for row in re.findall(r"<tr>(.*?)</tr>", table.group(1))]


def _lags_from_files(run) -> tuple[Counter, Counter]:
    """Each episode's version lag (its step's version before the update minus its first turn's),
    counted over every episode of the steps and over the trained ones."""
    every: Counter = Counter()
    trained: Counter = Counter()
    for line in read_jsonl(run / "steps.jsonl"):
        trained_at = int(line["weight_version"]) - 1
        for record in read_jsonl(run / "rollouts" / f"step-{line['step']:06d}" / "trajectories.jsonl"):
            lag = trained_at - int(record["turns"][0]["weight_version"])
            every[lag] += 1
            trained[lag] += record["episode_id"] in line["trained_episodes"]
    return every, trained


def test_async_run_report_shows_the_four_series_and_the_staleness_distribution(tmp_path):
    run = tmp_path / "run"
    lines = fixture_training_run(run, asynchronous=True)
    files = write_report(run)
    text = files.html.read_text(encoding="utf-8")
    assert '<section id="async">' in text and '<a href="#async">' in text
    assert set(files.plots) >= ASYNC_PLOTS
    for name in ASYNC_PLOTS:
        assert f'id="plot-{name}"' in text and files.plots[name].read_bytes().startswith(b"\x89PNG")

    data = load_run(run)
    drawn = {key: (xs, ys) for keys in ASYNC_PANELS.values() for label, xs, ys in merged_series(data, keys)
             for key in [keys[part.strip()] for part in label.split("=")]}
    for key in FOUR:
        assert drawn[key] == ([line["step"] for line in lines], [float(line[key]) for line in lines]), key

    per_step = _table(text, "async")
    assert [int(row[0]) for row in per_step] == [line["step"] for line in lines]
    for row, line in zip(per_step, lines, strict=True):
        assert [float(cell) for cell in row[1:]] == pytest.approx([line[key] for key in FOUR], abs=5e-4)

    summary = {row[0]: row[2:] for row in _table(text, "async-summary")}
    assert list(summary) == list(ASYNC_KEYS)
    for key, (mean, biggest, last) in summary.items():
        values = [line[key] for line in lines]
        assert float(mean) == pytest.approx(sum(values) / len(values), abs=5e-4)
        assert float(biggest) == pytest.approx(max(values)) and float(last) == pytest.approx(values[-1])

    dropped = sum(line["async_stale_dropped"] for line in lines)
    assert dropped == 2 and re.search(rf'id="async-stale-dropped">{dropped}<', text)
    assert re.search(r'id="async-stale-reweighted">0<', text)

    every, trained = _lags_from_files(run)
    assert set(every) == {0, 1, 2} and sum(every.values()) == 16 and trained[2] == 0
    assert sum(trained.values()) == sum(len(line["trained_episodes"]) for line in lines) == 13
    assert re.search(r'id="async-lag-source">samples<', text) and re.search(r'id="async-lag-n">16<', text)
    assert "max_staleness 1, stale samples drop" in text
    rows = _table(text, "async-staleness")
    assert {int(r[0]): (int(r[1]), int(r[2]), int(r[3])) for r in rows} == \
        {lag: (every[lag], trained[lag], every[lag] - trained[lag]) for lag in every}


def test_without_per_sample_versions_the_distribution_is_over_steps_and_says_so(tmp_path):
    run = tmp_path / "run"
    lines = fixture_training_run(run, asynchronous=True)
    shutil.rmtree(run / "rollouts")
    files = write_report(run)
    text = files.html.read_text(encoding="utf-8")
    assert re.search(r'id="async-lag-source">steps<', text) and "staleness_distribution" in files.plots
    means = Counter(round(line["async_version_lag_mean"], 2) for line in lines)
    assert re.search(rf'id="async-lag-n">{len(lines)}<', text)
    assert {float(row[0]): int(row[1]) for row in _table(text, "async-staleness")} == pytest.approx(means)


def test_a_sync_run_has_no_async_section_or_plot(tmp_path):
    run = tmp_path / "run"
    lines = fixture_training_run(run, asynchronous=False)
    assert not any(key in line for line in lines for key in ASYNC_KEYS)
    files = write_report(run)
    text = files.html.read_text(encoding="utf-8").replace(str(run), "RUN")  # the test's name has "async"
    assert not ASYNC_PLOTS & set(files.plots)
    assert 'id="async"' not in text and "#async" not in text and "async_" not in text
    assert not load_run(run).is_async


@pytest.mark.skipif(chromium() is None and not os.environ.get("CI"), reason="chromium is not installed")
def test_async_report_renders_in_chromium(tmp_path):
    run = tmp_path / "run"
    fixture_training_run(run, asynchronous=True)
    files = write_report(run)
    page = load_page(files.html.as_uri(), """JSON.stringify({
      images: [...document.querySelectorAll('#async img')].map(i => ({id: i.id, complete: i.complete,
                                                                      width: i.naturalWidth})),
      source: document.getElementById('async-lag-source').textContent,
      rows: document.querySelectorAll('#async table.async tbody tr').length})""")
    assert page.errors() == []
    seen = json.loads(page.value)
    assert sorted(i["id"] for i in seen["images"]) == sorted(f"plot-{name}" for name in ASYNC_PLOTS)
    assert all(i["complete"] and i["width"] > 0 for i in seen["images"])
    assert seen["source"] == "samples" and seen["rows"] == 4
