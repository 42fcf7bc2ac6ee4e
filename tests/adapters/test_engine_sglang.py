"""The SGLang client against a small real HTTP server that replays SGLang's documented format.

SGLang does not run on our CPU machines. The server below is a fixture of SGLang's native API as
its documentation and source define it (``tests/fixtures/sglang_*.json`` say where each shape comes
from), not SGLang itself; ``test_live_sglang`` talks to the real thing where sglang and a GPU exist.
"""

from __future__ import annotations

import importlib.util
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from envhub.adapters.engines import SamplingParams
from envhub.adapters.engines.sglang_client import (
    SGLangEngine,
    SGLangLaunchConfig,
    build_launch_command,
    generate_request,
    parse_generate_response,
)
from envhub.errors import ContextOverflowError, EngineError

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def fixture(name: str) -> dict[str, Any]:
    data = json.loads((FIXTURES / f"sglang_{name}.json").read_text())
    return {k: v for k, v in data.items() if not k.startswith("_")}


class FakeSGLang:
    """A stdlib HTTP server with SGLang's routes; ``generate`` answers come from a queue of fixtures."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, str, Any]] = []
        self.generate_answers: list[tuple[int, dict[str, Any]]] = []
        self.health_status = 200
        self.flush_status = 200
        self.update_answer = (200, fixture("update_weights_response"))
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _reply(self, status: int, body: Any) -> None:
                raw = body.encode() if isinstance(body, str) else json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "text/plain" if isinstance(body, str) else "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def _body(self) -> Any:
                n = int(self.headers.get("Content-Length") or 0)
                return json.loads(self.rfile.read(n)) if n else None

            def do_GET(self) -> None:
                owner.requests.append(("GET", self.path, None))
                if self.path == "/health":
                    self._reply(owner.health_status, "")
                elif self.path == "/get_model_info":
                    self._reply(200, fixture("get_model_info"))
                elif self.path == "/get_server_info":
                    self._reply(200, fixture("get_server_info"))
                else:
                    self._reply(404, {"detail": "Not Found"})

            def do_POST(self) -> None:
                body = self._body()
                owner.requests.append(("POST", self.path, body))
                if self.path == "/generate":
                    status, answer = owner.generate_answers.pop(0) if owner.generate_answers else (
                        200, fixture("generate_response_stop"))
                    self._reply(status, answer)
                elif self.path == "/flush_cache":
                    self._reply(owner.flush_status, "Cache flushed.\nPlease check backend logs for more details. (When "
                                "there are running or waiting requests, the operation will not be performed.)\n")
                elif self.path == "/update_weights_from_disk":
                    self._reply(*owner.update_answer)
                else:
                    self._reply(404, {"detail": "Not Found"})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def server():
    fake = FakeSGLang()
    yield fake
    fake.close()


REQUEST_PARAMS = SamplingParams(max_new_tokens=16, temperature=0.7, top_p=0.9, stop=("</tool_call>",),
                                stop_token_ids=(2,))


def test_request_body_follows_generate_req_input():
    expected = fixture("generate_request")
    assert generate_request(expected["input_ids"], REQUEST_PARAMS) == expected


def test_generate_reads_tokens_logprobs_finish_and_version(server):
    engine = SGLangEngine(server.url)
    expected = fixture("generate_response_stop")
    with pytest.warns(RuntimeWarning, match="top_p=0.9"):  # its logprobs are not of the top-p set
        out = engine.generate(fixture("generate_request")["input_ids"], REQUEST_PARAMS)
    triples = expected["meta_info"]["output_token_logprobs"]
    assert out.token_ids == [t[1] for t in triples] == expected["output_ids"]
    assert out.logprobs == [t[0] for t in triples]
    assert out.finish_reason == "stop" and out.meta["matched"] == 2
    assert out.weight_version == "default" == engine.weight_version
    method, path, body = server.requests[-1]
    assert (method, path) == ("POST", "/generate") and body == fixture("generate_request")
    assert engine.max_context == 2048  # from /get_server_info


def test_length_finish_and_weight_version_change(server):
    server.generate_answers.append((200, fixture("generate_response_length")))
    engine = SGLangEngine(server.url, max_context=4096)
    out = engine.generate([1, 2, 3], SamplingParams(max_new_tokens=6))
    assert out.finish_reason == "length" and len(out.token_ids) == 6 and out.weight_version == "step-3"
    assert engine.max_context == 4096 and not any(p == "/get_server_info" for _, p, _ in server.requests)


@pytest.mark.parametrize("status,answer", [
    (200, "generate_response_abort"),
    (400, "generate_error"),
])
def test_aborts_and_errors_are_engine_errors(server, status, answer):
    server.generate_answers.append((status, fixture(answer)))
    with pytest.raises(EngineError):
        SGLangEngine(server.url, max_context=4096).generate([1, 2, 3], SamplingParams())


@pytest.mark.parametrize("answer", ["generate_error_context_length", "generate_error_context_total"])
def test_context_length_errors_are_context_overflow(server, answer):
    """SGLang's 400 for a request that does not fit the context is the model's context overflow,
    not an engine failure (infra)."""
    server.generate_answers.append((400, fixture(answer)))
    with pytest.raises(ContextOverflowError, match="context length"):
        SGLangEngine(server.url, max_context=4096).generate([1, 2, 3], SamplingParams())
    with pytest.raises(ContextOverflowError):  # the same message in a 200 error object
        parse_generate_response(fixture(answer))


def test_a_context_length_error_ends_the_episode_as_context_overflow(server, tmp_path):
    from envhub.adapters.engines.tiny import build_tiny_model
    from envhub.policies import make_policy
    from envhub.rollout.runner import run_rollouts

    server.generate_answers.append((400, fixture("generate_error_context_total")))
    policy = make_policy(f"sglang:{server.url}?tokenizer={build_tiny_model()}&max_new_tokens=64")
    report = run_rollouts("envhub/Computation-v0", policy, out_dir=tmp_path, episodes=1,
                          env_kwargs={"sandbox": "process", "kinds": ["fraction"], "levels": [1]}).report
    assert report["by_outcome"].get("context_overflow") == 1 and report["by_class"]["infra_failure"] == 0


def test_a_tokenizer_only_dir_is_enough_for_a_policy_and_a_dir_without_one_is_refused(server, tmp_path):
    import shutil

    from envhub.adapters.engines.models import ModelNotAvailableError
    from envhub.adapters.engines.tiny import build_tiny_model
    from envhub.policies import make_policy

    tokenizer = tmp_path / "tokenizer"
    tokenizer.mkdir()
    for path in build_tiny_model().iterdir():
        if path.name.startswith(("tokenizer", "special_tokens", "vocab", "merges", "chat_template")):
            shutil.copy(path, tokenizer / path.name)
    assert not (tokenizer / "config.json").exists() and not list(tokenizer.glob("*.safetensors"))
    policy = make_policy(f"sglang:{server.url}?tokenizer={tokenizer}&max_new_tokens=8")
    assert policy.tokenizer.encode("hello") and policy.tokenizer_id == str(tokenizer)
    with pytest.raises(ModelNotAvailableError, match="nor a local dir with a tokenizer"):
        make_policy(f"sglang:{server.url}?tokenizer={tmp_path / 'empty'}&max_new_tokens=8")


def test_truncated_sampling_warns_once_about_logprobs(server):
    import warnings

    engine = SGLangEngine(server.url, max_context=4096)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # full-distribution and greedy requests do not warn
        engine.generate([1, 2, 3], SamplingParams(max_new_tokens=4))
        engine.generate([1, 2, 3], SamplingParams(max_new_tokens=4, temperature=0.0, top_p=0.5))
    with pytest.warns(RuntimeWarning, match="temperature scaling only"):
        engine.generate([1, 2, 3], SamplingParams(max_new_tokens=4, top_p=0.9))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once per engine
        engine.generate([1, 2, 3], SamplingParams(max_new_tokens=4, top_k=20))
    with pytest.warns(RuntimeWarning, match="top_k=20"):
        SGLangEngine(server.url, max_context=4096).generate([1, 2, 3], SamplingParams(max_new_tokens=4, top_k=20))


def test_malformed_answers_are_engine_errors():
    good = fixture("generate_response_stop")
    for broken in ({**good, "meta_info": {**good["meta_info"], "output_token_logprobs": [[None, 5, None]]}},
                   {**good, "meta_info": {**good["meta_info"], "output_token_logprobs": [["-inf", 5, None]]}},
                   {**good, "meta_info": {k: v for k, v in good["meta_info"].items()
                                          if k != "output_token_logprobs"}},
                   {"text": "no meta"}):
        with pytest.raises(EngineError):
            parse_generate_response(broken)


def test_unreachable_server_is_an_engine_error():
    engine = SGLangEngine("http://127.0.0.1:9", max_context=4096, timeout=5)
    with pytest.raises(EngineError, match="unreachable"):
        engine.generate([1], SamplingParams())
    assert engine.health() is False


def test_health_flush_and_weight_updates(server):
    engine = SGLangEngine(server.url, max_context=4096)
    assert engine.health()
    server.health_status = 503
    assert not engine.health()
    assert engine.flush_cache()
    server.flush_status = 400
    assert not engine.flush_cache()
    expected = fixture("update_weights_request")
    answer = engine.update_weights_from_disk(expected["model_path"], weight_version=expected["weight_version"])
    assert answer["success"] and engine.weight_version == "step-4"
    assert server.requests[-1] == ("POST", "/update_weights_from_disk", expected)
    server.update_answer = (400, fixture("update_weights_failed"))
    with pytest.raises(EngineError, match="weight update failed"):
        engine.update_weights_from_disk("/ckpt/missing")
    assert engine.model_info()["tokenizer_path"] == "/models/smollm2-135m"


def test_launch_command():
    cmd = build_launch_command(SGLangLaunchConfig("/models/m", port=31000, context_length=4096,
                                                  weight_version="step-0", extra_args=("--disable-cuda-graph",)),
                               python="python")
    assert cmd == ["python", "-m", "sglang.launch_server", "--model-path", "/models/m", "--host", "127.0.0.1",
                   "--port", "31000", "--tp-size", "1", "--context-length", "4096", "--weight-version", "step-0",
                   "--disable-cuda-graph"]


def test_sglang_policy_runs_an_audited_episode(server, tmp_path):
    """make_policy("sglang:URL") end to end: the runner, the env, the record, the audit."""
    from envhub.adapters.audit import audit_run
    from envhub.adapters.engines.tiny import build_tiny_model
    from envhub.policies import make_policy
    from envhub.rollout.runner import run_rollouts

    tiny = build_tiny_model()
    policy = make_policy(f"sglang:{server.url}?tokenizer={tiny}&max_new_tokens=64")
    report = run_rollouts("envhub/Computation-v0", policy, out_dir=tmp_path, episodes=2, concurrency=2,
                          env_kwargs={"sandbox": "process", "kinds": ["fraction"], "levels": [1]}).report
    assert report["by_class"]["infra_failure"] == 0 and report["by_outcome"]["wrong_answer"] == 2
    audit = audit_run(tmp_path)
    assert audit["errors"] == 0, audit["issues"]
    assert audit["with_tokens"] == 2


def _live_sglang_available() -> bool:
    if importlib.util.find_spec("sglang") is None:
        return False
    import torch

    return torch.cuda.is_available()


@pytest.mark.gpu
@pytest.mark.skipif(not _live_sglang_available(), reason="needs the sglang package and a GPU")
def test_live_sglang(tmp_path):
    """A real SGLang server with the tiny model: tokens, logprobs against a forward pass, weights."""
    import socket

    from envhub.adapters.engines.sglang_client import launch_server
    from envhub.adapters.engines.tiny import build_tiny_model
    from envhub.adapters.engines.transformers_engine import score_tokens

    tiny = str(build_tiny_model())
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc, engine = launch_server(SGLangLaunchConfig(tiny, port=port, weight_version="w0", dtype="float32",
                                                    mem_fraction_static=0.3), log_path=str(tmp_path / "sglang.log"))
    try:
        prompt = [1, 4093, 198, 1780, 314, 216, 38, 26, 39, 47, 2, 198, 1, 520, 9531, 198]
        out = engine.generate(prompt, SamplingParams(max_new_tokens=8, temperature=0.0))
        assert len(out.token_ids) == len(out.logprobs) > 0 and out.weight_version == "w0"
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(tiny)
        fresh = score_tokens(model, prompt + out.token_ids, len(prompt))
        assert max(abs(a - b) for a, b in zip(fresh, out.logprobs, strict=True)) < 1e-2
        assert engine.flush_cache()
        engine.update_weights_from_disk(tiny, weight_version="w1")
        assert engine.generate(prompt, SamplingParams(max_new_tokens=2)).weight_version == "w1"
    finally:
        proc.terminate()
        proc.wait(timeout=60)
