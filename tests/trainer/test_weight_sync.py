"""Weight sync: in-process into the transformers engine, and to SGLang through a model dir on disk.

SGLang does not run on these machines. ``LoopbackSGLang`` is a real HTTP server on 127.0.0.1 that
speaks the two endpoints the sync uses, with SGLang's documented fields only
(``UpdateWeightFromDiskReqInput`` / ``UpdateWeightFromDiskReqOutput`` of ``io_struct.py``, status
400 when ``success`` is false; ``GET /get_model_info`` with ``weight_version``; the recorded
shapes in ``tests/fixtures/sglang_*.json``). It refuses a request body with any other field, and
loads the staged dir with transformers as the server would read it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors import safe_open
from transformers import AutoModelForCausalLM, AutoTokenizer

from envhub.adapters.engines import SamplingParams
from envhub.adapters.engines.models import resolve_model
from envhub.adapters.engines.sglang_client import SGLangEngine
from envhub.adapters.engines.tiny import build_tiny_model
from envhub.adapters.engines.transformers_engine import TransformersEngine
from envhub.trainer.weight_sync import (
    InProcessSync,
    SGLangDiskSync,
    WeightSyncError,
    push_from_rank0,
    weight_sync_for,
    write_hf_dir,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
GREEDY = SamplingParams(max_new_tokens=8, temperature=0.0)
# UpdateWeightFromDiskReqInput's fields (sglang/srt/managers/io_struct.py) and their types.
UPDATE_FIELDS: dict[str, type | tuple[type, ...]] = {
    "model_path": str, "load_format": (str, type(None)), "abort_all_requests": bool,
    "weight_version": (str, type(None)), "is_async": bool, "torch_empty_cache": bool, "keep_pause": bool,
    "recapture_cuda_graph": bool, "token_step": int, "flush_cache": bool, "manifest": (dict, type(None)),
}

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def fixture(name: str) -> dict[str, Any]:
    data = json.loads((FIXTURES / f"sglang_{name}.json").read_text())
    return {k: v for k, v in data.items() if not k.startswith("_")}


class LoopbackSGLang:
    """``mode``: ``load`` (load the dir, switch version), ``fail`` (400, success false), ``hang``
    (answer success only after ``release`` is set), ``stale`` (answer success, keep the old version)."""

    def __init__(self) -> None:
        self.mode = "load"
        self.version = "default"
        self.requests: list[tuple[str, str, Any]] = []
        self.loaded: dict[str, torch.Tensor] = {}
        self.release = threading.Event()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _reply(self, status: int, body: dict[str, Any]) -> None:
                raw = json.dumps(body).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(raw)))
                    self.end_headers()
                    self.wfile.write(raw)
                except OSError:  # the client gave up (the hang test)
                    pass

            def do_GET(self) -> None:
                owner.requests.append(("GET", self.path, None))
                if self.path == "/get_model_info":
                    self._reply(200, {**fixture("get_model_info"), "weight_version": owner.version})
                else:
                    self._reply(404, {"detail": "Not Found"})

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"null")
                owner.requests.append(("POST", self.path, body))
                if self.path != "/update_weights_from_disk":
                    self._reply(404, {"detail": "Not Found"})
                    return
                self._reply(*owner.update(body))

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    def update(self, body: Any) -> tuple[int, dict[str, Any]]:
        problems = [] if isinstance(body, dict) else ["body is not an object"]
        if isinstance(body, dict):
            problems += [f"unknown field {k}" for k in body if k not in UPDATE_FIELDS]
            problems += [f"bad type of {k}" for k, v in body.items() if k in UPDATE_FIELDS
                         and not isinstance(v, UPDATE_FIELDS[k])]
            problems += [] if "model_path" in body else ["model_path is required"]
        if problems:
            return 400, {"success": False, "message": "; ".join(problems), "num_paused_requests": 0}
        if self.mode == "fail":
            return 400, fixture("update_weights_failed")
        if self.mode == "hang":
            self.release.wait(10)
        if self.mode in ("load", "hang"):
            model = AutoModelForCausalLM.from_pretrained(body["model_path"], dtype=torch.float32)
            self.loaded = {k: v.detach().clone() for k, v in model.state_dict().items()}
            self.version = body.get("weight_version") or self.version
        message = f"Succeeded to update model weights. Weight version updated to {body.get('weight_version')}."
        return 200, {"success": True, "message": message, "num_paused_requests": 0}

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def sglang():
    server = LoopbackSGLang()
    yield server
    server.close()


@pytest.fixture(scope="module")
def base_dir() -> Path:
    return build_tiny_model()


@pytest.fixture(scope="module")
def other_state() -> dict[str, torch.Tensor]:
    """Different weights of the same architecture (another seed), as the trainer hands them over:
    both names of the tied embedding present."""
    model = AutoModelForCausalLM.from_pretrained(str(build_tiny_model(seed=1)), dtype=torch.float32)
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _ids(tokenizer: Any) -> list[int]:
    return tokenizer.encode("<|im_start|>user\nCompute 17 * 23.<|im_end|>\n", add_special_tokens=False)


# ---- in process ------------------------------------------------------------------------------------

def test_in_process_push_changes_the_engines_output_and_version(base_dir, other_state):
    engine = TransformersEngine.from_pretrained(base_dir, seed=0)
    reference = TransformersEngine.from_pretrained(build_tiny_model(seed=1), seed=0)
    try:
        prompt = _ids(engine.tokenizer)
        before = engine.generate(prompt, GREEDY)
        sync = weight_sync_for(engine, base_model_dir=base_dir, staging_dir=Path("/nonexistent"))
        assert isinstance(sync, InProcessSync)
        assert sync.push(other_state, "5") == "5" == engine.weight_version
        after = engine.generate(prompt, GREEDY)
        assert after.weight_version == "5"
        assert after.token_ids != before.token_ids
        assert after.token_ids == reference.generate(prompt, GREEDY).token_ids
    finally:
        engine.close()
        reference.close()


def test_in_process_push_refuses_a_mismatched_state_dict(base_dir, other_state):
    engine = TransformersEngine.from_pretrained(base_dir, seed=0)
    try:
        prompt = _ids(engine.tokenizer)
        before = engine.generate(prompt, GREEDY).token_ids
        sync = InProcessSync(engine)
        missing = {k: v for k, v in other_state.items() if k != "model.norm.weight"}
        with pytest.raises(WeightSyncError, match=r"missing \(model.norm.weight\)"):
            sync.push(missing, "6")
        wrong = {**other_state, "model.norm.weight": torch.ones(3)}
        with pytest.raises(WeightSyncError, match="wrong shape"):
            sync.push(wrong, "6")
        assert engine.weight_version == "0"
        assert engine.generate(prompt, GREEDY).token_ids == before
    finally:
        engine.close()


# ---- model dirs ----------------------------------------------------------------------------------

def test_write_hf_dir_loads_with_identical_logits(base_dir, other_state, tmp_path):
    out = write_hf_dir(other_state, base_dir, tmp_path / "export")
    assert out == tmp_path / "export"
    loaded = AutoModelForCausalLM.from_pretrained(str(out), dtype=torch.float32).eval()
    expected = AutoModelForCausalLM.from_pretrained(str(base_dir), dtype=torch.float32).eval()
    expected.load_state_dict(other_state)
    tokenizer = AutoTokenizer.from_pretrained(str(out))
    ids = torch.tensor([_ids(tokenizer)])
    with torch.no_grad():
        assert torch.equal(loaded(input_ids=ids).logits, expected(input_ids=ids).logits)
    assert loaded.lm_head.weight.data_ptr() == loaded.model.embed_tokens.weight.data_ptr()  # still tied
    with safe_open(str(out / "model.safetensors"), "pt") as f:
        keys = set(f.keys())
    assert "lm_head.weight" not in keys and "model.embed_tokens.weight" in keys  # stored once
    base_tokenizer = AutoTokenizer.from_pretrained(str(base_dir))
    assert tokenizer.chat_template == base_tokenizer.chat_template and len(tokenizer) == len(base_tokenizer)
    assert json.loads((out / "config.json").read_text())["tie_word_embeddings"] is True
    assert (out / "generation_config.json").is_file() and not (out / "envhub_model.json").exists()
    assert resolve_model(f"hf:{out}") == out  # what `--policy hf:PATH` resolves


def test_write_hf_dir_replaces_atomically_and_refuses_a_bad_state(base_dir, other_state, tmp_path):
    target = tmp_path / "export"
    write_hf_dir(other_state, base_dir, target)
    base_state = AutoModelForCausalLM.from_pretrained(str(base_dir), dtype=torch.float32).state_dict()
    only_embed = {k: v for k, v in base_state.items() if k != "lm_head.weight"}
    write_hf_dir(only_embed, base_dir, target)  # the tied weight under one name is enough
    again = AutoModelForCausalLM.from_pretrained(str(target), dtype=torch.float32).state_dict()
    assert all(torch.equal(again[k], base_state[k]) for k in base_state)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["export"]  # no temp or old dirs left

    with pytest.raises(ValueError, match=r"missing \['model.norm.weight'\]"):
        write_hf_dir({k: v for k, v in base_state.items() if k != "model.norm.weight"}, base_dir, tmp_path / "bad")
    with pytest.raises(ValueError, match="tied in this model but differ"):
        write_hf_dir({**base_state, "lm_head.weight": base_state["lm_head.weight"] + 1}, base_dir, tmp_path / "bad")
    with pytest.raises(ValueError, match="does not fit"):
        write_hf_dir({**base_state, "model.norm.weight": torch.ones(3)}, base_dir, tmp_path / "bad")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["export"]


# ---- SGLang through disk ---------------------------------------------------------------------------

def test_sglang_push_writes_the_dir_and_sends_exactly_the_documented_fields(sglang, base_dir, other_state,
                                                                            tmp_path):
    engine = SGLangEngine(sglang.url)
    sync = weight_sync_for(engine, base_model_dir=base_dir, staging_dir=tmp_path / "weights", timeout_s=60)
    assert isinstance(sync, SGLangDiskSync)
    assert sync.push(other_state, "step-1") == "step-1"
    staged = (tmp_path / "weights" / "step-1").resolve()
    expected = fixture("update_weights_request") | {"model_path": str(staged), "weight_version": "step-1"}
    assert sglang.requests[0] == ("POST", "/update_weights_from_disk", expected)
    assert sglang.requests[1] == ("GET", "/get_model_info", None)  # the new version is confirmed
    assert sglang.version == "step-1" == engine.weight_version
    assert all(torch.equal(sglang.loaded[k], other_state[k]) for k in other_state)  # the server read our dir

    for version in ("step-2", "step-3"):
        sync.push(other_state, version)
    assert sorted(p.name for p in (tmp_path / "weights").iterdir()) == ["step-2", "step-3"]  # keep=2
    assert engine.weight_version == "step-3"


def test_sglang_refusal_is_a_weight_sync_error_with_the_servers_message(sglang, base_dir, other_state, tmp_path):
    engine = SGLangEngine(sglang.url, weight_version="default")
    sync = weight_sync_for(engine, base_model_dir=base_dir, staging_dir=tmp_path / "weights", timeout_s=30)
    sglang.mode = "fail"
    with pytest.raises(WeightSyncError, match=r"Failed to get weights iterator: /ckpt/missing"):
        sync.push(other_state, "step-1")
    assert engine.weight_version == "default" == sglang.version
    assert [r[:2] for r in sglang.requests] == [("POST", "/update_weights_from_disk")]  # nothing after it


def test_a_hung_sglang_update_fails_quickly_and_never_counts_as_success(sglang, base_dir, other_state, tmp_path):
    engine = SGLangEngine(sglang.url, weight_version="default")
    sync = weight_sync_for(engine, base_model_dir=base_dir, staging_dir=tmp_path / "weights", timeout_s=0.5)
    sglang.mode = "hang"
    t0 = time.monotonic()
    with pytest.raises(WeightSyncError, match=r"did not finish loading weight version step-1 .* within 0.5s"):
        sync.push(other_state, "step-1")
    # a hang guard: the push takes ~0.6 s (the dir write plus the 0.5 s timeout); the server hangs forever
    assert time.monotonic() - t0 < 10.0
    sglang.release.set()  # the server finishes the update after we gave up
    deadline = time.monotonic() + 10
    while sglang.version != "step-1" and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.2)
    assert engine.weight_version == "default"  # the late success reached nobody
    assert ("GET", "/get_model_info", None) not in sglang.requests


def test_a_success_without_the_new_version_is_refused(sglang, base_dir, other_state, tmp_path):
    engine = SGLangEngine(sglang.url)
    sync = weight_sync_for(engine, base_model_dir=base_dir, staging_dir=tmp_path / "weights", timeout_s=30)
    sglang.mode = "stale"
    with pytest.raises(WeightSyncError, match=r"reports 'default'"):
        sync.push(other_state, "step-1")


def test_bad_versions_and_engines_are_refused(sglang, base_dir, other_state, tmp_path):
    sync = weight_sync_for(SGLangEngine(sglang.url), base_model_dir=base_dir, staging_dir=tmp_path, timeout_s=30)
    with pytest.raises(WeightSyncError, match="cannot name a staging dir"):
        sync.push(other_state, "../escape")
    assert sglang.requests == [] and list(tmp_path.iterdir()) == []
    with pytest.raises(WeightSyncError, match=r"cannot stage weight version step-1 for sglang: .*missing"):
        sync.push({k: v for k, v in other_state.items() if k != "model.norm.weight"}, "step-1")
    assert sglang.requests == [] and list(tmp_path.iterdir()) == []
    with pytest.raises(TypeError, match="no weight sync for engine object"):
        weight_sync_for(object(), base_model_dir=base_dir, staging_dir=tmp_path)


def test_sglang_push_stages_the_model_dir_state(sglang, base_dir, other_state, tmp_path):
    """What the server loads is ``model_dir_state`` of the pushed state (the trainer merges LoRA there)."""
    doubled = {k: v * 2 for k, v in other_state.items()}
    sync = weight_sync_for(SGLangEngine(sglang.url), base_model_dir=base_dir, staging_dir=tmp_path, timeout_s=30,
                           model_dir_state=lambda state: {k: v * 2 for k, v in state.items()})
    assert sync.push(other_state, "step-1") == "step-1"
    assert all(torch.equal(sglang.loaded[k], doubled[k]) for k in doubled)


# ---- who pushes ------------------------------------------------------------------------------------

RANKS_SCRIPT = """
import json, sys
from envhub.trainer import fsdp
from envhub.trainer.weight_sync import push_from_rank0

