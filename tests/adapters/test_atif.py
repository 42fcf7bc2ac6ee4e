"""ATIF out and in: `envhub export --format atif`, `envhub import atif`, and the round trip between them.

The runs are model-driven: the real model policy (SmolLM2 tokenizer, tool-aware template, masks,
logprobs) behind a scripted engine, on envhub/Computation-v0 with the process sandbox. Every file
written is checked against ATIF v1.8 as documented by Harbor's models (``ATIF_SPEC`` below, restated
from ``harbor/models/trajectories/*.py`` of the PyPI release harbor 0.26.0, which needs Python 3.12
and so is not installed), and by Harbor's own pydantic models and validator: its wheel is
downloaded once from the index and put on the path (only where the index cannot be reached do they
not run).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
import subprocess
import sys
import zipfile
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from token_runs import shared_token_run, smollm2_tokenizer
from typer.testing import CliRunner

from envhub.adapters.audit import audit_run, check_record
from envhub.adapters.engines.scripted import ScriptedEngine
from envhub.adapters.engines.tiny import build_tiny_model
from envhub.adapters.export import ROUND_TRIP_FIELDS, export_run, load_records, read_export
from envhub.adapters.export.atif import ATIF_VERSION, to_atif
from envhub.adapters.import_atif import AtifError, from_atif, import_atif, read_trajectory
from envhub.cli.commands import app
from envhub.policies import make_policy
from envhub.registry import make
from envhub.rollout.runner import plan_episodes, run_rollouts
from envhub.types import Outcome, OutcomeClass

ENV = "envhub/Computation-v0"
ENV_KW = {"sandbox": "process", "kinds": ["fraction"], "levels": [1]}

pytestmark = pytest.mark.usefixtures("one_torch_thread")


# ---- ATIF v1.8 as documented by Harbor's models: field -> (types, required) -------------------------

STR, INT, NUM, BOOL, OBJ, ARR = (str,), (int,), (int, float), (bool,), (dict,), (list,)
ATIF_SPEC: dict[str, dict[str, tuple[tuple[type, ...], bool]]] = {
    "trajectory": {"schema_version": (STR, True), "session_id": (STR, False), "trajectory_id": (STR, False),
                   "agent": (OBJ, True), "steps": (ARR, True), "notes": (STR, False), "final_metrics": (OBJ, False),
                   "continued_trajectory_ref": (STR, False), "extra": (OBJ, False),
                   "subagent_trajectories": (ARR, False)},
    "agent": {"name": (STR, True), "version": (STR, True), "model_name": (STR, False),
              "tool_definitions": (ARR, False), "extra": (OBJ, False)},
    "step": {"step_id": (INT, True), "timestamp": (STR, False), "source": (STR, True), "model_name": (STR, False),
             "reasoning_effort": ((str, int, float), False), "message": ((str, list), True),
             "reasoning_content": (STR, False), "tool_calls": (ARR, False), "observation": (OBJ, False),
             "metrics": (OBJ, False), "is_copied_context": (BOOL, False), "llm_call_count": (INT, False),
             "extra": (OBJ, False)},
    "tool_call": {"tool_call_id": (STR, True), "function_name": (STR, True), "arguments": (OBJ, True),
                  "extra": (OBJ, False)},
    "observation": {"results": (ARR, True)},
    "result": {"source_call_id": (STR, False), "content": ((str, list), False),
               "subagent_trajectory_ref": (ARR, False), "extra": (OBJ, False)},
    "metrics": {"prompt_tokens": (INT, False), "completion_tokens": (INT, False), "cached_tokens": (INT, False),
                "cost_usd": (NUM, False), "prompt_token_ids": (ARR, False), "completion_token_ids": (ARR, False),
                "logprobs": (ARR, False), "extra": (OBJ, False)},
    "final_metrics": {"total_prompt_tokens": (INT, False), "total_completion_tokens": (INT, False),
                      "total_cached_tokens": (INT, False), "total_cost_usd": (NUM, False),
                      "total_steps": (INT, False), "extra": (OBJ, False)},
}
VERSIONS = {f"ATIF-v1.{i}" for i in range(9)}
AGENT_ONLY = ("model_name", "reasoning_effort", "reasoning_content", "tool_calls", "metrics")


def _fields(kind: str, obj: Any, where: str) -> list[str]:
    """Unknown fields (every ATIF model forbids extras), missing required ones, wrong types (null is
    "absent" for an optional field; bool is not an int)."""
    if not isinstance(obj, dict):
        return [f"{where}: not an object"]
    spec = ATIF_SPEC[kind]
    errors = [f"{where}.{k}: unknown field" for k in obj if k not in spec]
    for name, (types, required) in spec.items():
        if obj.get(name) is None:
            if required:
                errors.append(f"{where}.{name}: required")
        elif not isinstance(obj[name], types) or (isinstance(obj[name], bool) and bool not in types):
            errors.append(f"{where}.{name}: {type(obj[name]).__name__} is not {'/'.join(t.__name__ for t in types)}")
    return errors


def atif_errors(doc: Any) -> list[str]:
    """Every way ``doc`` breaks the documented ATIF v1.8 (empty when it conforms)."""
    errors = _fields("trajectory", doc, "trajectory")
    if errors:
        return errors
    if doc["schema_version"] not in VERSIONS:
        errors.append(f"schema_version {doc['schema_version']!r}")
    errors += _fields("agent", doc["agent"], "agent")
    if not doc["steps"]:
        errors.append("steps: at least one")
    if doc.get("final_metrics") is not None:
        errors += _fields("final_metrics", doc["final_metrics"], "final_metrics")
        if (doc["final_metrics"].get("total_steps") or 0) < 0:
            errors.append("final_metrics.total_steps < 0")
    for i, step in enumerate(doc["steps"]):
        at = f"steps[{i}]"
        found = _fields("step", step, at)
        errors += found
        if found:
            continue
        if step["step_id"] != i + 1:
            errors.append(f"{at}.step_id {step['step_id']} (sequential from 1)")
        if step["source"] not in ("system", "user", "agent"):
            errors.append(f"{at}.source {step['source']!r}")
        if step["source"] != "agent":
            errors += [f"{at}.{f}: agent steps only" for f in AGENT_ONLY if step.get(f) is not None]
        if step.get("timestamp") is not None:
            datetime.fromisoformat(step["timestamp"].replace("Z", "+00:00"))
        calls = step.get("tool_calls") or []
        for j, call in enumerate(calls):
            errors += _fields("tool_call", call, f"{at}.tool_calls[{j}]")
        ids = {c.get("tool_call_id") for c in calls if isinstance(c, dict)}
        if step.get("observation") is not None:
            found = _fields("observation", step["observation"], f"{at}.observation")
            errors += found
            for j, result in enumerate([] if found else step["observation"]["results"]):
                errors += _fields("result", result, f"{at}.observation.results[{j}]")
                source = result.get("source_call_id") if isinstance(result, dict) else None
                if source is not None and source not in ids:
                    errors.append(f"{at}.observation.results[{j}].source_call_id {source!r}: no such tool call")
        if step.get("metrics") is not None:
            metrics = step["metrics"]
            errors += _fields("metrics", metrics, f"{at}.metrics")
            for name, kind in (("prompt_token_ids", int), ("completion_token_ids", int), ("logprobs", (int, float))):
                values = metrics.get(name) or []
                if not all(isinstance(v, kind) and not isinstance(v, bool) for v in values):
                    errors.append(f"{at}.metrics.{name}: not all {kind}")
    return errors


HARBOR = "harbor==0.26.0"


@functools.cache
def _harbor_on_path() -> bool:
    """Harbor's wheel, downloaded once from the index (it cannot be installed: Python 3.12) and put on
    ``sys.path``: its trajectory models and validator import with pydantic alone."""
    cache = Path(os.environ.get("ENVHUB_CACHE") or Path.home() / ".cache" / "envhub") / "harbor-0.26.0"
    if not (cache / "harbor").is_dir():
        wheels = cache.with_name(cache.name + ".wheel")
        got = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                              "--python-version", "3.12", "-d", str(wheels), HARBOR], capture_output=True, timeout=300)
        found = sorted(wheels.glob("harbor-*.whl")) if got.returncode == 0 else []
        if not found:
            return False
        staging = cache.with_name(cache.name + ".staging")
        shutil.rmtree(staging, ignore_errors=True)
        with zipfile.ZipFile(found[0]) as wheel:
            wheel.extractall(staging)
        staging.rename(cache)
    if str(cache) not in sys.path:
        sys.path.append(str(cache))
    return True


def harbor_check(doc: Path | dict[str, Any]) -> bool:
    """Harbor's own models and validator (its wheel, see :func:`_harbor_on_path`); whether they ran
    (not where the index cannot be reached)."""
    _harbor_on_path()
    try:
        from harbor.models.trajectories import Trajectory
        from harbor.utils.trajectory_validator import TrajectoryValidator
    except ImportError:
        return False
    Trajectory.model_validate(json.loads(doc.read_text()) if isinstance(doc, Path) else doc)
    validator = TrajectoryValidator()
    assert validator.validate(doc), validator.errors
    return True


# ---- runs ----------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tool_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The gold actions, sampled as real tokens: python tool call, its reply (masked), answer -> success."""
    tokenizer = smollm2_tokenizer()
    env = make(ENV, **ENV_KW)
    script = {}
    for plan in plan_episodes(ENV, env.tasks.task_ids("train"), episodes=2, seed=0):
        task = env.tasks.get(plan.task_id)
        script[task.prompt] = [a.text for a in env.gold_actions(task)]
    env.close()

    def respond(prompt: str) -> str:
        turn = prompt.count("<|im_start|>assistant\n") - 1
        return next(texts[turn] for task, texts in script.items() if task in prompt)

    policy = make_policy(f"hf:{build_tiny_model()}", engine=ScriptedEngine(tokenizer, respond), max_new_tokens=512)
    out = tmp_path_factory.mktemp("atif") / "tool-run"
    report = run_rollouts(ENV, policy, out_dir=out, episodes=2, concurrency=1, env_kwargs=ENV_KW).report
    assert report["by_outcome"]["success"] == 2, report["by_outcome"]
    return out


