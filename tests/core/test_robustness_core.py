"""Model-written input never becomes an infra outcome, and one bad episode never ends a run.

Each test here reproduces a gap that once crashed, hung or mis-graded: lone surrogates in tool
arguments, deeply nested JSON, numbers that overflow or take forever to build, a tolerance loose
enough to accept "0", exceptions while recording an episode, and env arguments that can never work.
"""

import json
import subprocess
import sys
import threading
import time
from types import SimpleNamespace

import pytest

import envhub
from envhub.budget import Budget
from envhub.parsing import DefaultParser, JsonParser, format_tool_call
from envhub.policies import GoldPolicy, ScriptedPolicy
from envhub.rollout.runner import run_rollouts
from envhub.store import JsonlStore, read_jsonl, write_json_atomic, write_text_atomic
from envhub.tasks.computation.env import AnswerTypeMatch, ComputationTasks, computation_attacks
from envhub.types import Action, Outcome, OutcomeClass, Task, ToolCall
from envhub.verifiers import AnswerPresent, LayeredVerifier
from envhub.verifiers.checks import parse_number
from envhub.verifiers.retrieval_checks import LiteralMatch, literals_equal
from envhub.verifiers.suite import run_suite

ENV = "envhub/Computation-v0"
SURROGATE_ANSWER = '<tool_call>{"name": "answer", "arguments": {"answer": "\\ud800"}}</tool_call>'
SURROGATE_CODE = '<tool_call>{"name": "python", "arguments": {"code": "print(\'\\ud800\')"}}</tool_call>'


@pytest.fixture
def env():
    e = envhub.make(ENV, budget={"max_format_errors": 2})
    yield e
    e.close()


@pytest.fixture(scope="module")
def tasks():
    return ComputationTasks()


# ---- 1. lone surrogates -------------------------------------------------------------------------


def test_parsed_arguments_have_lone_surrogates_replaced_recursively():
    text = ('<tool_call>{"name": "answer", "id": "c\\udfff", "arguments": {"answer": "\\ud800", '
            '"more": ["\\udc00", {"k\\ud801": "v"}, 3]}}</tool_call>')
    [call] = DefaultParser().parse(text).calls
    assert call.arguments == {"answer": "\ufffd", "more": ["\ufffd", {"k\ufffd": "v"}, 3]}
    assert call.id == "c\ufffd"
    json.dumps(call.model_dump(mode="json"), ensure_ascii=False).encode("utf-8")  # storable as UTF-8
    [call] = DefaultParser().parse('<tool_call>{"name": "a", "arguments": "{\\"x\\": \\"\\\\ud800\\"}"}</tool_call>').calls
    assert call.arguments == {"x": "\ufffd"}


def test_surrogate_in_python_code_is_a_tool_result_not_env_error(env):
    env.reset(task_id="comp-bigint-L1-0")
    obs = env.step(SURROGATE_CODE)
    assert not obs.done, obs.verdict
    assert "\ufffd" in obs.messages[0].content


def test_surrogate_in_a_structured_call_is_replaced(env):
    env.reset(task_id="comp-bigint-L1-0")
    obs = env.step(Action(tool_calls=[ToolCall(name="answer", arguments={"answer": "\ud800"})]))
    assert obs.done and obs.outcome is Outcome.FORMAT_ERROR
    assert env.episode.submission["answer"] == "\ufffd"
    assert env.episode.messages[-1].tool_calls[0].arguments == {"answer": "\ufffd"}


def test_a_rollout_whose_policy_sends_a_lone_surrogate_completes_with_a_policy_outcome(tmp_path):
    result = run_rollouts(ENV, ScriptedPolicy([SURROGATE_CODE, SURROGATE_ANSWER]), out_dir=tmp_path, episodes=4,
                          concurrency=2)
    records = list(read_jsonl(result.trajectories))
    assert len(records) == 4
    for rec in records:
        assert Outcome(rec["outcome"]).outcome_class is OutcomeClass.POLICY_FAILURE, rec["outcome_detail"]
        assert rec["turns"][1]["tool_calls"][0]["arguments"] == {"answer": "\ufffd"}
    result.trajectories.read_bytes().decode("utf-8")  # the whole file is valid UTF-8


