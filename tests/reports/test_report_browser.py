"""The HTML reports of a real rollout and of a real (tiny) training run, opened in headless Chromium:
each renders without a console error, every image loads, nothing model-written runs, and a
screenshot is kept in the run dir."""

import json
import os
import shutil
from pathlib import Path

import pytest
from cdp import chromium, load_page
from report_runs import HOSTILE, mixed_rollout
from report_training_runs import tiny_training_run
from sandbox_fixtures import require_backend

from envhub.reports.html import write_report

if chromium() is None:  # CI installs it (scripts/setup.sh): there, a missing browser fails the test
    pytestmark = pytest.mark.skipif(not os.environ.get("CI"), reason="chromium is not installed")

PROBE = """JSON.stringify({
  images: [...document.images].map(i => ({id: i.id, complete: i.complete, width: i.naturalWidth,
                                           src: i.src.slice(0, 22)})),
  scripts: document.scripts.length, iframes: document.querySelectorAll('iframe').length,
  hostileShown: document.body.innerText.includes("console.error('injected script ran')"),
  strict: document.getElementById('strict-success').textContent,
  attempted: document.getElementById('n-attempted').textContent,
  infra: document.getElementById('n-infra-failures').textContent,
  links: [...document.querySelectorAll('#outcomes a')].map(a => a.getAttribute('href')),
  anchors: [...document.querySelectorAll('section.episode')].map(s => s.id),
  sampled: document.querySelectorAll('.sampled').length,
  visible: document.body.offsetHeight,
})"""


def _run_dir(tmp_path: Path, name: str) -> Path:
    """CI sets ENVHUB_CI_ARTIFACTS: the run, its report and the screenshot are kept there."""
    artifacts = os.environ.get("ENVHUB_CI_ARTIFACTS")
    run = Path(artifacts) / name if artifacts else tmp_path / "run"
    if run.exists():
        shutil.rmtree(run)
    return run


@pytest.mark.slow
def test_report_renders_in_chromium(tmp_path):
    require_backend("bwrap")
    run = _run_dir(tmp_path, "report-run")
    result = mixed_rollout(run)
    assert result.report["by_class"]["infra_failure"] > 0 and result.report["by_outcome"]["success"] > 0
    files = write_report(run)
    page = load_page(files.html.as_uri(), PROBE)
    (run / "report-screenshot.png").write_bytes(page.screenshot)
    assert page.errors() == []
    seen = json.loads(page.value)
    assert len(seen["images"]) == len(files.plots) >= 5
    for img in seen["images"]:
        assert img["complete"] and img["width"] > 0, img
        assert img["src"] == "data:image/png;base64,"
    # Model-written text is shown as text: no script, frame or style of its own, page still visible.
    assert seen["scripts"] == 0 and seen["iframes"] == 0 and seen["hostileShown"] and seen["visible"] > 1000
    assert seen["attempted"] == "16" and int(seen["infra"]) == result.report["by_class"]["infra_failure"]
    assert float(seen["strict"]) == pytest.approx(result.report["strict_success_rate"], abs=1e-3)
    assert seen["links"] and set(seen["links"]) <= {f"#{a}" for a in seen["anchors"]}
    assert seen["sampled"] > 0
    assert page.screenshot.startswith(b"\x89PNG") and (run / "report-screenshot.png").stat().st_size > 10_000


def test_the_check_sees_injection_and_broken_images(tmp_path):
    """The same check fails a page that shows the hostile text unescaped or has a broken image."""
    page_file = tmp_path / "bad.html"
    page_file.write_text(f"<!DOCTYPE html><html><body><pre>{HOSTILE}</pre><img id=b src='data:image/png;base64,AAAA'>"
                         "</body></html>")
    page = load_page(page_file.as_uri(), PROBE.replace("document.getElementById('strict-success').textContent", "0")
                     .replace("document.getElementById('n-attempted').textContent", "0")
                     .replace("document.getElementById('n-infra-failures').textContent", "0"))
    seen = json.loads(page.value)
    assert any("injected script ran" in e for e in page.errors())
    assert seen["scripts"] == 1 and not all(i["width"] > 0 for i in seen["images"])


TRAINING_PROBE = """JSON.stringify({
  images: [...document.images].map(i => ({id: i.id, complete: i.complete, width: i.naturalWidth,
                                           src: i.src.slice(0, 22)})),
  scripts: document.scripts.length,
  text: Object.fromEntries(['train-n-attempted', 'train-n-infra-failures', 'train-strict-success',
                            'final-n-attempted', 'final-strict-success', 'eval-0-strict', 'eval-2-strict']
                           .map(id => [id, document.getElementById(id).textContent])),
  links: [...document.querySelectorAll('a')].map(a => a.getAttribute('href')),
  ids: [...document.querySelectorAll('[id]')].map(e => e.id),
  transcripts: document.querySelectorAll('#final-failures section.episode').length,
  visible: document.body.offsetHeight,
})"""


@pytest.mark.slow
@pytest.mark.usefixtures("one_torch_thread")
def test_training_report_renders_in_chromium(tmp_path):
    run = _run_dir(tmp_path, "report-training-run")
    tiny_training_run(run)
    for weights in ("checkpoints", "final"):  # the weights are not the artifact; the report and its inputs are
        shutil.rmtree(run / weights)
    files = write_report(run)
    page = load_page(files.html.as_uri(), TRAINING_PROBE)
    (run / "report-screenshot.png").write_bytes(page.screenshot)
    assert page.errors() == []
    seen = json.loads(page.value)
    assert len(seen["images"]) == len(files.plots) == 8
    for img in seen["images"]:
        assert img["complete"] and img["width"] > 0, img
        assert img["src"] == "data:image/png;base64,"
    assert seen["scripts"] == 0 and seen["visible"] > 3000
    steps = [json.loads(line) for line in (run / "steps.jsonl").read_text().splitlines()]
    evals = [json.loads(line) for line in (run / "evals.jsonl").read_text().splitlines()]
    final = json.loads((run / "eval" / "final" / "report.json").read_text())
    text = seen["text"]
    assert text["train-n-attempted"] == str(sum(s["attempted"] for s in steps))
    assert int(text["train-n-infra-failures"]) == sum(s["outcomes"]["env_error"] for s in steps) > 0
    assert text["final-n-attempted"] == str(final["attempted"])
    assert float(text["final-strict-success"]) == pytest.approx(final["strict_success_rate"], abs=5e-4)
    assert float(text["eval-0-strict"]) == pytest.approx(evals[0]["strict_success"], abs=5e-4)
    assert float(text["eval-2-strict"]) == pytest.approx(evals[2]["strict_success"], abs=5e-4)
    assert seen["links"] and {h[1:] for h in seen["links"]} <= set(seen["ids"])
    assert seen["transcripts"] > 0
    assert (run / "report-screenshot.png").stat().st_size > 10_000