@pytest.fixture(scope="module")
def mixed_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Success after a failed tool call, wrong answer, truncation, engine failure (infra)."""
    return shared_token_run(tmp_path_factory.getbasetemp())


def _round_trip(run: Path, tmp_path: Path, *, include_infra: bool = True) -> tuple[list, list, Path]:
    export = tmp_path / "atif"
    result = export_run(run, "atif", export, include_infra=include_infra)
    assert result.exported > 0
    for path in result.files[:-1]:  # the last one is manifest.json
        doc = json.loads(path.read_text())
        assert doc["schema_version"] == ATIF_VERSION
        assert atif_errors(doc) == [], path.name
        harbor_check(path)
    imported = tmp_path / "imported"
    import_atif(export, imported)
    return load_records(run), load_records(imported), export


def test_model_driven_run_round_trips_exactly(tool_run: Path, tmp_path: Path) -> None:
    original, back, export = _round_trip(tool_run, tmp_path)
    by_id = {r.episode_id: r for r in original}
    assert sorted(by_id) == sorted(r.episode_id for r in back)
    for rec in back:
        want = by_id[rec.episode_id]
        for name in type(want).model_fields:  # field by field, so a failure names the field
            assert getattr(rec, name) == getattr(want, name), name
        assert rec.turns[0].observation_ids and rec.turns[0].token_ids  # tokens in the middle, masked
        assert 0 in rec.response_mask and rec.response_mask[0] == 1
    # what a consumer of the file sees: ATIF's own fields carry every sampled token and its context
    rec = original[0]
    doc = json.loads((export / f"{rec.episode_id}.json").read_text())
    agent_steps = [s for s in doc["steps"] if s["source"] == "agent"]
    assert [s["source"] for s in doc["steps"][:2]] == ["system", "user"] and len(agent_steps) == len(rec.turns)
    context = list(rec.prompt_ids)
    for step, turn in zip(agent_steps, rec.turns, strict=True):
        assert step["metrics"]["prompt_token_ids"] == context
        assert step["metrics"]["completion_token_ids"] == turn.token_ids
        assert step["metrics"]["logprobs"] == turn.logprobs
        assert step["message"] == turn.action_text
        assert [c["function_name"] for c in step.get("tool_calls", [])] == [c.name for c in turn.tool_calls]
        context += turn.token_ids + turn.observation_ids
    assert doc["final_metrics"]["extra"]["outcome"] == "success" and doc["final_metrics"]["extra"]["reward"] == 1.0
    assert doc["extra"]["envhub"]["env_id"] == ENV and doc["extra"]["envhub"]["task_id"] == rec.task_id
    assert "messages" not in doc["extra"]["envhub"] and "token_view" not in doc["extra"]["envhub"]
    audit = audit_run(tmp_path / "imported")
    assert audit["errors"] == 0 and audit["with_tokens"] == len(back), audit["issues"]


def test_every_kind_of_record_round_trips(mixed_run: Path, tmp_path: Path) -> None:
    original, back, _ = _round_trip(mixed_run, tmp_path, include_infra=True)
    assert {r.outcome for r in original} >= {Outcome.SUCCESS, Outcome.WRONG_ANSWER, Outcome.ENGINE_ERROR}
    assert sorted(r.model_dump_json() for r in back) == sorted(r.model_dump_json() for r in original)
    assert audit_run(tmp_path / "imported")["errors"] == audit_run(mixed_run)["errors"] == 0


@pytest.mark.parametrize("include_infra", [False, True])
def test_read_export_gives_the_trainer_view(mixed_run: Path, tmp_path: Path, include_infra: bool) -> None:
    """The contract of every token format (tests/adapters/test_export_roundtrip.py): export order,
    groups whole and in sample order, infra failures out by default and masked when kept."""
    export_run(mixed_run, "atif", tmp_path, include_infra=include_infra)
    records = load_records(mixed_run)
    first: dict[str, int] = {}
    for i, rec in enumerate(records):
        first.setdefault(rec.group_id, i)
    want = []
    for rec in sorted(records, key=lambda r: (first[r.group_id], r.sample_index)):
        infra = rec.outcome_class is OutcomeClass.INFRA_FAILURE
        if infra and not include_infra:
            continue
        row = rec.model_dump(mode="json", include=set(ROUND_TRIP_FIELDS))
        if infra:
            row["response_mask"] = [0] * len(rec.response_mask)
        want.append(row)
    assert read_export(tmp_path, "atif") == want
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # atomic writes leave no temp file


def test_scripted_records_without_tokens_round_trip(tmp_path: Path) -> None:
    run_rollouts(ENV, make_policy("gold"), out_dir=tmp_path / "run", episodes=2, env_kwargs=ENV_KW)
    original, back, export = _round_trip(tmp_path / "run", tmp_path)
    assert back == original and not any(r.prompt_ids for r in back)
    doc = json.loads(next(p for p in export.glob("*-*.json")).read_text())
    assert not any("completion_token_ids" in (s.get("metrics") or {}) for s in doc["steps"])


def test_records_that_the_turns_do_not_tell_keep_their_own_copy(tool_run: Path) -> None:
    rec = load_records(tool_run)[0]
    odd = rec.model_copy(update={
        "messages": [*rec.messages, rec.messages[1]],
        "response_logprobs": [lp - 1.0 if m else lp for lp, m in zip(rec.response_logprobs, rec.response_mask,
                                                                         strict=True)]})
    doc = to_atif(odd)
    assert "messages" in doc["extra"]["envhub"] and "token_view" in doc["extra"]["envhub"]
    assert atif_errors(doc) == []
    harbor_check(doc)
    assert from_atif(doc).record == odd


def test_contradictory_token_ids_are_refused(tool_run: Path) -> None:
    doc = to_atif(load_records(tool_run)[0])
    last = [s for s in doc["steps"] if s["source"] == "agent"][-1]
    last["metrics"]["prompt_token_ids"] = last["metrics"]["prompt_token_ids"][:-1]
    with pytest.raises(AtifError, match="prompt_token_ids"):
        from_atif(doc)


# ---- foreign trajectories --------------------------------------------------------------------------

def foreign(tokens: bool = False) -> dict[str, Any]:
    """A small trajectory in the shape Harbor's Terminus-2 writes (v1.4 is enough for this one)."""
    agent_1: dict[str, Any] = {
        "step_id": 2, "timestamp": "2025-11-01T12:00:01Z", "source": "agent", "model_name": "m",
        "message": "Let me look.", "reasoning_content": "thinking",
        "tool_calls": [{"tool_call_id": "c1", "function_name": "bash", "arguments": {"cmd": "ls"}}],
        "observation": {"results": [{"source_call_id": "c1", "content": "a.txt"}]},
        "metrics": {"prompt_tokens": 3, "completion_tokens": 2, "cost_usd": 0.001}}
    agent_2: dict[str, Any] = {"step_id": 3, "source": "agent", "message": [{"type": "text", "text": "Done."}],
                               "metrics": {"prompt_tokens": 7, "completion_tokens": 1}}
    if tokens:
        agent_1["metrics"].update(prompt_token_ids=[1, 2, 3], completion_token_ids=[4, 5], logprobs=[-0.1, -0.2])
        agent_2["metrics"].update(prompt_token_ids=[1, 2, 3, 4, 5, 6, 7], completion_token_ids=[8], logprobs=[-0.3])
    return {"schema_version": "ATIF-v1.4", "session_id": "trial-7",
            "agent": {"name": "terminus-2", "version": "2.0", "model_name": "m",
                      "tool_definitions": [{"type": "function", "function": {
                          "name": "bash", "description": "Run bash.", "parameters": {"type": "object"}}}]},
            "steps": [{"step_id": 1, "source": "user", "message": "List the files."}, agent_1, agent_2],
            "final_metrics": {"total_prompt_tokens": 10, "total_completion_tokens": 3, "total_steps": 3}}


