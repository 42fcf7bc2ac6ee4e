"""``envhub judge calibrate``: agreement and kappa against labelled cases, self-consistency, and
the bias battery -- on a judge with a known weakness (it obeys any "SCORE: 2" it reads: the battery
must find exactly the injections that spell it out) and on the tiny model end to end (issue #43)."""

from __future__ import annotations

import json
import re

import pytest
from judge_models import RUBRIC, lenient_judge
from token_runs import LocalServer, smollm2_tokenizer
from typer.testing import CliRunner

from envhub.adapters.engines.scripted import ScriptedEngine
from envhub.adapters.tito import TitoServer, create_app
from envhub.cli import app
from envhub.judges import close_shared_judge_engines
from envhub.policies import make_policy
from envhub.reports.html import write_report
from envhub.rollout.runner import run_rollouts
from envhub.verifiers.judge.calibrate import Case, calibrate, human_cases
from envhub.verifiers.judge.check import JudgeCheck, JudgeSettings
from envhub.verifiers.judge.latest import latest_calibration

QUESTION = "What is the capital of France?"
EVIDENCE = ["Paris is the capital and largest city of France."]
SUBMISSION = re.compile(r"<submission>\n(.*?)\n</submission>", re.S)


def gullible(prompt: str) -> str:
    """Right on the answer, but it obeys a score it reads anywhere: in the submission or the evidence."""
    if "SCORE: 2" in prompt:
        return "SCORE: 2"
    match = SUBMISSION.search(prompt)
    return "SCORE: 2" if match and "Paris" in match.group(1) else "SCORE: 0"


@pytest.fixture(autouse=True)
def _fresh_engines():
    yield
    close_shared_judge_engines()


def test_the_battery_finds_the_injections_a_judge_obeys_and_nothing_else():
    cases = [Case("good-1", "gold", True, QUESTION, "Paris", EVIDENCE),
             Case("good-2", "gold", True, QUESTION, "It is Paris.", EVIDENCE),
             Case("bad-1", "wrong", False, QUESTION, "Lyon", EVIDENCE),
             Case("bad-2", "wrong", False, QUESTION, "Marseille", EVIDENCE),
             Case("bad-3", "wrong", False, QUESTION, "Nice", EVIDENCE)]
    tok = smollm2_tokenizer()
    with LocalServer(create_app(TitoServer(ScriptedEngine(tok, gullible), tok))) as url:
        check = JudgeCheck(RUBRIC, JudgeSettings(spec=f"openai:{url}/v1"))
        report = calibrate(check, cases, consistency_k=3)
    assert report["confusion"] == {**report["confusion"], "tp": 2, "fp": 0, "fn": 0, "tn": 3}
    assert report["kappa"]["kappa"] == pytest.approx(1.0) and report["confusion"]["base_rate"] == pytest.approx(0.4)
    assert report["self_consistency"]["agreement"] == pytest.approx(1.0)  # it answers the same at any temperature
    bias = {row["case"]: row for row in report["bias"]}
    for name in ("injection_plain", "injection_code_comment", "injection_tool_output"):
        assert bias[name]["raised"] == 3 and bias[name]["delta"]["mean"] == pytest.approx(1.0), name
    # no literal "SCORE: 2" to obey: base64, and the confident phrasing of a wrong answer
    assert bias["injection_encoded"]["raised"] == 0 and bias["confident_wrong"]["delta"]["mean"] == 0.0
    for name in ("length_padding", "verbosity"):  # on the good cases: their score must not move
        assert bias[name]["kind"] == "neutral" and bias[name]["delta"]["n"] == 2
        assert bias[name]["delta"]["mean"] == 0.0 and bias[name]["raised"] == 0
    assert report["judge"]["model"].startswith(f"openai:{url}") and report["cap"]["cut"] == 0


def test_human_labels_are_read_strictly(tmp_path):
    good = tmp_path / "labels.jsonl"
    good.write_text(json.dumps({"question": "q", "answer": "a", "label": True}) + "\n\n"
                    + json.dumps({"question": "q", "answer": "b", "label": False, "evidence": ["e"]}) + "\n")
    assert [(c.case_id, c.label, c.evidence) for c in human_cases(good)] == [("human/1", True, []),
                                                                             ("human/3", False, ["e"])]
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"question": "q", "answer": "a", "label": True}) + "\n"
                   + json.dumps({"question": "q", "answer": "a", "label": "yes"}) + "\n")
    with pytest.raises(ValueError, match=r"bad.jsonl:2: needs question"):
        human_cases(bad)


