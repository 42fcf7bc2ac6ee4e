import json
import time

import pytest

import envhub
from envhub.budget import Budget
from envhub.errors import EpisodeFinishedError
from envhub.parsing import format_tool_call
from envhub.types import Action, Outcome, Sample, ToolCall


@pytest.fixture
def env():
    e = envhub.make("envhub/Computation-v0", budget={"max_format_errors": 2})
    yield e
    e.close()


def _answer(task_id_env, value):
    return format_tool_call("answer", {"answer": value})


def test_reset_gives_system_user_and_tool_specs(env):
    obs = env.reset(seed=3)
    assert [m.role for m in obs.messages] == ["system", "user"]
    assert {t.name for t in obs.tools} == {"python", "answer"}
    schema = next(t for t in obs.tools if t.name == "python").parameters
    assert schema["properties"]["code"]["type"] == "string" and schema["required"] == ["code"]
    assert not obs.done and obs.info["task_id"] in env.tasks.task_ids("train")


def test_reset_is_deterministic_by_seed_and_task_id(env):
    a = env.reset(seed=11).info["task_id"]
    b = env.reset(seed=11).info["task_id"]
    assert a == b
    tid = env.tasks.task_ids("train")[5]
    assert env.reset(task_id=tid).info["task_id"] == tid


def test_correct_answer_is_success_and_hidden_answer_never_shown(env):
    obs = env.reset(task_id="comp-bigint-L1-0")
    answer = env.episode.task.hidden["answer"]
    assert answer not in json.dumps(obs.model_dump())
    obs = env.step(format_tool_call("answer", {"answer": answer}))
    assert obs.done and not obs.truncated
    assert obs.outcome is Outcome.SUCCESS and obs.reward == 1.0
    assert [layer.layer for layer in obs.verdict.layers] == ["gate", "correctness"]


def test_wrong_answer_is_policy_failure(env):
    env.reset(task_id="comp-bigint-L1-0")
    obs = env.step(format_tool_call("answer", {"answer": "12"}))
    assert obs.outcome is Outcome.WRONG_ANSWER and obs.reward == 0.0


@pytest.mark.parametrize("bad, needle", [
    ("no tool call here", "no tool call found"),
    ("<tool_call>{broken</tool_call>", "invalid JSON"),
    (format_tool_call("rm_rf", {}), "unknown tool `rm_rf`"),
    (format_tool_call("python", {"code": 123}), "code: Input should be a valid string"),
    (format_tool_call("python", {"code": "x", "extra": 1}), "extra: Extra inputs are not permitted"),
    (format_tool_call("python", {}), "code: Field required"),
])
def test_bad_actions_are_explained_and_count_against_the_format_budget(env, bad, needle):
    env.reset(task_id="comp-bigint-L1-0")
    for left in (1, 0):
        obs = env.step(bad)
        assert not obs.done
        assert needle in obs.messages[0].content
        assert f"({left} retries left)" in obs.messages[0].content
    obs = env.step(bad)
    assert obs.done and obs.outcome is Outcome.FORMAT_ERROR
    assert needle in obs.verdict.detail


def test_agent_caused_tool_failure_is_a_result_not_a_format_error(env):
    env.reset(task_id="comp-bigint-L1-0")
    obs = env.step(format_tool_call("python", {"code": "   "}))
    assert obs.messages[0].content == "Error: the code is empty"
    assert env.episode.format_errors == 0


def test_huge_action_is_a_format_error_with_its_size(env):
    env.reset(task_id="comp-bigint-L1-0")
    obs = env.step("x" * 1_000_000)
    assert "1000000 characters" in obs.messages[0].content
    assert env.episode.turns[-1].action_text == "x" * 1_000_000  # recorded verbatim, nothing lost


def test_lone_surrogates_are_replaced_not_raised(env):
    env.reset(task_id="comp-bigint-L1-0")
    obs = env.step("\ud800 broken" + format_tool_call("answer", {"answer": "1"}))
    assert obs.done and obs.outcome is Outcome.WRONG_ANSWER
    assert "\ufffd" in env.episode.turns[0].action_text
    env.episode.turns[0].model_dump_json()  # storable as UTF-8


def test_turn_budget_ends_as_budget_exhausted():
    env = envhub.make("envhub/Computation-v0", budget=Budget(max_turns=2, max_format_errors=10))
    env.reset(task_id="comp-bigint-L1-0")
    env.step("hmm")
    obs = env.step("hmm")
    assert obs.done and obs.truncated and obs.outcome is Outcome.BUDGET_EXHAUSTED
    assert obs.outcome.outcome_class.value == "truncation"


def test_tool_call_budget_ends_as_budget_exhausted():
    env = envhub.make("envhub/Computation-v0", budget=Budget(max_tool_calls=1, max_format_errors=10))
    env.reset(task_id="comp-bigint-L1-0")
    env.step(format_tool_call("python", {"code": " "}))
    obs = env.step(format_tool_call("python", {"code": " "}))
    assert obs.outcome is Outcome.BUDGET_EXHAUSTED and "tool call budget" in obs.verdict.detail