def test_a_foreign_trajectory_without_tokens_imports_with_empty_token_fields(tmp_path: Path) -> None:
    doc = foreign()
    assert atif_errors(doc) == [] and atif_errors(foreign(tokens=True)) == []
    harbor_check(doc)
    harbor_check(foreign(tokens=True))
    (tmp_path / "trajectory.json").write_text(json.dumps(doc))
    runner = CliRunner()
    res = runner.invoke(app, ["import", "atif", str(tmp_path / "trajectory.json"), "--out", str(tmp_path / "run"),
                              "--env-id", ENV, "--task-id", "comp-fraction-L1-155"])
    assert res.exit_code == 0, res.output
    assert "1 foreign" in res.output and "without token ids" in res.output
    (rec,) = load_records(tmp_path / "run")
    assert (rec.prompt_ids, rec.response_ids, rec.response_mask, rec.response_logprobs) == ([], [], [], [])
    assert all(not t.token_ids and not t.logprobs and not t.observation_ids for t in rec.turns)
    assert rec.outcome is Outcome.VERIFIER_ERROR and rec.reward == 0.0  # not graded: never trained on
    assert "not graded" in rec.outcome_detail and "no token ids" in rec.outcome_detail
    assert "dropped reasoning_content" in rec.outcome_detail
    assert (rec.env_id, rec.task_id, rec.episode_id) == (ENV, "comp-fraction-L1-155", "trial-7")
    assert [(m.role, m.content) for m in rec.messages] == [
        ("user", "List the files."), ("assistant", "Let me look."), ("tool", "a.txt"), ("assistant", "Done.")]
    assert rec.turns[0].tool_calls[0].model_dump() == {"name": "bash", "arguments": {"cmd": "ls"}, "id": "c1"}
    assert rec.turns[0].observation[0].tool_call_id == "c1" and rec.turns[0].observation[0].name == "bash"
    assert [t.name for t in rec.tools] == ["bash"]
    audit = audit_run(tmp_path / "run")
    assert audit["trajectories"] == 1 and audit["with_tokens"] == 0 and audit["errors"] == 0


