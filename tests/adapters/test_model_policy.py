"""The model policy: token in, token out, through the real rollout runner and env.

Two stand-ins for a model: the tiny random Llama (real engine, never calls tools) and a
:class:`ScriptedEngine` (a test double of the *model* that returns real tokens of scripted
tool-call text), which drives the full tool loop to success.
"""

from __future__ import annotations

import pytest

from envhub.adapters.audit import audit_run
from envhub.adapters.chat_format import ChatMLFormat, SegmentEncoder, message_dicts
from envhub.adapters.engines.scripted import ScriptedEngine
from envhub.adapters.engines.tiny import build_tiny_model
from envhub.errors import EngineError
from envhub.parsing import format_tool_call
from envhub.policies import make_policy
from envhub.registry import make
from envhub.rollout.runner import plan_episodes, run_rollouts
from envhub.store import read_jsonl
from envhub.types import Message, Outcome, ToolSpec, TrajectoryRecord

ENV = "envhub/Computation-v0"
ENV_KW = {"sandbox": "process", "kinds": ["fraction"], "levels": [1]}  # few tasks: fast env construction


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def tiny():
    return build_tiny_model()


@pytest.fixture(scope="module")
def tokenizer(tiny):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(tiny))


def records(path) -> list[TrajectoryRecord]:
    return [TrajectoryRecord.model_validate(r) for r in read_jsonl(path / "trajectories.jsonl")]


# ---- the chat format agrees with the stored template ------------------------------------------------

TOOLS = [ToolSpec(name="python", description="Run code.", parameters={"type": "object", "properties": {
    "code": {"type": "string"}}, "required": ["code"]}), ToolSpec(name="answer", description="Submit é.")]
START = [Message(role="system", content="Solve it."), Message(role="user", content="What is 6*7?")]


def test_prompt_has_qwen_style_tool_instructions(tokenizer):
    text = ChatMLFormat().render_prompt(tokenizer, START, TOOLS)
    assert text == (
        "<|im_start|>system\nSolve it.\n\n# Tools\n\nYou may call one or more functions to assist with the user "
        "query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
        + ChatMLFormat.tools_text(TOOLS) + "\n</tools>\n\nFor each function call, return a json object with "
        "function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": "
        "<function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n<|im_start|>user\n"
        "What is 6*7?<|im_end|>\n<|im_start|>assistant\n")
    assert '"Submit é."' in text  # tojson keeps non-ASCII, as tools_text does
    no_system = tokenizer.apply_chat_template(message_dicts(START[1:]), tokenize=False)
    assert no_system.startswith("<|im_start|>system\nYou are a helpful AI assistant named SmolLM")


@pytest.mark.parametrize("closed", [True, False])
def test_observation_rendering_matches_the_template(tokenizer, closed):
    fmt = ChatMLFormat()
    reply = [Message(role="tool", name="python", content="42\n"), Message(role="tool", name="python", content="x"),
             Message(role="user", content="Format error: no tool call found.")]
    action = '<tool_call>{"name": "python", "arguments": {"code": "print(6*7)"}}</tool_call>'
    history = [*START, Message(role="assistant", content=action)]
    full = tokenizer.apply_chat_template(message_dicts(history + reply), tools=[t.to_openai() for t in TOOLS],
                                         add_generation_prompt=True, tokenize=False)
    prompt = fmt.render_prompt(tokenizer, START, TOOLS)
    sampled = action + ("<|im_end|>" if closed else "")
    assert full == prompt + sampled + fmt.observation_text(reply, closed=closed)


def test_segment_encoder_gives_the_tokenizers_ids(tokenizer):
    encoder = SegmentEncoder(tokenizer)
    assert encoder.exact
    texts = [ChatMLFormat().render_prompt(tokenizer, START, TOOLS),
             ChatMLFormat().observation_text([Message(role="tool", content="a <filename> b\n\n  c<|im_end|>")],
                                             closed=False),
             "  leading spaces<|im_start|><|im_start|>x\u00e9\u4e2d\U0001f600 tail  ", ""]
    for text in texts * 2:  # the second round comes from the cache
        assert encoder.encode(text) == tokenizer.encode(text, add_special_tokens=False)


# ---- the scripted model drives the tool loop -----------------------------------------------------------

def gold_script(episodes: int, seed: int = 0) -> dict[str, list[str]]:
    """Task prompt -> the gold action texts, for the episodes the runner will plan."""
    env = make(ENV, **ENV_KW)
    plans = plan_episodes(ENV, env.tasks.task_ids("train"), episodes=episodes, seed=seed)
    script = {}
    for plan in plans:
        task = env.tasks.get(plan.task_id)
        script[task.prompt] = [a.text for a in env.gold_actions(task)]
    env.close()
    return script


def scripted_policy(tiny, tokenizer, script: dict[str, list[str]], **kwargs):
    def respond(prompt: str) -> str:
        turn = prompt.count("<|im_start|>assistant\n") - 1
        return next(texts[turn] for task, texts in script.items() if task in prompt)

    engine = ScriptedEngine(tokenizer, respond, **kwargs)
    return make_policy(f"hf:{tiny}", engine=engine, max_new_tokens=512)


