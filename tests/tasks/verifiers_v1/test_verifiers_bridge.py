"""``envhub.make("verifiers:...")`` with the real ``verifiers`` 0.4 (its own loader, env, ``null``
harness and scoring, in the environment the bridge makes for it) on two tasksets written here:
``sum_answer`` (single-turn) and ``add_tool`` (a Verifiers toolset). The policy's turns answer the
harness's real model requests; the records are the policy's own tokens, checked by the audit.
"""

from __future__ import annotations

import os
import signal
import tempfile
import time
from pathlib import Path

import pytest

import envhub
from envhub.adapters.audit import audit_run
from envhub.adapters.engines.scripted import ScriptedEngine
from envhub.adapters.engines.tiny import build_tiny_model
from envhub.parsing import format_tool_call
from envhub.policies import NoopPolicy, make_policy
from envhub.rollout.runner import run_rollouts
from envhub.store import read_jsonl
from envhub.tasks.verifiers_v1.env import VerifiersBridge
from envhub.types import Action, Outcome, ToolCall, TrajectoryRecord

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_torch_thread")]

TASKSETS = Path(__file__).resolve().parent / "tasksets"
SUM = f"verifiers:{TASKSETS / 'sum_answer'}"
ADD = f"verifiers:{TASKSETS / 'add_tool'}"


@pytest.fixture(scope="module")
def sums() -> VerifiersBridge:
    env = envhub.make(SUM)
    yield env
    env.close()


@pytest.fixture(scope="module")
def adds() -> VerifiersBridge:
    env = envhub.make(ADD)
    yield env
    env.close()


def test_tasks_are_the_tasksets_split_by_their_ids(sums: VerifiersBridge):
    assert isinstance(sums, VerifiersBridge) and sums.env_id == SUM and sums.harness == "null"
    ids = {split: list(sums.tasks.task_ids(split)) for split in ("train", "validation", "test")}
    assert sorted(t for split_ids in ids.values() for t in split_ids) == [f"sum-{i}" for i in range(6)]
    again = envhub.make(SUM, num_tasks=6)
    try:
        assert {s: list(again.tasks.task_ids(s)) for s in ids} == ids
    finally:
        again.close()
    assert sums.tasks.get("sum-3").prompt == "What is 3 + 3? Answer with the number."


def test_the_tasksets_own_reward_decides_the_outcome(sums: VerifiersBridge):
    obs = sums.reset(task_id="sum-2")
    assert [m.role for m in obs.messages] == ["user"] and obs.messages[0].content.startswith("What is 2 + 2?")
    assert obs.tools == [] and not obs.done
    end = sums.step("The sum is 4")
    assert end.done and end.outcome is Outcome.SUCCESS and end.reward == 1.0
    assert end.verdict.layers[0].details["rewards"] == {"correct": 1.0}
    sums.reset(task_id="sum-2")
    end = sums.step("The sum is 5")
    assert end.outcome is Outcome.WRONG_ANSWER and end.reward == 0.0


def test_a_reward_that_crashes_on_the_agents_answer_is_the_agents_failure(sums: VerifiersBridge):
    sums.reset(task_id="sum-1")
    end = sums.step("boom")
    assert end.outcome is Outcome.WRONG_ANSWER and not end.outcome.is_infra
    assert "TaskError" in end.verdict.detail


@pytest.mark.slow
def test_a_worker_that_exits_on_the_agents_answer_again_on_replay_is_the_agents(sums: VerifiersBridge):
    sums.reset(task_id="sum-1")
    end = sums.step("die")  # the taskset's reward takes the worker down on this answer
    assert end.outcome is Outcome.FORMAT_ERROR and "again when envhub replayed" in end.verdict.detail
    sums.reset(task_id="sum-1")  # a fresh worker plays the next episode
    assert sums.step("The sum is 2").outcome is Outcome.SUCCESS
    marker = Path(tempfile.gettempdir()) / f"envhub-sum-answer-once-{os.getpid()}"  # the taskset's "once"
    marker.unlink(missing_ok=True)
    sums.reset(task_id="sum-1")
    once = sums.step("once")  # down the first time only: the replay does not reproduce it
    assert once.outcome is Outcome.ENV_ERROR and "did not exit" in once.verdict.detail
    sums.reset(task_id="sum-2")
    assert sums.step("The sum is 4").outcome is Outcome.SUCCESS


def test_a_toolset_call_is_one_turn_and_its_result_the_observation(adds: VerifiersBridge):
    obs = adds.reset(task_id="add-1")
    (tool,) = obs.tools
    assert tool.name == "calc_add" and tool.parameters["required"] == ["a", "b"]
    reply = adds.step("I will add.\n" + format_tool_call("calc_add", {"a": 1, "b": 7}))
    (result,) = reply.messages
    assert result.role == "tool" and result.content == "8" and result.tool_call_id and not reply.done
    end = adds.step("The sum is 8")
    assert end.outcome is Outcome.SUCCESS and end.reward == 1.0
    assert [t.tool_calls[0].name if t.tool_calls else None for t in adds.episode.turns] == ["calc_add", None]


def test_structured_tool_calls_work_too(adds: VerifiersBridge):
    adds.reset(task_id="add-2")
    reply = adds.step(Action(text="", tool_calls=[ToolCall(name="calc_add", arguments={"a": 2, "b": 7})]))
    assert reply.messages[0].content == "9"