def test_a_foreign_trajectory_with_token_ids_gets_its_token_view() -> None:
    item = from_atif(foreign(tokens=True), source="trajectory.json")
    rec = item.record
    assert rec.prompt_ids == [1, 2, 3]
    assert rec.turns[0].observation_ids == [6, 7]  # the next prompt minus the history: the env's reply
    assert rec.response_ids == [4, 5, 6, 7, 8] and rec.response_mask == [1, 1, 0, 0, 1]
    assert rec.response_logprobs == [-0.1, -0.2, 0.0, 0.0, -0.3]
    assert [i.check for i in check_record(rec, None)] == ["tokenizer"]  # faithful; only no tokenizer named
    no_logprobs = foreign(tokens=True)
    del no_logprobs["steps"][2]["metrics"]["logprobs"]
    item = from_atif(no_logprobs)
    assert not item.record.response_ids and any("no logprobs" in n for n in item.notes)


def test_import_errors(tmp_path: Path, tool_run: Path) -> None:
    export_run(tool_run, "atif", tmp_path / "atif")
    assert import_atif(tmp_path / "atif", tmp_path / "run").skipped == []  # manifest.json is not read as one
    with pytest.raises(FileExistsError):
        import_atif(tmp_path / "atif", tmp_path / "run")
    (tmp_path / "bad.json").write_text(json.dumps({"schema_version": "ATIF-v9", "steps": []}))
    runner = CliRunner()
    res = runner.invoke(app, ["import", "atif", str(tmp_path / "bad.json"), "--out", str(tmp_path / "x")])
    assert res.exit_code == 2 and "not an ATIF trajectory" in res.output
    with pytest.raises(AtifError, match="step_id"):
        from_atif({**foreign(), "steps": [{**foreign()["steps"][0], "step_id": 2}]})
    with pytest.raises(AtifError, match="cannot read"):
        read_trajectory(tmp_path / "missing.json")