def test_scripted_tool_loop_succeeds_with_exact_masks(tiny, tokenizer, tmp_path):
    script = gold_script(3)
    report = run_rollouts(ENV, scripted_policy(tiny, tokenizer, script), out_dir=tmp_path, episodes=3,
                          concurrency=3, env_kwargs=ENV_KW).report
    assert report["by_outcome"]["success"] == 3, report["by_outcome"]
    end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    for rec in records(tmp_path):
        gold = script[next(m.content for m in rec.messages if m.role == "user")]
        run, answer = rec.turns
        assert run.token_ids == [*tokenizer.encode(gold[0], add_special_tokens=False), end]
        assert answer.token_ids == [*tokenizer.encode(gold[1], add_special_tokens=False), end]
        assert run.action_text == gold[0] + "<|im_end|>" == tokenizer.decode(run.token_ids)
        printed = run.observation[0].content
        assert run.observation_ids == tokenizer.encode(
            f"\n<|im_start|>user\n<tool_response>\n{printed}\n</tool_response><|im_end|>\n<|im_start|>assistant\n",
            add_special_tokens=False)
        assert answer.observation_ids == []
        assert rec.response_ids == run.token_ids + run.observation_ids + answer.token_ids
        assert rec.response_mask == [1] * len(run.token_ids) + [0] * len(run.observation_ids) + [1] * len(
            answer.token_ids)
        assert rec.response_logprobs == [-0.5] * len(run.token_ids) + [0.0] * len(run.observation_ids) + [
            -0.5] * len(answer.token_ids)
        assert rec.versions.weight_versions == ["scripted-0", "scripted-0"]
        assert rec.versions.chat_template_hash and rec.sampling_params["stop_token_ids"] == [end]
    audit = audit_run(tmp_path)
    assert audit["errors"] == 0 and audit["with_tokens"] == 3, audit["issues"]
    assert audit["drift"]["drifted"] == 0, audit["drift"]  # these texts re-tokenize canonically


def test_a_turn_without_end_token_gets_one_inserted_with_mask_0(tiny, tokenizer, tmp_path):
    script = gold_script(1)
    policy = scripted_policy(tiny, tokenizer, script, end_token=None)
    assert run_rollouts(ENV, policy, out_dir=tmp_path, episodes=1, env_kwargs=ENV_KW).report["by_outcome"][
        "success"] == 1
    (rec,) = records(tmp_path)
    end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    run = rec.turns[0]
    assert run.token_ids[-1] != end and run.observation_ids[0] == end
    assert rec.response_mask[len(run.token_ids)] == 0
    assert audit_run(tmp_path)["errors"] == 0


# ---- the real (tiny) model through the real runner ---------------------------------------------------

def test_tiny_model_rollout_passes_the_audit(tiny, tmp_path):
    policy = make_policy(f"hf:{tiny}?max_new_tokens=16&temperature=1.0")
    try:
        report = run_rollouts(ENV, policy, out_dir=tmp_path, episodes=4, concurrency=4, env_kwargs=ENV_KW).report
    finally:
        policy.close()
    assert report["attempted"] == 4 and report["by_class"]["infra_failure"] == 0, report["by_outcome"]
    recs = records(tmp_path)
    assert all(r.num_turns >= 1 and sum(r.response_mask) > 0 for r in recs)
    for rec in recs:
        for turn in rec.turns:
            assert turn.action_text == policy.tokenizer.decode(turn.token_ids)
            assert turn.finish_reason in ("stop", "length") and turn.weight_version == "0"
    audit = audit_run(tmp_path, model=str(tiny))
    assert audit["errors"] == 0, audit["issues"]
    assert audit["mismatch"]["tokens"] == sum(sum(r.response_mask) for r in recs)
    assert audit["mismatch"]["max_abs_delta"] < 1e-4


# ---- truncation and failures ---------------------------------------------------------------------------

def prompt_length(tiny, tokenizer) -> int:
    env = make(ENV, **ENV_KW)
    plan = plan_episodes(ENV, env.tasks.task_ids("train"), episodes=1)[0]
    obs = env.reset(task_id=plan.task_id)
    env.close()
    policy = scripted_policy(tiny, tokenizer, {})
    return len(policy.start(env, obs, seed=0).prompt_ids)


