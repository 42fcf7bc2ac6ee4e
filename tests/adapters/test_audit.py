"""``envhub audit``: it passes faithful runs and names each kind of corruption."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from envhub.adapters.audit import audit_run
from envhub.adapters.engines.scripted import ScriptedEngine
from envhub.adapters.engines.tiny import build_tiny_model
from envhub.cli.audit import audit_command
from envhub.policies import make_policy
from envhub.registry import make
from envhub.rollout.runner import plan_episodes, run_rollouts
from envhub.store import read_jsonl

ENV = "envhub/Computation-v0"
ENV_KW = {"sandbox": "process", "kinds": ["fraction"], "levels": [1]}


@pytest.fixture(scope="module")
def good_run(tmp_path_factory) -> Path:
    """Two successful episodes whose model turns are scripted (real tokens of the gold actions)."""
    from transformers import AutoTokenizer

    tiny = build_tiny_model()
    tokenizer = AutoTokenizer.from_pretrained(str(tiny))
    env = make(ENV, **ENV_KW)
    script = {}
    for plan in plan_episodes(ENV, env.tasks.task_ids("train"), episodes=2):
        task = env.tasks.get(plan.task_id)
        script[task.prompt] = [a.text for a in env.gold_actions(task)]
    env.close()

    def respond(prompt: str) -> str:
        turn = prompt.count("<|im_start|>assistant\n") - 1
        return next(texts[turn] for task, texts in script.items() if task in prompt)

    out = tmp_path_factory.mktemp("good")
    policy = make_policy(f"hf:{tiny}", engine=ScriptedEngine(tokenizer, respond))
    report = run_rollouts(ENV, policy, out_dir=out, episodes=2, env_kwargs=ENV_KW).report
    assert report["by_outcome"]["success"] == 2
    return out


def corrupt(good: Path, tmp: Path, edit: Callable[[dict], None]) -> Path:
    rows = list(read_jsonl(good / "trajectories.jsonl"))
    edit(rows[0])
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "trajectories.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return tmp


def test_a_faithful_run_passes(good_run):
    report = audit_run(good_run)
    assert report["errors"] == 0 and report["with_tokens"] == 2 and report["trajectories"] == 2
    assert report["sampled_tokens"] > 0 and report["observation_tokens"] > 0
    assert report["drift"] == {"checked": 2, "drifted": 0, "rate": 0.0, "examples": []}
    assert report["mismatch"] is None


def _first_obs_index(row: dict) -> int:
    return len(row["turns"][0]["token_ids"])


def _unmask_observation(r: dict) -> None:
    r["response_mask"][_first_obs_index(r)] = 1
    r["response_logprobs"][_first_obs_index(r)] = -0.1


def _mask_sampled(r: dict) -> None:
    r["response_mask"][0] = 0
    r["response_logprobs"][0] = 0.0


def _edit_text(r: dict) -> None:
    r["turns"][0]["action_text"] = r["turns"][0]["action_text"].replace("print", "prnt")


def _retemplate_sampled(r: dict) -> None:  # what a re-templating pipeline does to the record
    r["response_ids"][1] = r["response_ids"][1] + 1
    r["turns"][0]["token_ids"][1] += 1


def _drop_observation(r: dict) -> None:
    n = len(r["turns"][0]["observation_ids"])
    i = _first_obs_index(r)
    for key in ("response_ids", "response_mask", "response_logprobs"):
        del r[key][i: i + n]
    r["turns"][0]["observation_ids"] = []


@pytest.mark.parametrize("edit,check", [
    (lambda r: r["response_mask"].pop(), "lengths"),
    (lambda r: r["response_logprobs"].__setitem__(0, 0.25), "logprobs"),
    (lambda r: r["response_logprobs"].__setitem__(0, float("nan")), "logprobs"),
    (lambda r: r["response_logprobs"].__setitem__(_first_obs_index(r), -1.0), "logprobs"),
    (lambda r: r["response_mask"].__setitem__(0, 2), "mask"),
    (_unmask_observation, "turns"),
    (_mask_sampled, "turns"),
    (_edit_text, "action_text"),
    (_retemplate_sampled, "action_text"),
    (_drop_observation, "observation"),
    (lambda r: r.__setitem__("prompt_ids", []), "prompt"),
    (lambda r: r["versions"].__setitem__("tokenizer", "/no/such/tokenizer"), "tokenizer"),
])
def test_each_corruption_is_an_error(good_run, tmp_path, edit, check):
    report = audit_run(corrupt(good_run, tmp_path, edit))
    assert report["errors"] >= 1 and check in report["by_check"], report["by_check"]
    assert {i["episode_id"] for i in report["issues"]} == {next(read_jsonl(good_run / "trajectories.jsonl"))[
        "episode_id"]}


def test_non_canonical_tokens_are_drift_not_errors(good_run, tmp_path):
    """The same text split into other tokens: faithful to what was sampled, but re-templating differs."""
    from transformers import AutoTokenizer

    row = next(read_jsonl(good_run / "trajectories.jsonl"))
    tokenizer = AutoTokenizer.from_pretrained(row["versions"]["tokenizer"])

    def split_first_token(r: dict) -> None:
        turn = r["turns"][0]
        k = next(i for i, t in enumerate(turn["token_ids"])
                 if len(tokenizer.decode([t])) > 1 and tokenizer.decode([t]).isalpha())
        pieces = [tokenizer.convert_tokens_to_ids(c) for c in tokenizer.decode([turn["token_ids"][k]])]
        assert all(isinstance(p, int) and p > 2 for p in pieces)
        turn["token_ids"][k:k + 1] = pieces
        turn["logprobs"][k:k + 1] = [-0.5] * len(pieces)
        r["response_ids"][k:k + 1] = pieces
        r["response_mask"][k:k + 1] = [1] * len(pieces)
        r["response_logprobs"][k:k + 1] = [-0.5] * len(pieces)

    report = audit_run(corrupt(good_run, tmp_path, split_first_token))
    assert report["errors"] == 0, report["issues"]
    assert report["drift"]["drifted"] == 1 and report["drift"]["rate"] == 0.5


def test_command_exit_codes(good_run, tmp_path):
    app = typer.Typer()
    app.command()(audit_command)
    runner = CliRunner()
    ok = runner.invoke(app, [str(good_run), "--json", str(tmp_path / "audit.json")])
    assert ok.exit_code == 0 and "errors: 0" in ok.output
    assert json.loads((tmp_path / "audit.json").read_text())["errors"] == 0
    bad = corrupt(good_run, tmp_path / "bad", _edit_text)
    failed = runner.invoke(app, [str(bad)])
    assert failed.exit_code == 1 and "action_text" in failed.output
    assert runner.invoke(app, [str(tmp_path / "missing")]).exit_code == 2


def test_scripted_policy_runs_have_nothing_to_check(tmp_path):
    run_rollouts(ENV, make_policy("gold"), out_dir=tmp_path, episodes=2, env_kwargs=ENV_KW)
    report = audit_run(tmp_path)
    assert report["errors"] == 0 and report["with_tokens"] == 0 and report["trajectories"] == 2