def test_the_cli_exports_and_imports(tool_run: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    res = runner.invoke(app, ["export", str(tool_run), "--format", "atif", "--out", str(tmp_path / "atif")])
    assert res.exit_code == 0 and "as atif" in res.output, res.output
    res = runner.invoke(app, ["import", "atif", str(tmp_path / "atif"), "--out", str(tmp_path / "back")])
    assert res.exit_code == 0 and "2 written by envhub" in res.output, res.output
    assert load_records(tmp_path / "back") == load_records(tool_run)


@pytest.mark.parametrize("breakage", ["unknown_field", "agent_only", "dangling_call", "step_order", "no_agent"])
def test_the_spec_check_rejects_what_atif_forbids(breakage: str) -> None:
    doc = foreign(tokens=True)
    if breakage == "unknown_field":
        doc["steps"][1]["metrics"]["token_ids"] = [1]
    elif breakage == "agent_only":
        doc["steps"][0]["metrics"] = {"prompt_tokens": 1}
    elif breakage == "dangling_call":
        doc["steps"][1]["observation"]["results"][0]["source_call_id"] = "c9"
    elif breakage == "step_order":
        doc["steps"][2]["step_id"] = 4
    else:
        del doc["agent"]
    assert atif_errors(doc)
    with contextlib.suppress(ValueError):  # Harbor's models, where they import, refuse it (ValidationError)
        assert not harbor_check(doc)