def test_store_never_crashes_on_a_lone_surrogate(tmp_path):
    path = tmp_path / "t.jsonl"
    with JsonlStore(path) as store:
        store.append({"episode_id": "a", "text": "bad \ud800 string", "\udc00key": ["\udfff"]})
        store.append('{"episode_id": "b", "text": "\ud800"}')
        store.append({"episode_id": "a\ud800"})
    records = list(read_jsonl(path))
    assert records[0] == {"episode_id": "a", "text": "bad \ufffd string", "\ufffdkey": ["\ufffd"]}
    assert records[1]["text"] == "\ufffd" and records[2]["episode_id"] == "a\ufffd"
    with JsonlStore(path) as store:  # reopening sees the keys as they are on disk
        assert store.keys == {"a", "b", "a\ufffd"}
    write_json_atomic(tmp_path / "r.json", {"detail": "\ud800"})  # escaped by json.dumps: no crash
    assert (tmp_path / "r.json").read_text(encoding="utf-8").count("\\ud800") == 1
    write_text_atomic(tmp_path / "r.txt", "raw \ud800")
    assert (tmp_path / "r.txt").read_text(encoding="utf-8") == "raw \ufffd"


# ---- 2. deep nesting, zero division, overflow ---------------------------------------------------


@pytest.mark.parametrize("text", [
    "<tool_call>" + "[" * 5000 + "</tool_call>",
    "[" * 30_000,  # under the action size limit, so the parser sees it
    '<tool_call>{"name": "answer", "arguments": {"answer": ' + "[" * 5000 + "}}</tool_call>",
    '<tool_call>{"name": "answer", "arguments": "' + '{\\"a\\": ' * 3000 + "1" + "}" * 3000 + '"}</tool_call>',
    # shallow enough for json, too deep to be stored in a record
    '<tool_call>{"name": "answer", "arguments": {"answer": ' + "[" * 300 + "]" * 300 + "}}</tool_call>",
], ids=["hermes", "plain", "in_arguments", "in_string_arguments", "storable_depth"])
def test_deeply_nested_json_is_a_format_error(env, text):
    result = DefaultParser().parse(text)
    assert result.calls == [] and "malformed tool call" in result.error
    env.reset(task_id="comp-bigint-L1-0")
    obs = env.step(text)
    assert not obs.done and obs.messages[0].content.startswith("Format error: malformed tool call")
    env.episode.turns[0].model_dump_json()
    assert JsonParser().parse("[" * 100_000).error.startswith("malformed tool call")


def test_deeply_nested_structured_arguments_are_a_format_error(env):
    deep = 1
    for _ in range(300):
        deep = [deep]
    env.reset(task_id="comp-bigint-L1-0")
    obs = env.step(Action(tool_calls=[ToolCall(name="answer", arguments={"answer": deep})]))
    assert not obs.done and "nested" in obs.messages[0].content
    env.episode.turns[0].model_dump_json()
    env.episode.messages[-2].model_dump_json()


@pytest.mark.parametrize("answer", ["1/0", "0/0", "1e400", "-1e400", "x=1/0", "1e400/1e-400", "1/0.0"])
@pytest.mark.parametrize("task_id", ["comp-unit-L3-7", "comp-stats-L2-0", "comp-bigint-L1-0",
                                     "comp-fraction-L2-0", "comp-linear-L1-0"])
def test_degenerate_numbers_are_graded_not_verifier_errors(env, task_id, answer):
    env.reset(task_id=task_id)
    obs = env.step(format_tool_call("answer", {"answer": answer if "linear" not in task_id else f"{answer}, y=1"}))
    assert obs.done and obs.outcome in (Outcome.WRONG_ANSWER, Outcome.FORMAT_ERROR), obs.verdict.detail