def test_context_overflow_when_the_next_turn_would_not_fit(tiny, tokenizer, tmp_path):
    script = gold_script(1)
    n = prompt_length(tiny, tokenizer)
    engine = ScriptedEngine(tokenizer, lambda p: next(t for k, t in script.items() if k in p)[0])
    policy = make_policy(f"hf:{tiny}", engine=engine, max_new_tokens=200, max_context=n + 250)
    report = run_rollouts(ENV, policy, out_dir=tmp_path, episodes=1, env_kwargs=ENV_KW).report
    assert report["by_outcome"]["context_overflow"] == 1
    (rec,) = records(tmp_path)
    assert rec.num_turns == 1 and rec.outcome is Outcome.CONTEXT_OVERFLOW and "max_context" in rec.outcome_detail
    assert rec.turns[0].observation_ids == [] and rec.response_mask[-1] == 1  # ends with what was sampled
    assert len(rec.prompt_ids) + len(rec.response_ids) <= n + 250
    assert audit_run(tmp_path)["errors"] == 0

    tight = make_policy(f"hf:{tiny}", engine=engine, max_new_tokens=200, max_context=n + 100)
    report = run_rollouts(ENV, tight, out_dir=tmp_path / "first", episodes=1, env_kwargs=ENV_KW).report
    assert report["by_outcome"]["context_overflow"] == 1  # not even the first turn fits
    audit = audit_run(tmp_path / "first")
    assert audit["errors"] == 0 and audit["drift"]["drifted"] == 0  # the prompt alone, as rendered


def test_engine_failures_are_engine_errors(tiny, tokenizer, tmp_path):
    failing = make_policy(f"hf:{tiny}", engine=ScriptedEngine(tokenizer, [], fail_with=EngineError("server gone")))
    report = run_rollouts(ENV, failing, out_dir=tmp_path / "a", episodes=2, env_kwargs=ENV_KW).report
    assert report["by_outcome"]["engine_error"] == 2 and report["by_class"]["infra_failure"] == 2

    calls = {"n": 0}

    def second_turn_fails(prompt: str) -> str:
        calls["n"] += 1
        if calls["n"] > 1:
            raise EngineError("aborted by the server")
        return format_tool_call("python", {"code": "print(1)"})

    flaky = make_policy(f"hf:{tiny}", engine=ScriptedEngine(tokenizer, second_turn_fails))
    report = run_rollouts(ENV, flaky, out_dir=tmp_path / "b", episodes=1, env_kwargs=ENV_KW).report
    assert report["by_outcome"]["engine_error"] == 1
    (rec,) = records(tmp_path / "b")
    assert rec.num_turns == 1 and rec.turns[0].observation_ids == [] and rec.response_mask[-1] == 1
    assert audit_run(tmp_path / "b")["errors"] == 0


def test_policy_spec_options(tiny, tokenizer):
    policy = make_policy(f"hf:{tiny}?temperature=0&max_new_tokens=8&top_k=5", engine=ScriptedEngine(tokenizer, []))
    assert policy.params.temperature == 0.0 and policy.params.max_new_tokens == 8 and policy.params.top_k == 5
    assert policy.describe()["sampling_params"]["max_new_tokens"] == 8
    with pytest.raises(ValueError, match="unknown policy option"):
        make_policy(f"hf:{tiny}?temprature=0")
    with pytest.raises(ValueError):
        make_policy("hf:/no/such/model/dir")


def test_trajectory_benchmark_runs():
    from envhub.adapters.bench import run_bench

    lines: list[str] = []
    result = run_bench(out=lines.append, episodes=2, turns=(2, 3), repeats=1)
    assert result["speedup"] > 0 and result["headline_turns"] == 3 and len(result["runs"]) == 2
    assert result["runs"][1]["tokens_per_episode"] > result["runs"][0]["tokens_per_episode"] > 0
    assert len(lines) == 5


# ---- local models -----------------------------------------------------------------------------------

def test_model_resolution_and_atomic_preparation(tiny, tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from envhub.adapters.engines import models
    from envhub.adapters.engines.cli import models_app

    monkeypatch.setenv("ENVHUB_CACHE", str(tmp_path / "cache"))
    assert models.resolve_model(str(tiny)) == tiny
    assert models.resolve_model(f"hf:{tiny}?temperature=0") == tiny  # the policy's spelling names it too
    with pytest.raises(ValueError, match="not prepared"):
        models.resolve_model("smollm2-135m", prepare=False)
    with pytest.raises(ValueError, match="neither a known model"):
        models.resolve_model(str(tmp_path))
    assert models.find_gguf(models.KNOWN_MODELS["smollm2-135m"]).suffix == ".gguf"

    final = tmp_path / "cache" / "models" / "m"
    with pytest.raises(RuntimeError), models.atomic_dir(final) as tmp:
        (tmp / "half.bin").write_text("x")
        raise RuntimeError("killed mid-conversion")
    assert not final.exists() and list(final.parent.iterdir()) == []
    with models.atomic_dir(final) as tmp:
        (tmp / models.MARKER).write_text("{}")
    assert models.is_prepared(final) and list(final.parent.iterdir()) == [final]

    runner = CliRunner()
    listed = runner.invoke(models_app, ["list"])
    assert listed.exit_code == 0 and "smollm2-135m\tnot prepared" in listed.output
    assert runner.invoke(models_app, ["path", "smollm2-135m"]).exit_code == 2
    assert runner.invoke(models_app, ["path", str(tiny)]).output.strip() == str(tiny)
