"""Every export format round-trips: export -> read back -> ids, token view, reward, outcome equal.

The run is real: envhub episodes played by the real model policy (SmolLM2 tokenizer, tool-aware
chat template, masks, logprobs) behind a scripted engine, so it holds a success after a failed tool
call, wrong answers, truncations and engine failures (infra).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from token_runs import shared_token_run
from typer.testing import CliRunner

from envhub.adapters.export import (
    FORMATS,
    ROUND_TRIP_FIELDS,
    export_run,
    load_records,
    read_export,
)
from envhub.adapters.export.cli import export_command
from envhub.types import OutcomeClass


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return shared_token_run(tmp_path_factory.getbasetemp())


def _expected(run_dir: Path, *, include_infra: bool, fmt: str = "parquet") -> list[dict]:
    """The records an export holds, in its order: groups contiguous, each in sample order."""
    out = []
    records = load_records(run_dir)
    first = {}
    for i, rec in enumerate(records):
        first.setdefault(rec.group_id, i)
    for rec in sorted(records, key=lambda r: (first[r.group_id], r.sample_index)):
        infra = rec.outcome_class is OutcomeClass.INFRA_FAILURE
        if infra and not (include_infra or FORMATS[fmt].infra_in_place):
            continue
        want = rec.model_dump(mode="json", include=set(ROUND_TRIP_FIELDS))
        if infra and fmt != "parquet":  # a trainer format never trains on our failures
            want["response_mask"] = [0] * len(rec.response_mask)
        out.append(want)
    return out


def test_the_run_has_every_kind_of_record(run_dir: Path) -> None:
    records = load_records(run_dir)
    outcomes = {r.outcome.value for r in records}
    assert {"success", "wrong_answer", "budget_exhausted", "engine_error"} <= outcomes
    for rec in records:
        assert rec.prompt_ids and rec.response_ids
        assert len(rec.response_ids) == len(rec.response_mask) == len(rec.response_logprobs)
    success = next(r for r in records if r.outcome.value == "success")
    assert 0 in success.response_mask and success.response_mask[0] == 1  # observation tokens in the middle


@pytest.mark.parametrize("fmt", sorted(FORMATS))
@pytest.mark.parametrize("include_infra", [False, True])
def test_round_trip(run_dir: Path, tmp_path: Path, fmt: str, include_infra: bool) -> None:
    result = export_run(run_dir, fmt, tmp_path / fmt, include_infra=include_infra)
    expected = _expected(run_dir, include_infra=include_infra, fmt=fmt)
    n_infra = sum(r.outcome_class is OutcomeClass.INFRA_FAILURE for r in load_records(run_dir))
    assert n_infra > 0
    assert result.exported == len(expected)
    assert result.excluded_infra == (0 if include_infra or FORMATS[fmt].infra_in_place else n_infra)
    back = read_export(tmp_path / fmt, fmt)
    assert len(back) == len(expected)
    for got, want in zip(back, expected, strict=True):
        got = {k: got[k] for k in ROUND_TRIP_FIELDS}
        assert got == want
    if (include_infra or FORMATS[fmt].infra_in_place) and fmt != "parquet":
        infra = [g for g in back if g["outcome"] in ("env_error", "verifier_error", "engine_error")]
        assert infra and all(g["response_ids"] and set(g["response_mask"]) == {0} for g in infra)
    manifest = json.loads((tmp_path / fmt / "manifest.json").read_text())
    assert manifest["format"] == fmt and manifest["excluded_infra"] == result.excluded_infra
    # atomic writes leave no temp files behind
    assert not [p for p in (tmp_path / fmt).iterdir() if p.name.startswith(".")]


def test_scripted_records_without_tokens(tmp_path: Path) -> None:
    from envhub.policies import make_policy
    from envhub.rollout.runner import run_rollouts

    run_rollouts("envhub/Computation-v0", make_policy("noop"), out_dir=tmp_path / "run", episodes=2)
    skipped = export_run(tmp_path / "run", "trl", tmp_path / "trl")
    assert skipped.exported == 0 and skipped.skipped_no_tokens == 2
    kept = export_run(tmp_path / "run", "parquet", tmp_path / "pq")
    assert kept.exported == 2
    from envhub.adapters.export.parquet import read_parquet

    assert read_parquet(tmp_path / "pq" / "trajectories.parquet") == load_records(tmp_path / "run")


def test_cli_prints_the_infra_count(run_dir: Path, tmp_path: Path) -> None:
    app = typer.Typer()
    app.command("export")(export_command)
    app.command("noop")(lambda: None)  # two commands, so typer keeps the sub-command name
    runner = CliRunner()
    out = tmp_path / "trl"
    res = runner.invoke(app, ["export", str(run_dir), "--format", "trl", "--out", str(out)])
    assert res.exit_code == 0, res.output
    n_infra = sum(r.outcome_class is OutcomeClass.INFRA_FAILURE for r in load_records(run_dir))
    assert f"excluded {n_infra} infra-failure" in res.output
    assert (out / "trl.parquet").is_file()
    res = runner.invoke(app, ["export", str(run_dir), "--format", "trl", "--out", str(out), "--include-infra"])
    assert res.exit_code == 0 and "excluded 0 infra-failure" in res.output
    res = runner.invoke(app, ["export", str(run_dir), "--format", "slime", "--out", str(tmp_path / "slime")])
    assert res.exit_code == 0 and "excluded 0 infra-failure" in res.output  # kept in place, as remove_sample
    res = runner.invoke(app, ["export", str(run_dir), "--format", "nope"])
    assert res.exit_code == 2 and "unknown format" in res.output
    res = runner.invoke(app, ["export", str(tmp_path / "missing"), "--format", "trl"])
    assert res.exit_code == 2 and "no trajectories" in res.output


def test_default_out_is_inside_the_run(run_dir: Path) -> None:
    result = export_run(run_dir, "trl")
    assert result.out == run_dir / "export-trl" and (result.out / "trl.parquet").is_file()


def test_inconsistent_token_view_is_refused(run_dir: Path, tmp_path: Path) -> None:
    rows = [json.loads(line) for line in (run_dir / "trajectories.jsonl").read_text().splitlines()]
    rows[0]["response_mask"] = rows[0]["response_mask"][:-1]
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "trajectories.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(ValueError, match="differ in length"):
        export_run(tmp_path / "bad", "verl", tmp_path / "out", include_infra=True)