def test_parse_number_rejects_zero_denominators():
    for text in ("1/0", "0/0", "5/0.000"):
        with pytest.raises(ValueError, match="division by zero"):
            parse_number(text)


def test_a_401_digit_integer_is_graded_by_literal_match():
    big = "9" * 401
    task = Task(task_id="t", family="retrieval", split="test", prompt="?", hidden={"answer": "438"})
    graded = LiteralMatch()(task, {"answer": big}, None)
    assert not graded.passed and graded.score == 0.0
    task = Task(task_id="t", family="retrieval", split="test", prompt="?", hidden={"answer": big})
    assert LiteralMatch()(task, {"answer": big}, None).passed
    assert not LiteralMatch()(task, {"answer": "1e308"}, None).passed
    assert not literals_equal(int(big), float("inf")) and not literals_equal(int(big), 1.5)
    assert literals_equal(10**400 + 1, 10**400)  # the same relative tolerance as for small numbers


# ---- 3. huge exponents --------------------------------------------------------------------------


def _finishes_within(fn, seconds):
    box = []
    worker = threading.Thread(target=lambda: box.append(fn()), daemon=True)
    worker.start()
    worker.join(seconds)
    return not worker.is_alive(), box


@pytest.mark.parametrize("text", ["1e100000000", "-1e-100000000", "1e1001", "1" * 2001, "0." + "1" * 2001,
                                  "1e100000000/3", "1e0000000000000000000000001000000"],
                         ids=["1e100000000", "-1e-100000000", "1e1001", "2001_digits", "2001_decimals", "ratio",
                              "padded_exponent"])
def test_numbers_too_big_to_build_are_not_numbers(text):
    def attempt():
        try:
            parse_number(text)
        except ValueError as exc:
            return str(exc)
        return None

    finished, box = _finishes_within(attempt, 5)  # a hang guard: each is refused in under a millisecond
    assert finished, f"parse_number({text[:30]!r}) hangs"
    assert box[0] is not None and "not a number" in box[0]


def test_largest_allowed_numbers_still_parse():
    assert parse_number("1e1000") == 10**1000 and parse_number("1e-1000") * 10**1000 == 1
    assert parse_number("9" * 2000) == int("9" * 2000)
    assert parse_number("1e0000000000010") == 10**10


def test_huge_exponent_answer_is_a_format_error_quickly(env):
    env.reset(task_id="comp-unit-L3-7")
    t0 = time.monotonic()
    obs = env.step(format_tool_call("answer", {"answer": "1e100000000"}))
    # a hang guard: the step takes a few milliseconds; building the number would take minutes
    assert obs.outcome is Outcome.FORMAT_ERROR and time.monotonic() - t0 < 5


# ---- 4. tolerances that fit what each kind asks -------------------------------------------------


def _verdict(task, answer):
    return LayeredVerifier(gate=[AnswerPresent()], correctness=AnswerTypeMatch()).verify(task, {"answer": answer})


def test_zero_is_not_accepted_for_a_tiny_unit_conversion(tasks):
    task = tasks.get("comp-unit-L3-7")
    assert task.hidden["answer"] == "0.0015146"
    assert _verdict(task, "0").outcome is Outcome.WRONG_ANSWER
    assert _verdict(task, "0.00151").outcome is Outcome.WRONG_ANSWER  # 3 significant figures, not 6
    assert _verdict(task, "0.0015146").outcome is Outcome.SUCCESS
    assert _verdict(task, task.hidden["exact"]).outcome is Outcome.SUCCESS  # unrounded is fine


def test_unit_conversions_are_graded_at_six_significant_figures(tasks):
    ids = [t for t in tasks.task_ids("test") if t.startswith("comp-unit")]
    assert len(ids) > 50
    for tid in ids:
        task = tasks.get(tid)
        exact = parse_number(task.hidden["exact"])
        six, five = f"{float(exact):.6g}", f"{float(exact):.5g}"
        assert _verdict(task, six).outcome is Outcome.SUCCESS, (tid, six)
        assert _verdict(task, f"{float(exact):.9g}").outcome is Outcome.SUCCESS, tid
        if parse_number(five) != parse_number(six):
            assert _verdict(task, five).outcome is Outcome.WRONG_ANSWER, (tid, five, six)