def test_envhubs_budget_stops_the_verifiers_episode_and_the_next_one_runs():
    env = envhub.make(ADD, budget={"max_turns": 1})
    try:
        env.reset(task_id="add-1")
        end = env.step(format_tool_call("calc_add", {"a": 1, "b": 7}))
        assert end.done and end.outcome is Outcome.BUDGET_EXHAUSTED
        env.reset(task_id="add-1")  # the cancelled episode's harness is refused; a new one runs
        end = env.step("The sum is 8")
        assert end.outcome is Outcome.SUCCESS
    finally:
        env.close()


def test_noop_is_the_floor_and_never_infra(tmp_path):
    report = run_rollouts(SUM, NoopPolicy(), out_dir=tmp_path, episodes=3, concurrency=1).report
    assert report["by_outcome"]["wrong_answer"] == report["attempted"] == 3, report["by_outcome"]


def test_a_model_policy_records_its_own_tokens_and_passes_the_audit(tmp_path):
    tiny = build_tiny_model()
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(tiny))

    def respond(prompt: str) -> str:  # the model: calls the tool, then answers with its result
        if "<tool_response>" not in prompt:
            i = int(prompt.split("add ")[1].split(" and")[0])
            return format_tool_call("calc_add", {"a": i, "b": 7})
        return "The sum is " + prompt.split("<tool_response>\n")[1].split("\n")[0]

    policy = make_policy(f"hf:{tiny}", engine=ScriptedEngine(tokenizer, respond), max_new_tokens=256)
    report = run_rollouts(ADD, policy, out_dir=tmp_path / "scripted", episodes=2, concurrency=1).report
    assert report["by_outcome"]["success"] == report["attempted"] == 2, report["by_outcome"]
    end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    for rec in (TrajectoryRecord.model_validate(r) for r in read_jsonl(tmp_path / "scripted" / "trajectories.jsonl")):
        call, answer = rec.turns
        assert call.token_ids[-1] == end and tokenizer.decode(call.token_ids) == call.action_text
        assert call.observation[0].role == "tool" and call.observation_ids
        assert rec.response_mask == [1] * len(call.token_ids) + [0] * len(call.observation_ids) + [1] * len(
            answer.token_ids)
    audit = audit_run(tmp_path / "scripted")
    assert audit["errors"] == 0 and audit["with_tokens"] == 2, audit["issues"]

    sampled = make_policy(f"hf:{tiny}?max_new_tokens=16&temperature=1.0")
    try:
        report = run_rollouts(SUM, sampled, out_dir=tmp_path / "sampled", episodes=2, concurrency=1).report
    finally:
        sampled.close()
    assert report["attempted"] == 2 and report["by_class"].get("infra_failure", 0) == 0, report["by_outcome"]
    audit = audit_run(tmp_path / "sampled", model=str(tiny))
    assert audit["errors"] == 0 and audit["mismatch"]["max_abs_delta"] < 1e-4, audit["issues"]


def test_close_stops_the_worker_and_everything_it_started():
    env = envhub.make(SUM)
    env.reset(task_id="sum-1")  # a harness is running, waiting for the policy
    pid = env._proc.pid
    env.close()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.killpg(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        os.killpg(pid, signal.SIGKILL)
        pytest.fail("the worker's process group outlived close()")


def test_a_taskset_that_does_not_load_fails_make_in_one_line(tmp_path):
    broken = tmp_path / "broken_set"
    broken.mkdir()
    (broken / "__init__.py").write_text("raise ImportError('no such dataset')\n")
    with pytest.raises(Exception, match="no such dataset"):
        envhub.make(f"verifiers:{broken}", startup_timeout_s=120)


def _verify(env_id: str, *args: str) -> tuple[int, dict]:
    import json
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "envhub.cli", "verify", env_id, *args, "--json"],
                          capture_output=True, text=True, timeout=1200)
    return done.returncode, json.loads(done.stdout)


def test_verify_prints_the_fidelity_table_with_agreement_against_vf_eval():
    code, report = _verify(ADD, "--tasks", "add-1", "--episodes", "3")
    rows = {r["check"]: r for r in report["tasks"]["add-1"]}
    assert code == 0 and report["fail"] == 0, report
    assert rows["oracle"]["status"] == "skip" and rows["empty_answer"]["status"] == "pass"
    agreement = {k: r for k, r in rows.items() if k.startswith("agreement:")}
    assert set(agreement) == {"agreement:empty_answer", "agreement:guess", "agreement:tool_then_guess"}
    assert all(r["status"] == "pass" for r in agreement.values())
    # the replayed tool call and answer earn vf-eval's success, the bridge's too
    assert agreement["agreement:tool_then_guess"]["expected"] == "vf-eval: success, reward 1"


def test_a_taskset_that_grades_the_same_answers_differently_fails_agreement():
    code, report = _verify(f"verifiers:{TASKSETS / 'process_reward'}", "--tasks", "p-0", "--episodes", "1")
    agreement = [r for r in report["tasks"]["p-0"] if r["check"].startswith("agreement:")]
    assert code == 1 and agreement and all(r["status"] == "fail" for r in agreement), agreement
