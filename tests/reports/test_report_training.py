"""`envhub report` on a real (tiny, trained here) training run: the sections, the plots, and that
every number shown is the one on disk, counted independently from the run's own files."""

import json
import re
import shutil
import subprocess
import sys

import pytest
from report_training_runs import tiny_training_run

from envhub.reports.html import load_run, write_report
from envhub.run_dir import RunFileError as RunDirError
from envhub.store import read_jsonl
from envhub.types import Outcome, OutcomeClass

pytestmark = pytest.mark.usefixtures("one_torch_thread")

PLOTS = {"reward_over_steps", "outcomes_over_steps", "groups_over_steps", "cost_over_steps", "health_over_steps",
         "time_over_steps", "lag_over_steps", "final_eval_outcomes"}
SECTIONS = ("headline", "evals", "reward", "outcomes", "groups", "cost", "health", "time", "lag",
            "final-failures", "config")


@pytest.fixture(scope="module")
def run(tmp_path_factory, one_torch_thread):
    out = tmp_path_factory.mktemp("train-report") / "run"
    tiny_training_run(out)
    return out


def _ids(text: str) -> dict[str, str]:
    """Element id -> its text, for the elements whose content is plain text."""
    return dict(re.findall(r'id="([^"]+)">([^<]*)<', text))


def _lines(path):
    return list(read_jsonl(path))


@pytest.mark.slow
def test_training_report_is_self_contained_with_every_plot(run, tmp_path):
    files = write_report(run, tmp_path / "site" / "train.html")
    text = files.html.read_text(encoding="utf-8")
    assert set(files.plots) == PLOTS
    for name, path in files.plots.items():
        assert path.name == f"train.{name}.png" and path.read_bytes().startswith(b"\x89PNG")
        assert f'id="plot-{name}"' in text
    refs = re.findall(r'(?:src|href)="([^"]*)"', text)
    assert refs and all(r.startswith(("#", "data:image/png;base64,")) for r in refs)
    assert "<script" not in text.lower() and "default-src 'none'" in text
    assert '<meta name="envhub-report-kind" content="training">' in text
    for sid in SECTIONS:
        assert f'<section id="{sid}">' in text
    assert '<section id="async">' not in text  # a sync run: no async section (tests/reports/test_report_async.py)
    anchors = set(re.findall(r'id="([^"]+)"', text))
    assert {r[1:] for r in refs if r.startswith("#")} <= anchors  # no link points nowhere
    assert not list(files.html.parent.glob(".*"))


@pytest.mark.slow
def test_seed_numbers_and_evals_match_the_run_files(run):
    text = write_report(run).html.read_text(encoding="utf-8")
    ids = _ids(text)
    steps = _lines(run / "steps.jsonl")
    evals = _lines(run / "evals.jsonl")
    episodes = [r for d in sorted((run / "rollouts").iterdir()) for f in sorted(d.glob("trajectories*.jsonl"))
                for r in read_jsonl(f)]
    # Training episodes, counted from rollouts/ here and from steps.jsonl by the trainer: the same.
    outcomes = [Outcome(r["outcome"]) for r in episodes]
    successes = outcomes.count(Outcome.SUCCESS)
    infra = sum(o.is_infra for o in outcomes)
    policy = sum(o.outcome_class is OutcomeClass.POLICY_FAILURE for o in outcomes)
    assert len(episodes) == sum(s["attempted"] for s in steps) == 24
    assert infra == sum(s["outcomes"][o.value] for s in steps for o in Outcome if o.is_infra) > 0
    assert successes > 0 and policy > 0
    assert ids["n-steps"] == "3"
    assert ids["train-n-attempted"] == "24" and ids["train-n-successes"] == str(successes)
    assert ids["train-n-infra-failures"] == str(infra) and ids["train-n-policy-failures"] == str(policy)
    assert float(ids["train-strict-success"]) == pytest.approx(successes / 24, abs=1e-3)
    tokens = sum(len(r["prompt_ids"]) + len(r["response_ids"]) for r in episodes)
    calls = sum(r["metrics"]["tool_calls"] for r in episodes)
    seconds = sum(r["metrics"]["wall_seconds"] for r in episodes)
    assert float(ids["train-tokens-per-success"].replace(",", "")) == pytest.approx(tokens / successes, abs=0.05)
    assert float(ids["train-tool-calls-per-success"]) == pytest.approx(calls / successes, abs=0.005)
    assert float(ids["train-seconds-per-success"]) == pytest.approx(seconds / successes, abs=5e-4)
    # Outcome totals over steps: every outcome, the infra ones included.
    for o in Outcome:
        assert ids[f"outcome-total-{o.value}"] == str(sum(s["outcomes"][o.value] for s in steps))
    for name, key in (("rollout", "rollout_s"), ("train", "train_s"), ("weight-sync", "weight_sync_s"),
                      ("verify", "verify_s")):
        assert float(ids[f"time-total-{name}"]) == pytest.approx(sum(s["time"][key] for s in steps), abs=0.006)
    # The eval table is evals.jsonl, row for row; the final eval's seed numbers are its report.json.
    assert [e["tag"] for e in evals] == ["before", "step-000002", "final"]
    for i, e in enumerate(evals):
        assert ids[f"eval-{i}-tag"] == e["tag"] and ids[f"eval-{i}-episodes"] == str(e["episodes"])
        assert float(ids[f"eval-{i}-strict"]) == pytest.approx(e["strict_success"], abs=5e-4)
        assert ids[f"eval-{i}-infra"] == str(json.loads((run / "eval" / e["tag"] / "report.json").read_text())
                                             ["by_class"]["infra_failure"])
    final = json.loads((run / "eval" / "final" / "report.json").read_text())
    assert ids["final-n-attempted"] == str(final["attempted"]) == str(evals[-1]["episodes"])
    assert ids["final-n-infra-failures"] == str(final["by_class"]["infra_failure"]) != "0"
    assert float(ids["final-strict-success"]) == pytest.approx(final["strict_success_rate"], abs=5e-4)
    # Each failing outcome of the final eval has a transcript the failure table links to.
    final_recs = _lines(run / "eval" / "final" / "trajectories.jsonl")
    failing = {r["outcome"] for r in final_recs if r["outcome"] != "success"}
    rendered = re.findall(r'<section class="episode" id="(final-ep-\d+)">\s*<h3>[^&]*&middot; (\w+)', text)
    assert failing and {o for _, o in rendered} == failing
    assert set(re.findall(r'href="#(final-ep-\d+)"', text)) == {a for a, _ in rendered}
    assert "grading service unavailable (test)" in text
    # Health: the KL term and the decoupled mode were on, so each statistic has a column.
    for head in ("kl", "clip fraction", "IS weight mean", "IS capped fraction", "entropy", "grad norm",
                 "mean |engine - trainer|"):
        assert f"<th>{head}</th>" in text


