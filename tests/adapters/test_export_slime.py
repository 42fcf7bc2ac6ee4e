"""slime and Miles: exported samples follow their ``Sample`` schema, and the generate / agent
functions play envhub episodes over real HTTP.

Neither slime nor Miles installs on a CPU machine (they need SGLang and Megatron; the PyPI name
``slime`` is an unrelated package, Miles is not on PyPI), so ``Sample`` is mirrored here from
``slime/utils/types.py`` (Miles keeps it unchanged): the same fields, ``Status`` values and
``from_dict``. The generate function talks to a local stand-in for the SGLang router that answers
``POST /generate`` in SGLang's documented format; the Miles agent function talks to envhub's TITO
server, an OpenAI-compatible session endpoint like Miles' own session server.
"""

from __future__ import annotations

import asyncio
import json
import sys
import types
from dataclasses import dataclass, field, fields
from enum import Enum
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from token_runs import LocalServer, shared_token_run, smollm2_tokenizer

from envhub.adapters.export import export_run, load_records

TASK = {"env_id": "envhub/Computation-v0", "task_id": "comp-bigint-L1-0"}
LOOKUP = 'Let me look.\n<tool_call>{"name": "lookup", "arguments": {}}</tool_call>'
ANSWER = '<tool_call>{"name": "answer", "arguments": {"answer": "113784534491018915559968"}}</tool_call>'


@dataclass
class Sample:
    """Mirror of ``slime.utils.types.Sample`` (the fields envhub reads or writes, plus the rest)."""

    group_index: int | None = None
    index: int | None = None
    prompt: str | list[dict[str, str]] = ""
    tokens: list[int] = field(default_factory=list)
    multimodal_inputs: dict[str, Any] | None = None
    multimodal_train_inputs: dict[str, Any] | None = None
    response: str = ""
    response_length: int = 0
    label: str | None = None
    reward: float | dict[str, Any] | None = None
    loss_mask: list[int] | None = None
    weight_versions: list[str] = field(default_factory=list)
    rollout_log_probs: list[float] | None = None
    rollout_routed_experts: list[list[int]] | None = None
    remove_sample: bool = False
    teacher_log_probs: list[float] | None = None

    class Status(Enum):
        PENDING = "pending"
        COMPLETED = "completed"
        TRUNCATED = "truncated"
        ABORTED = "aborted"
        FAILED = "failed"

    status: Status = Status.PENDING
    metadata: dict = field(default_factory=dict)
    generate_function_path: str | None = None
    train_metadata: dict | None = None
    session_id: str | None = None
    non_generation_time: float = 0.0

    @staticmethod
    def from_dict(data: dict) -> Sample:
        data = dict(data)
        data["status"] = Sample.Status(data["status"])
        names = {f.name for f in fields(Sample)}
        return Sample(**{k: v for k, v in data.items() if k in names})

    def validate(self) -> None:  # the invariants slime's training path relies on
        assert len(self.tokens) >= self.response_length
        assert self.loss_mask is not None and len(self.loss_mask) == self.response_length
        assert self.rollout_log_probs is not None and len(self.rollout_log_probs) == self.response_length


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return shared_token_run(tmp_path_factory.getbasetemp())


@pytest.mark.parametrize("fmt", ["slime", "miles"])
def test_samples_follow_the_sample_schema(run_dir: Path, tmp_path: Path, fmt: str) -> None:
    export_run(run_dir, fmt, tmp_path, include_infra=True)
    rows = [json.loads(line) for line in (tmp_path / "samples.jsonl").read_text().splitlines()]
    names = {f.name for f in fields(Sample)}
    by_id = {r.episode_id: r for r in load_records(run_dir)}
    for row in rows:
        assert set(row) <= names
        sample = Sample.from_dict(row)
        sample.validate()
        rec = by_id[sample.metadata["envhub"]["episode_id"]]
        assert sample.tokens == rec.prompt_ids + rec.response_ids
        expected = {"success": "completed", "wrong_answer": "completed", "budget_exhausted": "truncated",
                    "engine_error": "aborted"}[rec.outcome.value]
        assert sample.status.value == expected
        assert sample.remove_sample == (rec.outcome.value == "engine_error")
    assert sorted({r["group_index"] for r in rows}) == list(range(len({r.group_id for r in by_id.values()})))
    prompts = [json.loads(line) for line in (tmp_path / "prompts.jsonl").read_text().splitlines()]
    assert {p["metadata"]["envhub"]["task_id"] for p in prompts} == {r.task_id for r in by_id.values()}
    # what `--load-debug-rollout-data DIR/rollout_{rollout_id}.pt` reads: torch.load(path)["samples"]
    import torch

    pack = torch.load(tmp_path / "rollout_0.pt")
    assert pack["samples"] == rows
    assert [Sample.from_dict(s).tokens for s in pack["samples"]] == [r["tokens"] for r in rows]