def test_statistics_accept_either_rounding_of_a_tie_but_not_the_neighbouring_value(tasks):
    from decimal import ROUND_HALF_DOWN, ROUND_HALF_EVEN, ROUND_HALF_UP, Decimal

    ties = 0
    for tid in [t for t in tasks.task_ids("train") if t.startswith("comp-stats")][:400]:
        task = tasks.get(tid)
        exact = parse_number(task.hidden["exact"])
        value = Decimal(exact.numerator) / Decimal(exact.denominator)
        roundings = {value.quantize(Decimal("0.01"), rounding=mode)
                     for mode in (ROUND_HALF_UP, ROUND_HALF_DOWN, ROUND_HALF_EVEN)}
        ties += len(roundings) > 1
        for answer in {*map(str, roundings), task.hidden["answer"]}:
            assert _verdict(task, answer).outcome is Outcome.SUCCESS, (tid, answer, task.hidden["exact"])
        for r in roundings:
            for neighbour in (r + Decimal("0.01"), r - Decimal("0.01")):
                if neighbour not in roundings:
                    assert _verdict(task, str(neighbour)).outcome is Outcome.WRONG_ANSWER, (tid, neighbour)
    assert ties > 10  # exact .xx5 means exist (n = 8), so both roundings really were tried


def test_the_suite_has_zero_and_just_outside_tolerance_attacks_and_they_fail(tasks):
    names = [c.name for c in computation_attacks()]
    assert "zero" in names and "just_outside_tolerance" in names
    ids = [t for t in tasks.task_ids("test") if t.startswith(("comp-unit", "comp-stats"))][:30]
    ids += [tasks.task_ids("test")[i] for i in range(0, len(tasks.task_ids("test")), 40)]
    ids += ["comp-unit-L3-7", "comp-stats-L3-65", "comp-fraction-L1-241"]  # tiny gold, gold 0, gold 0
    report = run_suite(lambda: envhub.make(ENV, split="test"), ids, cases=["zero", "just_outside_tolerance"])
    assert report.violations == 0, report.to_json()
    assert {r.outcome for r in report.results} <= {"wrong_answer", "format_error"}


# ---- 5. the rollout runner survives anything one episode does -----------------------------------


class _Breaking:
    """Gold play, but recording breaks for tasks whose id ends with 3 (how is the parameter)."""

    name = "breaking"

    def __init__(self, how):
        self.how = how

    def describe(self):
        return {}

    def start(self, env, obs, *, seed):
        agent = GoldPolicy().start(env, obs, seed=seed)
        if not env.episode.task.task_id.endswith("3"):
            return agent
        how = self.how

        class ExplodingIds(list):  # the ids of the env's reply, which break when they are recorded
            def __iter__(self):
                raise RuntimeError("observation_ids exploded")

        class Agent:
            turns = 0

            def act(self, obs):
                out = agent.act(obs)
                self.turns += 1
                if how == "observation_ids" and self.turns > 1:  # handed over with the next turn
                    out.observation_ids = ExplodingIds([0])
                return out

            def token_view(self):
                if how == "token_view":
                    raise RuntimeError("token_view exploded")
                if how == "invalid_record":  # token ids that TrajectoryRecord validation rejects
                    return SimpleNamespace(prompt_ids=[None], response_ids=[], response_mask=[],
                                           response_logprobs=[])
                return None

        return Agent()