info = fsdp.init_distributed(device="cpu")
calls, out = [], {}
out["ok"] = push_from_rank0(lambda: calls.append(info.rank) or "v1", "v1", info, "the server")

def fail():
    raise ValueError("disk full")

try:
    push_from_rank0(fail, "v2", info, "the server")
except Exception as exc:
    out["failed"] = [type(exc).__name__, str(exc)]
out["calls"] = calls
with open(f"{sys.argv[1]}/rank{info.rank}.json", "w") as f:
    json.dump(out, f)
fsdp.shutdown_distributed()
"""


def test_one_process_is_rank_0_and_keeps_its_own_error():
    assert push_from_rank0(lambda: "v1", "v1", None, "the server") == "v1"
    with pytest.raises(ZeroDivisionError):
        push_from_rank0(lambda: str(1 / 0), "v2", None, "the server")


@pytest.mark.slow
def test_rank_0_pushes_and_every_rank_learns_whether_it_worked(tmp_path):
    script = tmp_path / "ranks.py"
    script.write_text(RANKS_SCRIPT)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(var, None)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", str(script),
           str(tmp_path)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, f"torchrun failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
    rank0, rank1 = (json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2))
    assert rank0 == {"ok": "v1", "calls": [0], "failed": ["ValueError", "disk full"]}
    assert rank1 == {"ok": "v1", "calls": [], "failed": [
        "WeightSyncError", "rank 0 could not give the server weight version v2; see its log"]}