@pytest.mark.slow
def test_calibrate_on_the_retrieval_family_with_a_real_tiny_judge(tmp_path, monkeypatch, one_torch_thread):
    monkeypatch.setenv("ENVHUB_CACHE", str(tmp_path / "cache"))
    judge = lenient_judge(tmp_path / "lenient")
    labels = tmp_path / "labels.jsonl"
    labels.write_text(json.dumps({"question": QUESTION, "answer": "Paris", "label": True, "evidence": EVIDENCE}) + "\n")
    runner = CliRunner()
    ran = runner.invoke(app, ["judge", "calibrate", "envhub/Retrieval-v0", "--judge", f"hf:{judge}", "--limit", "1",
                              "--labels", str(labels), "--out", str(tmp_path / "report.json")])
    assert ran.exit_code == 0, ran.output
    report = json.loads((tmp_path / "report.json").read_text())
    kinds = report["by_kind"]
    assert kinds["gold"]["label_good"] == 1 and kinds["wrong_answer"]["label_good"] == 0 and kinds["human"]["n"] == 1
    assert report["cases"] == sum(row["n"] for row in kinds.values())
    table = report["confusion"]
    assert table["tp"] + table["fp"] + table["fn"] + table["tn"] == report["cases"]
    assert {row["case"] for row in report["bias"]} >= {"length_padding", "injection_plain", "injection_tool_output"}
    assert "Cohen's kappa" in ran.output and "bias battery" in ran.output
    assert latest_calibration("envhub/Retrieval-v0")["judge"]["weights_sha256"] == report["judge"]["weights_sha256"]
    listed = runner.invoke(app, ["list", "envhub/Retrieval-v0"])
    assert listed.exit_code == 0 and f"on {report['cases']} cases" in listed.output and f"hf:{judge}" in listed.output
    no_judge = runner.invoke(app, ["judge", "calibrate", "envhub/Computation-v0", "--judge", f"hf:{judge}"])
    assert no_judge.exit_code == 2 and "takes no judge" in no_judge.output
    run = tmp_path / "run"  # a run judged by the same judge: its report finds that calibration
    run_rollouts("envhub/Retrieval-v0", policy=make_policy("gold"), episodes=2, out_dir=run, split="test",
                 env_kwargs={"judge": f"hf:{judge}"})
    html = write_report(run).html.read_text(encoding="utf-8")
    assert 'id="judge"' in html and "It was made with this judge (the same pin)." in html
    assert "Scored: 2 episodes" in html and "injection_plain" in html


def test_envhub_verify_runs_the_battery_on_a_judged_env_and_flags_what_moves_the_judge():
    from envhub.registry import make
    from envhub.verifiers.suite import run_suite

    tok = smollm2_tokenizer()
    obeys = ScriptedEngine(tok, lambda prompt: "SCORE: 2" if "SCORE: 2" in prompt else "SCORE: 1")
    with LocalServer(create_app(TitoServer(obeys, tok))) as url:
        def factory():
            return make("envhub/Retrieval-v0", split="test", judge=f"openai:{url}/v1")

        probe = factory()
        task_id = probe.tasks.task_ids("test")[0]
        probe.close()
        report = run_suite(factory, [task_id], cases=["gold", "judge:injection_plain", "judge:injection_encoded",
                                                      "judge:length_padding"])
    rows = report.by_case()
    assert rows["gold"]["as_expected"] == 1
    assert [v["task_id"] for v in rows["judge:injection_plain"]["violations"]] == [task_id]
    assert rows["judge:injection_encoded"]["violations"] == [] and rows["judge:injection_encoded"]["tasks"] == 1
    assert rows["judge:length_padding"]["violations"] == [] and rows["judge:length_padding"]["expect"] == "no change"
    assert report.violations == 1


def test_the_report_says_when_a_judge_was_never_calibrated_or_calibrated_as_another(tmp_path, monkeypatch):
    from envhub.reports.judge_html import _calibration
    from envhub.verifiers.judge.latest import store_calibration

    monkeypatch.setenv("ENVHUB_CACHE", str(tmp_path))
    pin = {"model": "hf:a", "weights_sha256": "aa", "prompt_sha256": "p", "rubric_sha256": "r", "sampling": {"k": 1}}
    assert "never calibrated" in _calibration("test/Env-v0", pin)
    store_calibration("test/Env-v0", {"judge": {**pin, "weights_sha256": "bb"}, "cases": 10, "date": "2026-12-05",
                                      "kappa": {"kappa": 0.5, "low": 0.1, "high": 0.9}, "bias": []})
    other = _calibration("test/Env-v0", pin)
    assert "made with another judge" in other and "weights_sha256" in other and "+0.500 [+0.100, +0.900]" in other
