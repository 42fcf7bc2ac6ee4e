"""``envhub train`` (the real CLI, in a subprocess) through the two bridges of docs/hosting.md, issue
#41: a few GRPO steps of a tiny model on a hosted OpenEnv env (our Computation env served by
``python -m envhub.server`` on the process sandbox, played as ``openenv:URL``) and on a Verifiers v1
taskset (``verifiers:DIR``, the ``sum_answer`` taskset of the bridge's tests).

A random model never answers a Computation or a sum task, so every group would have zero variance
and GRPO would train nothing. The model here is the tests' tiny random Llama with two weight columns
set by hand: it answers one even digit (2, 4, 6 or 8, near-uniformly) and then ends its turn. The
tasks are those whose answer is such a digit, so about a quarter of the samples succeed and most
groups carry signal; dynamic sampling draws more groups where a step's have none. Each test checks
that the run trained both steps through the bridge, that the online token audit passed (the configs
say ``audit_failure: stop``: one failing trajectory would end the run), that ``steps.jsonl`` tells
the truth about what was trained, and that the weights moved.
"""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
yaml = pytest.importorskip("yaml")

pytestmark = pytest.mark.slow

TASKSETS = Path(__file__).resolve().parents[1] / "tasks" / "verifiers_v1" / "tasksets"
#: what the model answers, each about a quarter of the time
ANSWERS = ("2", "4", "6", "8")
INFRA = ("env_error", "verifier_error", "engine_error")


@pytest.fixture(scope="module")
def even_digit_model(tmp_path_factory) -> Path:
    """The tests' tiny random Llama (SmolLM2's tokenizer, untied head) made to answer one of
    :data:`ANSWERS` and then ``<|im_end|>``: hidden dimension 0 is 1 in the embedding of every token
    but those digits, dimension 1 in theirs; the head reads dimension 0 into the digits' logits and
    dimension 1 into the end token's. Every other weight is the random initialization (std 0.02),
    so the one layer barely moves the residual stream."""
    from safetensors.torch import load_file, save_file
    from transformers import AutoTokenizer

    from envhub.adapters.engines.tiny import build_tiny_model

    model = build_tiny_model(tmp_path_factory.mktemp("even-digit") / "model", layers=1, hidden=64,
                             init_std=0.02, seed=0, tied=False)
    tokenizer = AutoTokenizer.from_pretrained(str(model))
    digits = [tokenizer.convert_tokens_to_ids(d) for d in ANSWERS]
    end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    weights = load_file(str(model / "model.safetensors"))
    embed, head = weights["model.embed_tokens.weight"], weights["lm_head.weight"]
    embed[:, 0], embed[:, 1] = 1.0, 0.0
    embed[digits, 0], embed[digits, 1] = 0.0, 1.0
    head[:, :2] = 0.0
    head[digits, 0] = 2.5  # logits of about 20 against 0: all but 3e-5 of the mass on the digits
    head[end, 1] = 3.0
    save_file(weights, str(model / "model.safetensors"), metadata={"format": "pt"})
    return model


def _config(run_dir: Path, model: Path, env: dict[str, Any], **sections: Any) -> dict[str, Any]:
    config: dict[str, Any] = {
        "run_dir": str(run_dir), "model": str(model), "env": env,
        "sampling": {"max_new_tokens": 2, "temperature": 1.0},
        "rollout": {"groups_per_step": 2, "group_size": 4, "concurrency": 2, "max_response_tokens": 64,
                    "max_context": 1024, "dynamic_sampling": True, "max_extra_rounds": 2},
        "optim": {"lr": 0.01, "micro_batch_size": 8},
        "audit_failure": "stop",  # the online token audit: a failing trajectory stops the run
        "steps": 2, "checkpoint_every": 2, "seed": 0,
    }
    for key, value in sections.items():
        config[key] = {**config[key], **value} if isinstance(config.get(key), dict) else value
    return config


