"""The TITO session server, driven by the real ``openai`` client over HTTP (uvicorn on 127.0.0.1).

The engine is the scripted test double (real SmolLM2 tokens, fixed logprobs) or the tiny random
model; the record must be token in, token out: the first request templated once, then only new
non-assistant messages appended (mask 0) and sampled tokens appended verbatim (mask 1).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

openai = pytest.importorskip("openai")

from token_runs import LocalServer, free_port, smollm2_tokenizer  # noqa: E402

from envhub.adapters.engines.scripted import ScriptedEngine  # noqa: E402
from envhub.adapters.tito import TitoServer, create_app  # noqa: E402
from envhub.sandboxes.spawner import stop  # noqa: E402

TOOLS = [{"type": "function", "function": {
    "name": "python", "description": "Run Python and return what it prints.",
    "parameters": {"type": "object", "properties": {"code": {"type": "string"}}, "required": ["code"]}}}]
CALL = 'I will compute it.\n<tool_call>\n{"name": "python", "arguments": {"code": "print(6*7)"}}\n</tool_call>'
FINAL = "The answer is 42."
START = [{"role": "system", "content": "You are precise."}, {"role": "user", "content": "What is 6*7?"}]


@contextmanager
def tito(script: Any, **engine_kw: Any) -> Iterator[tuple[str, TitoServer]]:
    tok = smollm2_tokenizer()
    server = TitoServer(ScriptedEngine(tok, script, logprob=-0.5, **engine_kw), tok)
    with LocalServer(create_app(server)) as url:
        yield url, server


def new_session(url: str) -> tuple[str, Any]:
    session = httpx.post(f"{url}/sessions", json={"metadata": {"run": "test"}}).json()
    return session["id"], openai.OpenAI(base_url=session["base_url"] + "/v1", api_key="unused", max_retries=0)


def trajectory(url: str, sid: str) -> dict[str, Any]:
    return httpx.get(f"{url}/sessions/{sid}/trajectory").json()


def as_history(message: Any) -> dict[str, Any]:
    return message.model_dump(exclude_none=True)


def test_tool_loop_is_token_exact() -> None:
    tok = smollm2_tokenizer()
    with tito([CALL, FINAL]) as (url, _):
        sid, client = new_session(url)
        first = client.chat.completions.create(model="m", messages=START, tools=TOOLS)
        msg = first.choices[0].message
        assert first.choices[0].finish_reason == "tool_calls"
        assert msg.content == "I will compute it." and msg.tool_calls[0].function.name == "python"
        assert json.loads(msg.tool_calls[0].function.arguments) == {"code": "print(6*7)"}
        history = [*START, as_history(msg), {"role": "tool", "tool_call_id": msg.tool_calls[0].id, "content": "42"}]
        second = client.chat.completions.create(model="m", messages=history, tools=TOOLS)
        assert second.choices[0].message.content == FINAL and second.choices[0].finish_reason == "stop"
        traj = trajectory(url, sid)
        summary = httpx.get(f"{url}/sessions/{sid}").json()

    assert traj["divergences"] == [] and len(traj["segments"]) == 1 and traj["num_turns"] == 2
    assert summary["requests"] == 2 and summary["metadata"] == {"run": "test"}
    end = tok.convert_tokens_to_ids("<|im_end|>")
    prompt_text = tok.apply_chat_template(START, tools=TOOLS, add_generation_prompt=True, tokenize=False)
    assert traj["prompt_ids"] == tok.encode(prompt_text, add_special_tokens=False)  # templated once
    ids, mask, lps = traj["response_ids"], traj["response_mask"], traj["response_logprobs"]
    assert len(ids) == len(mask) == len(lps)
    sampled = [t for t, m in zip(ids, mask, strict=True) if m]
    assert sampled == [*tok.encode(CALL, add_special_tokens=False), end,
                       *tok.encode(FINAL, add_special_tokens=False), end]  # verbatim
    assert all(lp == -0.5 if m else lp == 0.0 for lp, m in zip(lps, mask, strict=True))
    # the observation in between is masked and written with the template's own markers
    full = [*START, {"role": "assistant", "content": CALL}, {"role": "tool", "content": "42"},
            {"role": "assistant", "content": FINAL}]
    assert tok.decode(traj["prompt_ids"] + ids) == tok.apply_chat_template(full, tools=TOOLS, tokenize=False).rstrip("\n")
    assert first.usage.prompt_tokens == len(traj["prompt_ids"])
    extra = second.model_extra["envhub"]
    assert extra["session_id"] == sid and extra["token_ids"] == sampled[-len(extra["token_ids"]):]


def _two_turns(client: Any) -> list[dict[str, Any]]:
    first = client.chat.completions.create(model="m", messages=START, tools=TOOLS)
    msg = first.choices[0].message
    history = [*START, as_history(msg), {"role": "tool", "tool_call_id": msg.tool_calls[0].id, "content": "42"}]
    second = client.chat.completions.create(model="m", messages=history, tools=TOOLS)
    return [*history, as_history(second.choices[0].message)]


def _edited(h: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], int]:
    return [h[0], {"role": "user", "content": "What is 6*8?"}, *h[2:], {"role": "user", "content": "Sure?"}], 1


def _truncated(h: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], int]:
    return h[:2], 2  # a retry of the first request


def _compressed(h: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], int]:
    return [h[0], {"role": "user", "content": "Summary: we computed 42. Confirm."}], 1


def _reordered(h: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], int]:
    return [h[1], h[0], *h[2:], {"role": "user", "content": "Sure?"}], 0


def _assistant_not_sampled(h: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], int]:
    return [*h, {"role": "assistant", "content": "I wrote this myself."}, {"role": "user", "content": "Go on."}], len(h)


def _edited_assistant(h: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], int]:
    return [*h[:4], {"role": "assistant", "content": "The answer is 41."}, {"role": "user", "content": "Sure?"}], 4


@pytest.mark.parametrize(("kind", "change"), [
    ("edited", _edited), ("truncated", _truncated), ("compressed", _compressed), ("reordered", _reordered),
    ("assistant_not_sampled", _assistant_not_sampled), ("edited", _edited_assistant),
])
def test_divergence_is_recorded_and_rebased(kind: str, change: Any) -> None:
    tok = smollm2_tokenizer()
    script = [CALL, FINAL, "Yes.", "Still yes."]

    def respond(prompt: str) -> str:
        return script[min(respond.calls, len(script) - 1)]

    respond.calls = 0  # type: ignore[attr-defined]

    def counting(prompt: str) -> str:
        text = respond(prompt)
        respond.calls += 1  # type: ignore[attr-defined]
        return text

    with tito(counting) as (url, _):
        sid, client = new_session(url)
        history = _two_turns(client)
        before = trajectory(url, sid)["segments"][0]
        messages, at = change(history)
        third = client.chat.completions.create(model="m", messages=messages, tools=TOOLS)
        after = trajectory(url, sid)
        # the conversation goes on from the re-based segment without further divergence
        messages = [*messages, as_history(third.choices[0].message), {"role": "user", "content": "Thanks."}]
        client.chat.completions.create(model="m", messages=messages, tools=TOOLS)
        final = trajectory(url, sid)
        summary = httpx.get(f"{url}/sessions/{sid}").json()

    (div,) = after["divergences"]
    assert div["kind"] == kind and div["at_message"] == at and div["request"] == 2
    assert div["closed_segment"] == 0 and div["new_segment"] == 1
    assert summary["divergences"] == final["divergences"] and len(final["divergences"]) == 1
    assert final["segments"][0] == before  # the sampled record is never rewritten
    seg = final["segments"][1]
    assert seg["started_by"] == "divergence:0"
    rendered = tok.apply_chat_template(messages[: len(messages) - 2], tools=TOOLS, add_generation_prompt=True,
                                       tokenize=False)
    assert seg["prompt_ids"] == tok.encode(rendered, add_special_tokens=False)  # a fresh, honest prompt
    assert seg["num_turns"] == 2 and final["prompt_ids"] == seg["prompt_ids"]
    assert 0 in seg["response_mask"]


def test_changed_tools_rebase() -> None:
    with tito([CALL, FINAL, "ok"]) as (url, _):
        sid, client = new_session(url)
        first = client.chat.completions.create(model="m", messages=START, tools=TOOLS)
        history = [*START, as_history(first.choices[0].message),
                   {"role": "tool", "tool_call_id": first.choices[0].message.tool_calls[0].id, "content": "42"}]
        client.chat.completions.create(model="m", messages=history)  # tools dropped
        assert trajectory(url, sid)["divergences"][0]["kind"] == "tools_changed"


def test_failed_request_leaves_no_trace() -> None:
    from envhub.errors import EngineError

    failures = [EngineError("replica died")]

    def respond(prompt: str) -> str:
        turn = prompt.count("<|im_start|>assistant\n") - 1
        if turn == 1 and failures:
            raise failures.pop()
        return CALL if turn == 0 else FINAL

    with tito(respond) as (url, _):
        sid, client = new_session(url)
        first = client.chat.completions.create(model="m", messages=START, tools=TOOLS)
        msg = first.choices[0].message
        history = [*START, as_history(msg), {"role": "tool", "tool_call_id": msg.tool_calls[0].id, "content": "42"}]
        clean = trajectory(url, sid)
        with pytest.raises(openai.InternalServerError):
            client.chat.completions.create(model="m", messages=history, tools=TOOLS)
        assert trajectory(url, sid) == clean  # rolled back
        client.chat.completions.create(model="m", messages=history, tools=TOOLS)  # the retry
        traj = trajectory(url, sid)
        summary = httpx.get(f"{url}/sessions/{sid}").json()
    assert traj["divergences"] == [] and traj["num_turns"] == 2
    assert summary["requests"] == 3 and summary["failed_requests"] == 1
    assert traj["response_ids"][: len(clean["response_ids"])] == clean["response_ids"]


def test_real_model_session() -> None:
    import torch
    from transformers import AutoModelForCausalLM

    from envhub.adapters.engines.tiny import build_tiny_model
    from envhub.adapters.engines.transformers_engine import TransformersEngine

    tok = smollm2_tokenizer()
    engine = TransformersEngine(AutoModelForCausalLM.from_pretrained(str(build_tiny_model()), dtype=torch.float32),
                                tok, seed=0)
    server = TitoServer(engine, tok)
    try:
        with LocalServer(create_app(server)) as url:
            sid, client = new_session(url)
            first = client.chat.completions.create(model="m", messages=START, max_tokens=6, temperature=0.7, seed=1)
            history = [*START, as_history(first.choices[0].message), {"role": "user", "content": "Again."}]
            second = client.chat.completions.create(model="m", messages=history, max_tokens=6, temperature=0.0,
                                                    logprobs=True)
            traj = trajectory(url, sid)
    finally:
        engine.close()
    assert traj["divergences"] == [] and traj["num_turns"] == 2
    sampled = [t for t, m in zip(traj["response_ids"], traj["response_mask"], strict=True) if m]
    assert sampled == first.model_extra["envhub"]["token_ids"] + second.model_extra["envhub"]["token_ids"]
    for lp, m in zip(traj["response_logprobs"], traj["response_mask"], strict=True):
        assert (lp <= 0.0 and lp > float("-inf")) if m else lp == 0.0
    assert [c.logprob for c in second.choices[0].logprobs.content] == second.model_extra["envhub"]["logprobs"]
    assert first.choices[0].finish_reason in ("stop", "length")


def test_sessionless_requests_do_not_accumulate_sessions() -> None:
    tok = smollm2_tokenizer()
    server = TitoServer(ScriptedEngine(tok, lambda prompt: FINAL, logprob=-0.5), tok, max_sessionless=3)
    with LocalServer(create_app(server)) as url:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)
        ids = [client.chat.completions.create(model="m", messages=START).model_extra["envhub"]["session_id"]
               for _ in range(6)]
        with pytest.raises(openai.BadRequestError):  # a failed request keeps no session either
            client.chat.completions.create(model="m", messages=[{"role": "robot", "content": "hi"}])
        assert len(server._sessions) == 3 and httpx.get(f"{url}/info").json()["sessions"] == 3
        assert trajectory(url, ids[-1])["num_turns"] == 1  # the most recent stay readable
        assert httpx.get(f"{url}/sessions/{ids[0]}").status_code == 404  # the oldest went
        sid, _ = new_session(url)  # explicit sessions are not subject to the cap
        for _ in range(4):
            client.chat.completions.create(model="m", messages=START)
        assert httpx.get(f"{url}/sessions/{sid}").status_code == 200 and len(server._sessions) == 4


def test_server_reports_its_tokenizer() -> None:
    from envhub.adapters.chat_format import template_hash

    tok = smollm2_tokenizer()
    with tito(lambda prompt: FINAL) as (url, _):
        info = httpx.get(f"{url}/info").json()
        sid, _ = new_session(url)
        summary = httpx.get(f"{url}/sessions/{sid}").json()
    assert info["tokenizer"] == tok.name_or_path and info["chat_template_hash"] == template_hash(tok.chat_template)
    assert info["chat_format"] == "chatml" and summary["server"]["tokenizer"] == info["tokenizer"]


def test_sessionless_and_streaming() -> None:
    with tito(lambda prompt: FINAL) as (url, _):
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)
        one = client.chat.completions.create(model="m", messages=START)
        sid = one.model_extra["envhub"]["session_id"]
        assert trajectory(url, sid)["num_turns"] == 1
        assert [m.id for m in client.models.list().data]
        sid2, session_client = new_session(url)
        chunks = list(session_client.chat.completions.create(model="m", messages=START, stream=True))
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert text == FINAL and chunks[-1].choices[0].finish_reason == "stop"
        assert trajectory(url, sid2)["num_turns"] == 1


def test_errors_use_openai_shapes() -> None:
    with tito(lambda prompt: FINAL, max_context=64) as (url, _):
        missing = openai.OpenAI(base_url=f"{url}/sessions/nope/v1", api_key="unused", max_retries=0)
        with pytest.raises(openai.NotFoundError):
            missing.chat.completions.create(model="m", messages=START)
        _, client = new_session(url)
        with pytest.raises(openai.BadRequestError) as info:
            client.chat.completions.create(model="m", messages=[*START, {"role": "user", "content": "x " * 200}])
        assert info.value.code == "context_length_exceeded"
        with pytest.raises(openai.BadRequestError):
            client.chat.completions.create(model="m", messages=START, n=2)
        with pytest.raises(openai.BadRequestError):
            client.chat.completions.create(model="m", messages=[{"role": "robot", "content": "hi"}])
        assert httpx.post(f"{url}/sessions", json={"session_id": "fixed"}).status_code == 200
        assert httpx.post(f"{url}/sessions", json={"session_id": "fixed"}).status_code == 409
        assert httpx.delete(f"{url}/sessions/fixed").status_code == 200
        assert httpx.get(f"{url}/sessions/fixed").status_code == 404


def test_envhub_rollout_through_tito_is_trainable(tmp_path: Path) -> None:
    """An envhub episode played over the OpenAI protocol yields a token-exact, exportable record."""
    from envhub.adapters.export import export_run, load_records, read_export
    from envhub.adapters.openai_policy import OpenAIChatPolicy
    from envhub.rollout.runner import run_rollouts

    tok = smollm2_tokenizer()

    def respond(prompt: str) -> str:
        turn = prompt.count("<|im_start|>assistant\n") - 1
        return 'Check.\n<tool_call>{"name": "lookup", "arguments": {}}</tool_call>' if turn == 0 else \
            '<tool_call>{"name": "answer", "arguments": {"answer": "0"}}</tool_call>'

    with tito(respond) as (url, server):
        policy = OpenAIChatPolicy(url, tito=True, request_kwargs={"max_tokens": 64})
        run_rollouts("envhub/Computation-v0", policy, out_dir=tmp_path / "run", episodes=2, concurrency=2)
        assert server._sessions == {}  # every episode deleted its session when it ended
        policy.close()
    records = load_records(tmp_path / "run")
    assert {r.outcome.value for r in records} == {"wrong_answer"}
    from envhub.adapters.audit import audit_run
    from envhub.adapters.chat_format import template_hash

    for rec in records:  # the server's tokenizer is on the record, so the audit can decode it
        assert rec.versions.tokenizer == tok.name_or_path
        assert rec.versions.chat_template_hash == template_hash(tok.chat_template)
    audit = audit_run(tmp_path / "run")
    assert audit["with_tokens"] == 2 and audit["errors"] == 0, audit["issues"]
    for rec in records:
        assert rec.num_turns == 2 and rec.prompt_ids
        runs: list[list[int]] = []  # maximal stretches of sampled (mask 1) tokens
        for i, (t, m) in enumerate(zip(rec.response_ids, rec.response_mask, strict=True)):
            if m and (i == 0 or not rec.response_mask[i - 1]):
                runs.append([])
            if m:
                runs[-1].append(t)
        assert runs == [turn.token_ids for turn in rec.turns]
        for turn in rec.turns:  # decoding each turn's sampled tokens gives back its action text
            assert tok.decode(turn.token_ids) == turn.action_text
        assert rec.turns[0].observation_ids and set(rec.response_mask) == {0, 1}
    export_run(tmp_path / "run", "trl", tmp_path / "trl")
    assert [r["response_ids"] for r in read_export(tmp_path / "trl", "trl")] == [r.response_ids for r in records]


def test_policy_close_deletes_sessions_left_open() -> None:
    """An episode whose record was never read (it crashed) still gets its session deleted."""
    import envhub
    from envhub.adapters.openai_policy import OpenAIChatPolicy

    env = envhub.make("envhub/Computation-v0", sandbox="process")
    with tito(lambda prompt: FINAL) as (url, server):
        policy = OpenAIChatPolicy(url, tito=True)
        obs = env.reset(task_id=env.tasks.task_ids("train")[0])
        agents = [policy.start(env, obs, seed=i) for i in range(2)]
        agents[0].act(obs)
        assert len(server._sessions) == 2
        assert agents[0].token_view() is not None and len(server._sessions) == 1  # read: closed
        policy.close()
        assert server._sessions == {}
    env.close()


@pytest.mark.slow
def test_tito_command_serves_a_model() -> None:
    """``envhub tito --model hf:PATH --port P`` (the command function, run as a process)."""
    from envhub.adapters.engines.tiny import build_tiny_model

    port = free_port()
    code = "import typer; from envhub.adapters.tito.cli import tito_command; typer.run(tito_command)"
    proc = subprocess.Popen([sys.executable, "-c", code, "--model", f"hf:{build_tiny_model()}", "--port", str(port),
                             "--max-tokens", "4"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            env={**os.environ, "TOKENIZERS_PARALLELISM": "false"})
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert proc.poll() is None, proc.stdout.read().decode() if proc.stdout else ""
            assert time.monotonic() < deadline, "the TITO server did not come up"
            time.sleep(0.3)
        sid, client = new_session(f"http://127.0.0.1:{port}")
        reply = client.chat.completions.create(model="m", messages=START)
        assert reply.usage.completion_tokens <= 4
        assert trajectory(f"http://127.0.0.1:{port}", sid)["num_turns"] == 1
    finally:
        stop(proc, 20)