@pytest.mark.parametrize("how, needle", [
    ("token_view", "token_view exploded"),
    ("observation_ids", "observation_ids exploded"),
    ("invalid_record", "validation error for TrajectoryRecord"),
])
def test_a_crash_while_recording_one_episode_is_that_episodes_env_error(tmp_path, how, needle):
    result = run_rollouts(ENV, _Breaking(how), out_dir=tmp_path, episodes=30, concurrency=3)
    records = list(read_jsonl(result.trajectories))
    assert len(records) == 30 and result.report["attempted"] == 30
    bad = [r for r in records if r["task_id"].endswith("3")]
    assert bad, "the plan must include a task that breaks"
    for r in bad:
        assert r["outcome"] == "env_error" and needle in r["outcome_detail"] and "Traceback" in r["outcome_detail"]
    assert all(r["outcome"] == "success" for r in records if not r["task_id"].endswith("3"))


def test_a_failing_on_episode_callback_does_not_end_the_run(tmp_path):
    seen = []

    def on_episode(record):
        seen.append(record.episode_id)
        if len(seen) == 2:
            raise RuntimeError("callback exploded")

    result = run_rollouts(ENV, GoldPolicy(), out_dir=tmp_path, episodes=6, concurrency=2, on_episode=on_episode)
    records = list(read_jsonl(result.trajectories))
    assert len(seen) == 6 and len(records) == 6
    [failed] = [r for r in records if r["outcome"] != "success"]
    assert failed["episode_id"] == seen[1] and failed["outcome"] == "env_error"
    assert "callback exploded" in failed["outcome_detail"] and "Traceback" in failed["outcome_detail"]


# ---- 6. env arguments that can never work fail up front -----------------------------------------


@pytest.mark.parametrize("kwargs, error, needle", [
    ({"sandbox": "bogus"}, ValueError, "unknown sandbox backend 'bogus'"),
    ({"sandbox": 3}, ValueError, "unknown sandbox backend"),
    ({"budget": 5}, TypeError, "budget must be a Budget"),
    ({"budget": "5"}, TypeError, "budget must be a Budget"),
    ({"budget": {"max_turns": "3"}}, TypeError, "max_turns must be an integer"),
    ({"budget": {"max_turns": True}}, TypeError, "max_turns must be an integer"),
    ({"budget": {"max_agent_seconds": "fast"}}, TypeError, "max_agent_seconds must be a number"),
    ({"budget": {"max_turns": -1}}, ValueError, "must not be negative"),
    ({"budget": {"turns": 3}}, TypeError, "unknown budget fields"),
    ({"parser": "nope"}, ValueError, "unknown tool-call parser"),
    ({"sandbox_pool": "8"}, TypeError, "sandbox_pool"),
])
def test_env_rejects_arguments_that_cannot_work(kwargs, error, needle):
    with pytest.raises(error, match=needle):
        envhub.make(ENV, **kwargs)


def test_env_accepts_every_valid_sandbox_and_budget_spelling(monkeypatch):
    monkeypatch.delenv("ENVHUB_SANDBOX", raising=False)
    for name in ("auto", "docker", "bwrap", "process"):
        assert envhub.make(ENV, sandbox=name).sandbox_backend == name
    assert envhub.make(ENV, budget={"max_turns": 3, "max_agent_seconds": 5}).budget.max_turns == 3
    assert envhub.make(ENV, budget=Budget(max_turns=2)).budget.max_turns == 2
    monkeypatch.setenv("ENVHUB_SANDBOX", "bogus")
    with pytest.raises(ValueError, match="ENVHUB_SANDBOX"):
        envhub.make(ENV)


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "envhub.cli", *args], capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("args, needle", [
    (["--sandbox", "bogus"], "unknown sandbox backend 'bogus'"),
    (["--env-arg", "budget=5"], "budget must be a Budget"),
])
def test_rollout_cli_fails_up_front_on_arguments_that_cannot_work(tmp_path, args, needle):
    res = _cli("rollout", ENV, "--episodes", "2", "--out", str(tmp_path), "--no-progress", *args)
    assert res.returncode == 2, (res.stdout, res.stderr)
    assert needle in res.stderr
    assert not (tmp_path / "trajectories.jsonl").exists()