def _copy(run, dest):
    """The run without its weights (checkpoints/, final/) and without a report already rendered in it."""
    def skip(folder, names):
        if folder != str(run):
            return []
        return [n for n in names if n in ("checkpoints", "final") or n.endswith((".html", ".png"))]
    shutil.copytree(run, dest, ignore=skip)
    return dest


@pytest.mark.slow
def test_missing_stats_a_step_in_progress_and_bad_files(run, tmp_path):
    r = _copy(run, tmp_path / "run")
    steps = _lines(r / "steps.jsonl")
    for key in ("kl", "grad_norm", "entropy", "time"):
        steps[0].pop(key, None)
    (r / "steps.jsonl").write_text("".join(json.dumps(s) + "\n" for s in steps))
    pending = r / "rollouts" / "step-000004"
    pending.mkdir()
    shutil.copy(r / "rollouts" / "step-000001" / "trajectories.jsonl", pending / "trajectories.jsonl")
    data = load_run(r)
    assert data.kind == "training" and data.summary["attempted"] == 24  # step 4 is not logged: left out
    assert any("step-000004" in n and "left out" in n for n in data.notes)
    assert data.series("kl")[0] == [s["step"] for s in steps if "kl" in s]
    text = write_report(r).html.read_text(encoding="utf-8")
    time_table = text[text.index('<table class="time">'):]  # step 1 lost its times: dashes, not 0
    assert time_table.index("<tr><td>1</td>" + "<td>&ndash;</td>" * 4 + "</tr>") < time_table.index("</table>")

    shutil.rmtree(r / "rollouts" / "step-000002")
    data = load_run(r)
    assert data.summary["attempted"] == 16 and len(data.steps) == 3
    assert any(n.startswith("steps 2: no rollouts/") for n in data.notes)

    (r / "evals.jsonl").unlink()
    shutil.rmtree(r / "eval")
    data = load_run(r)
    assert data.final_eval is None and data.evals == []
    assert "no evals.jsonl" in write_report(r).html.read_text(encoding="utf-8")

    (r / "steps.jsonl").write_text('{"step": 1}\nnot json\n')
    with pytest.raises(RunDirError, match=r"steps.jsonl:2: not JSON"):
        load_run(r)
    (r / "steps.jsonl").write_text('{"step": "one"}\n')
    with pytest.raises(RunDirError, match="not a step number"):
        load_run(r)
    (r / "config.json").unlink()
    with pytest.raises(RunDirError, match=r"steps\.jsonl and config\.json"):
        load_run(r)


@pytest.mark.slow
def test_cli_renders_a_training_run(run, tmp_path):
    r = _copy(run, tmp_path / "run")
    out = tmp_path / "out" / "t.html"
    cli = subprocess.run([sys.executable, "-m", "envhub.cli", "report", str(r), "--out", str(out)],
                         capture_output=True, text=True)
    assert cli.returncode == 0, cli.stderr
    assert f"wrote {out} and {len(PLOTS)} plots" in cli.stdout
    assert out.is_file() and len(list(out.parent.glob("t.*.png"))) == len(PLOTS)


@pytest.mark.slow
def test_the_report_says_what_was_trained_and_pairs_the_final_eval_with_the_first(run, tmp_path):
    text = write_report(run, tmp_path / "site" / "train.html").html.read_text(encoding="utf-8")
    ids = _ids(text)
    steps = _lines(run / "steps.jsonl")
    assert int(ids["optimizer-steps"]) == sum(s["optimizer_steps"] for s in steps)
    assert int(ids["trained-samples"]) == sum(s["trained_samples"] for s in steps)
    before = {r["episode_id"]: r["outcome"] == "success" for r in _lines(run / "eval" / "before" / "trajectories.jsonl")}
    final = {r["episode_id"]: r["outcome"] == "success" for r in _lines(run / "eval" / "final" / "trajectories.jsonl")}
    assert before.keys() == final.keys()
    assert int(ids["paired-wins"]) == sum(final[e] and not before[e] for e in before)
    assert int(ids["paired-losses"]) == sum(before[e] and not final[e] for e in before)
    evals = _lines(run / "evals.jsonl")
    for i, e in enumerate(evals):
        low, high = e["interval"]
        assert ids[f"eval-{i}-interval"] == f"[{low:.3f}, {high:.3f}]" and low <= e["strict_success"] <= high
    assert '<section id="learning">' in text and '<section id="stages">' in text and "by-kind" in text