def _envhub_train(tmp_path: Path, config: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "train.yaml"
    path.write_text(yaml.safe_dump(config))
    return subprocess.run([sys.executable, "-m", "envhub.cli", "train", str(path)], capture_output=True,
                          text=True, timeout=900)


def _records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _reply(record: dict[str, Any]) -> str:
    """The text of an episode's one turn, its end token left out."""
    (turn,) = record["turns"]
    return turn["action_text"].replace("<|im_end|>", "").strip()


def _check_run(done: subprocess.CompletedProcess[str], run: Path, model: Path, env_id: str) -> list[dict]:
    """What both tests assert of a finished run; returns its ``steps.jsonl`` lines."""
    from safetensors.torch import load_file

    from envhub.adapters.audit import audit_run

    assert done.returncode == 0, done.stderr[-4000:]
    assert "Traceback" not in done.stderr, done.stderr[-4000:]
    assert json.loads((run / "config.json").read_text())["env"]["id"] == env_id
    steps = _records(run / "steps.jsonl")
    assert [s["step"] for s in steps] == [1, 2]
    group_size = json.loads((run / "config.json").read_text())["rollout"]["group_size"]
    version = 0
    for s in steps:
        sampled = _records(run / "rollouts" / f"step-{s['step']:06d}" / "trajectories.jsonl")
        assert {r["outcome"] for r in sampled} <= {"success", "wrong_answer"}, {r["outcome"] for r in sampled}
        # the line counts the step's episodes (dynamic sampling's extra groups too), less the groups left
        # untrained as surplus (informative groups beyond groups_per_step), each trained or not
        listed = set(s["trained_episodes"]) | set(s["untrained_episodes"])
        records = [r for r in sampled if r["episode_id"] in listed]
        assert len(records) == len(listed) == len(sampled) - s["surplus_groups"] * group_size, s
        assert s["attempted"] == sum(s["outcomes"].values()) == len(records), s
        assert s["outcomes"]["success"] == sum(r["outcome"] == "success" for r in records), s
        assert s["reward_mean"] == pytest.approx(sum(r["reward"] for r in records) / len(records)), s
        assert all(s["outcomes"][c] == 0 for c in INFRA), s["outcomes"]
        assert all(r["response_ids"] and r["response_logprobs"] for r in records)
        assert s["audit_dropped"] == 0, s  # the online token audit passed every trajectory
        # an update is claimed exactly when some group had a reward spread, and says what it trained
        # informative_groups counts every drawn group with a spread (surplus ones left untrained too);
        # groups / zero_variance_groups are the trained batch's, zero-variance groups of earlier rounds kept
        trained_informative = s["groups"] - s["zero_variance_groups"]
        assert 0 <= trained_informative <= s["informative_groups"], s
        assert s["updated"] == (trained_informative > 0) == (s["optimizer_steps"] > 0), s
        assert s["trained_samples"] == len(s["trained_episodes"]), s
        version += bool(s["updated"])
        assert s["weight_version"] == str(version), s
    assert any(s["updated"] for s in steps), (
        "no step had a group with both a right and a wrong answer (each sample is right about a quarter "
        f"of the time): {[(s['outcomes'], s['groups']) for s in steps]}")
    summary = json.loads((run / "summary.json").read_text())
    assert summary["steps"] == 2
    assert summary["optimizer_steps"] == sum(s["optimizer_steps"] for s in steps) >= 1
    assert summary["weight_version"] == str(version)
    # the offline audit agrees: step 1 was sampled with the initial weights, which recompute its logprobs
    audit = audit_run(run / "rollouts" / "step-000001", model=str(model))
    assert audit["errors"] == 0 and audit["with_tokens"] == audit["trajectories"] > 0, audit["issues"]
    assert audit["mismatch"]["max_abs_delta"] < 1e-4, audit["mismatch"]
    before, after = load_file(str(model / "model.safetensors")), load_file(str(run / "final" / "model.safetensors"))
    moved = [k for k in before if not torch.equal(before[k], after[k])]
    assert "lm_head.weight" in moved, moved
    return steps


def test_envhub_train_on_a_hosted_openenv_server(tmp_path, even_digit_model):
    import envhub
    from envhub.server.testing import serve_in_subprocess
    from envhub.tasks.openenv.hosted_tasks import split_of

    pytest.importorskip("fastapi")
    pytest.importorskip("openenv.core")
    narrow = {"kinds": ["date", "fraction"], "levels": [1]}
    with warnings.catch_warnings():  # the process backend's warning is expected here
        warnings.simplefilter("ignore", RuntimeWarning)
        native = envhub.make("envhub/Computation-v0", sandbox="process", **narrow)
    try:  # the bridge splits explicit task ids by a hash of the id (docs/hosting.md)
        ids = [t for split in ("train", "validation", "test") for t in native.tasks.task_ids(split)]
        train = [t for t in ids if split_of(t) == "train"
                 and native.parser.parse(native.gold_actions(native.tasks.get(t))[-1].text)
                 .calls[0].arguments["answer"] in ANSWERS]
        validation = [t for t in ids if split_of(t) == "validation"]
    finally:
        native.close()
    assert len(train) >= 4 and validation, (len(train), len(validation))
    serve = ["envhub/Computation-v0", "--sandbox", "process",
             "--env-arg", f"kinds={json.dumps(narrow['kinds'])}", "--env-arg", f"levels={json.dumps(narrow['levels'])}"]
    with serve_in_subprocess(serve) as (url, _proc):
        env_id = "openenv:" + url
        env = {"id": env_id, "validation_split": "validation",
               # the answer is the reply's last number (the model writes no tool-call markup)
               "args": {"parser": "last_number", "task_ids": train + validation[:2]}}
        done = _envhub_train(tmp_path, _config(tmp_path / "run", even_digit_model, env,
                                               eval={"episodes": 2}))
    _check_run(done, tmp_path / "run", even_digit_model, env_id)
    # the model's digits went to the server's own `answer` tool and were graded there
    records = _records(tmp_path / "run" / "rollouts" / "step-000001" / "trajectories.jsonl")
    assert {r["task_id"] for r in records} <= set(train)
    odd = [(_reply(r), r["metrics"]["tool_calls"], r["outcome"], r["outcome_detail"]) for r in records
           if not (_reply(r) in ANSWERS and r["metrics"]["tool_calls"] == 1)]
    assert not odd, odd
    # the held-out evaluations (before and final) ran through the bridge on its validation split
    evals = {e["tag"]: e for e in _records(tmp_path / "run" / "evals.jsonl")}
    assert set(evals) == {"before", "final"}, evals
    assert all(e["episodes"] == 2 and e["split"] == "validation" for e in evals.values()), evals


def test_envhub_train_on_a_verifiers_taskset(tmp_path, even_digit_model):
    env_id = f"verifiers:{TASKSETS / 'sum_answer'}"
    # sum-1 .. sum-4 (answers 2 .. 8) and sum-5 (10) are in train; the taskset has no validation task
    env = {"id": env_id, "validation_split": None}
    done = _envhub_train(tmp_path, _config(tmp_path / "run", even_digit_model, env))
    _check_run(done, tmp_path / "run", even_digit_model, env_id)
    records = _records(tmp_path / "run" / "rollouts" / "step-000001" / "trajectories.jsonl")
    assert {r["task_id"] for r in records} <= {f"sum-{i}" for i in range(1, 6)}
    # the taskset's own reward decided: a success answered 2 * i for sum-i
    for r in records:
        assert _reply(r) in ANSWERS, r["turns"]
        assert (r["outcome"] == "success") == (_reply(r) == str(2 * int(r["task_id"].split("-")[1]))), r["turns"]