def test_agent_time_budget():
    env = envhub.make("envhub/Computation-v0", budget=Budget(max_agent_seconds=0.0))
    env.reset(task_id="comp-bigint-L1-0")
    obs = env.step(format_tool_call("python", {"code": " "}))
    assert obs.outcome is Outcome.BUDGET_EXHAUSTED and "time budget" in obs.verdict.detail


def test_structured_action_and_dict_action(env):
    env.reset(task_id="comp-bigint-L1-0")
    answer = env.episode.task.hidden["answer"]
    obs = env.step(Action(tool_calls=[ToolCall(name="answer", arguments={"answer": answer})]))
    assert obs.outcome is Outcome.SUCCESS
    env.reset(task_id="comp-bigint-L1-0")
    obs = env.step({"text": format_tool_call("answer", {"answer": answer})})
    assert obs.outcome is Outcome.SUCCESS


def test_stepping_a_finished_episode_is_a_caller_error(env):
    with pytest.raises(EpisodeFinishedError):
        env.step("x")
    env.reset(task_id="comp-bigint-L1-0")
    env.step(format_tool_call("answer", {"answer": "1"}))
    with pytest.raises(EpisodeFinishedError, match="reset"):
        env.step("x")


def test_a_crashing_verifier_is_verifier_error_not_the_policys_fault(env):
    env.reset(task_id="comp-bigint-L1-0")
    env.episode.task.hidden["answer_type"] = "no-such-type"  # break the grader, not the submission
    obs = env.step(format_tool_call("answer", {"answer": "1"}))
    assert obs.outcome is Outcome.VERIFIER_ERROR and "KeyError" in obs.verdict.detail


def test_unknown_split_and_unknown_task(env):
    with pytest.raises(ValueError, match="unknown split"):
        envhub.make("envhub/Computation-v0", split="dev")
    with pytest.raises(KeyError, match="not a computation task id"):
        env.reset(task_id="nope")


def test_sandbox_seconds_count_a_sandbox_start_once():
    env = envhub.make("envhub/Computation-v0", sandbox_pool=0)  # a cold start inside the first tool call
    env.reset(task_id="comp-bigint-L1-0")
    t0 = time.monotonic()
    env.step('<tool_call>{"name": "python", "arguments": {"code": "print(1)"}}</tool_call>')
    wall = time.monotonic() - t0
    assert 0 < env.episode.metrics.sandbox_seconds <= wall
    env.close()


def test_the_sample_that_rides_with_an_action_is_recorded_on_its_turn_and_nothing_else(env):
    env.reset(task_id="comp-bigint-L1-0")
    env.step("no tool call here")
    sample = Sample(token_ids=[4, 2], logprobs=[-0.5, -1.5], finish_reason="length", weight_version="w1",
                    agent_seconds=0.25)
    obs = env.step(format_tool_call("answer", {"answer": env.episode.task.hidden["answer"]}), sample=sample)
    assert obs.outcome is Outcome.SUCCESS
    plain, sampled = env.episode.turns
    assert (plain.token_ids, plain.logprobs, plain.finish_reason, plain.weight_version) == ([], [], None, None)
    assert "agent_s" not in plain.timings
    assert (sampled.token_ids, sampled.logprobs, sampled.finish_reason, sampled.weight_version) == (
        [4, 2], [-0.5, -1.5], "length", "w1")
    assert sampled.timings["agent_s"] == 0.25 and "env_s" in sampled.timings


class _FinishTasks:
    name, version = "finish", "1"

    def task_ids(self, split):
        return [f"finish-{split}-0"]

    def get(self, task_id):
        return envhub.Task(task_id=task_id, family="finish", split=task_id.split("-")[1], prompt="Say done.",
                           hidden={"answer": "done"})


class _FinishEnv(envhub.Env):
    """Its terminal tool is named neither `answer` nor `submit`."""

    env_id = "test/Finish-v0"
    family = "finish"

    def load_tasks(self):
        return _FinishTasks()

    def make_verifier(self):
        from envhub.verifiers import AnswerPresent, ExactMatch, LayeredVerifier

        return LayeredVerifier(gate=[AnswerPresent(field="verdict")], correctness=ExactMatch(field="verdict"))

    @envhub.tool
    def echo(self, text: str) -> str:
        """Echo."""
        return text

    @envhub.tool(terminal=True)
    def finish(self, verdict: str) -> str:
        """Submit."""
        return verdict

    def gold_actions(self, task):
        return [Action(text=format_tool_call("finish", {"verdict": "done"}))]


@pytest.mark.parametrize("policy", ["noop", "script"])
def test_scripted_policies_submit_through_the_envs_own_terminal_tool(policy):
    """noop, and a script that runs out of turns, end with an empty call of the env's terminal tool
    (whatever its name), which the verifier grades -- not with calls of a guessed tool name."""
    from envhub.policies import ScriptedPolicy, make_policy

    env = _FinishEnv()
    assert env.terminal_tool == "finish"
    pol = make_policy("noop") if policy == "noop" else ScriptedPolicy([format_tool_call("echo", {"text": "hi"})])
    obs = env.reset(seed=0)
    agent = pol.start(env, obs, seed=0)
    while not obs.done:
        obs = env.step(agent.act(obs).text)
    assert env.episode.submission == {"tool": "finish", "verdict": ""}
    assert obs.verdict.detail == "no verdict was submitted"