def _fake_sglang_router(script: list[str]) -> Any:
    """``POST /generate`` answering in SGLang's native format, from a script, with real tokens."""
    from fastapi import FastAPI

    tok = smollm2_tokenizer()
    end = tok.convert_tokens_to_ids("<|im_end|>")
    app = FastAPI()
    app.state.requests = []

    @app.post("/generate")
    def generate(body: dict[str, Any]) -> dict[str, Any]:
        app.state.requests.append(body)
        assert body["return_logprob"] is True and body["sampling_params"]["no_stop_trim"] is True
        turn = tok.decode(body["input_ids"]).count("<|im_start|>assistant\n") - 1
        ids = [*tok.encode(script[turn], add_special_tokens=False), end]
        return {"text": tok.decode(ids), "output_ids": ids, "meta_info": {
            "id": "r", "finish_reason": {"type": "stop", "matched": end}, "prompt_tokens": len(body["input_ids"]),
            "completion_tokens": len(ids), "weight_version": "w7",
            "output_token_logprobs": [[-0.2, t, None] for t in ids]}}

    return app


def _args(url: str) -> SimpleNamespace:
    from envhub.adapters.engines.tiny import build_tiny_model

    host, port = url.removeprefix("http://").split(":")
    return SimpleNamespace(sglang_router_ip=host, sglang_router_port=int(port), hf_checkpoint=str(build_tiny_model()),
                           rollout_max_context_len=4096, rollout_max_response_len=128)


def _check_played(sample: Sample) -> None:
    sample.validate()
    assert sample.status is Sample.Status.COMPLETED and sample.reward == 1.0
    assert sample.metadata["envhub"]["outcome"] == "success" and sample.weight_versions == ["w7", "w7"]
    assert 0 in sample.loss_mask and sample.loss_mask[0] == 1
    tok = smollm2_tokenizer()
    response = sample.tokens[len(sample.tokens) - sample.response_length:]
    sampled = [t for t, m in zip(response, sample.loss_mask, strict=True) if m]
    assert tok.decode(sampled) == sample.response


def test_slime_generate_plays_through_the_router() -> None:
    from envhub.adapters import slime

    app = _fake_sglang_router([LOOKUP, ANSWER])
    with LocalServer(app) as url:
        sample = Sample(index=3, group_index=1, prompt="ignored", metadata={"envhub": dict(TASK)})
        out = asyncio.run(slime.generate(_args(url), sample, {"temperature": 1.0, "top_p": 1.0, "top_k": -1,
                                                               "max_new_tokens": 64}))
    assert out is sample
    _check_played(sample)
    assert len(app.state.requests) == 2
    assert app.state.requests[1]["input_ids"][: len(app.state.requests[0]["input_ids"])] == \
        app.state.requests[0]["input_ids"]  # token in, token out: the second turn extends the first
    assert asyncio.run(slime.reward(None, sample)) == 1.0


def test_miles_generate_function(monkeypatch: pytest.MonkeyPatch) -> None:
    from envhub.adapters import miles

    @dataclass(frozen=True)
    class GenerateFnOutput:  # mirror of miles.rollout.base_types.GenerateFnOutput
        samples: Any

    for name in ("miles", "miles.rollout"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    base_types = types.ModuleType("miles.rollout.base_types")
    base_types.GenerateFnOutput = GenerateFnOutput  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "miles.rollout.base_types", base_types)

    app = _fake_sglang_router([LOOKUP, ANSWER])
    with LocalServer(app) as url:
        sample = Sample(index=0, group_index=0, metadata={"envhub": dict(TASK)})
        state = SimpleNamespace(args=_args(url))
        gen_input = SimpleNamespace(state=state, args=state.args, sample=sample, evaluation=False,
                                    sampling_params={"temperature": 1.0, "max_new_tokens": 64})
        out = asyncio.run(miles.generate(gen_input))
    assert isinstance(out, GenerateFnOutput) and out.samples is sample
    _check_played(sample)


def test_miles_agent_function_through_a_session_server() -> None:
    from envhub.adapters import miles
    from envhub.adapters.engines.scripted import ScriptedEngine
    from envhub.adapters.tito import TitoServer, create_app

    tok = smollm2_tokenizer()
    server = TitoServer(ScriptedEngine(tok, [LOOKUP, ANSWER]), tok)
    with LocalServer(create_app(server)) as url:
        import httpx

        session = httpx.post(f"{url}/sessions", json={}).json()
        meta = asyncio.run(miles.run_agent(base_url=session["base_url"], prompt="ignored",
                                           request_kwargs={"max_tokens": 64, "temperature": 1.0},
                                           metadata={"envhub": dict(TASK), "session_server_id": "x"}))
        traj = httpx.get(f"{session['base_url']}/trajectory").json()
    assert meta["envhub"]["outcome"] == "success" and meta["envhub"]["reward"] == 1.0
    assert traj["divergences"] == [] and traj["num_turns"] == 2
    sample = Sample(metadata={"envhub": dict(TASK)})
    sample.metadata.update(meta)  # what Miles' agentic generate does with the returned dict
    assert asyncio.run(miles.reward(None, sample)) == 1.0
