"""Asynchronous training with an SGLang engine (``rollout.mode: async``, ``engine: sglang:URL``; issue #40
step 3): at each weight push generation is paused with ``POST /pause_generation`` (mode ``abort``), the
weights are loaded, and generation continues with ``POST /continue_generation``; the requests the pause
aborted are sent again and sample on the new weights.

SGLang does not run here. ``PausableSGLang`` is a stand-in HTTP server on 127.0.0.1 that follows SGLang's
source (``http_server.py``, ``io_struct.py``'s ``PauseGenerationReqInput`` / ``ContinueGenerationReqInput``
/ ``UpdateWeightFromDiskReqInput``, ``tokenizer_manager.py``'s pause semantics): ``/generate`` samples
with a transformers engine of the weights it was last given and holds each answer a moment (so requests
are in flight at a push); ``/pause_generation`` with mode ``abort`` stops admitting (new requests wait),
aborts every request in flight (each answers ``finish_reason: {"type": "abort"}`` with its partial
output) and answers once none is left; ``/continue_generation`` lets the waiting ones run. It refuses a
body with any field SGLang's dataclasses lack, and logs every event in order.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from test_weight_sync import UPDATE_FIELDS
from trainer_fixtures import letter_config, steps_of

from envhub.adapters.engines.base import SamplingParams
from envhub.adapters.engines.sglang_client import SGLangEngine
from envhub.adapters.engines.transformers_engine import TransformersEngine
from envhub.trainer.async_sglang import PausingSGLangEngine
from envhub.trainer.config import parse_config
from envhub.trainer.loop import train
from envhub.trainer.preflight import check_async
from envhub.trainer.weight_sync import WeightSyncError, weight_sync_for
from envhub.types import TrajectoryRecord

PAUSE_MODES = ("abort", "retract", "in_place")  # PauseGenerationReqInput.mode
CONTINUE_FIELDS = {"torch_empty_cache": bool}  # ContinueGenerationReqInput


class PausableSGLang:
    """See the module docstring. ``hold_s``: how long each ``/generate`` answer is held (abortable);
    ``events``: ``(kind, detail)`` in order -- ``pause``, ``update`` (version, unanswered requests at
    the update), ``continue``, ``answered`` / ``aborted`` (input ids, token ids, logprobs, version)."""

    def __init__(self, model_dir: Any, hold_s: float = 0.3) -> None:
        self.engine = TransformersEngine.from_pretrained(model_dir, seed=0)
        self.version, self.hold_s = "default", hold_s
        self.paused = False
        self.running: dict[int, threading.Event] = {}  # request -> its abort flag
        self.events: list[tuple[str, Any]] = []
        self.refused: list[str] = []
        self.cond = threading.Condition()
        self._ids = 0
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _reply(self, status: int, body: Any) -> None:
                raw = json.dumps(body).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(raw)))
                    self.end_headers()
                    self.wfile.write(raw)
                except OSError:
                    pass

            def do_GET(self) -> None:
                if self.path == "/get_model_info":
                    self._reply(200, {"model_path": "stand-in", "tokenizer_path": "stand-in", "is_generation": True,
                                      "preferred_sampling_params": None, "weight_version": owner.version})
                elif self.path == "/health":
                    self._reply(200, {})
                else:
                    self._reply(404, {"detail": "Not Found"})

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"null")
                route = {"/generate": owner.generate, "/pause_generation": owner.pause,
                         "/continue_generation": owner.resume, "/update_weights_from_disk": owner.update}.get(self.path)
                self._reply(*(route(body) if route else (404, {"detail": "Not Found"})))

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    def _refuse(self, why: str) -> tuple[int, dict[str, Any]]:
        self.refused.append(why)
        return 400, {"error": {"message": why}}

    def generate(self, body: Any) -> tuple[int, dict[str, Any]]:
        sp = body.get("sampling_params", {})
        params = SamplingParams(max_new_tokens=sp["max_new_tokens"], temperature=sp["temperature"], top_p=sp["top_p"],
                                top_k=max(sp["top_k"], 0), stop=tuple(sp.get("stop", ())),
                                stop_token_ids=tuple(sp.get("stop_token_ids", ())))
        with self.cond:
            while self.paused:  # tokenizer_manager: a new request waits while generation is paused
                self.cond.wait()
            self._ids += 1
            rid, aborted = self._ids, threading.Event()
            self.running[rid] = aborted
            version = self.version
        try:
            result = self.engine.generate(body["input_ids"], params)
            aborted.wait(self.hold_s)  # still decoding, as far as the client can tell
            triples = [[lp, t, None] for lp, t in zip(result.logprobs, result.token_ids, strict=True)]
            with self.cond:
                if aborted.is_set():  # SGLang answers an aborted request with what it had, finish_reason abort
                    self.events.append(("aborted", (body["input_ids"], result.token_ids[:1], result.logprobs[:1],
                                                    version)))
                    finish: dict[str, Any] = {"type": "abort", "message": "Abort in waiting queue"}
                    triples = triples[:1]
                else:
                    self.events.append(("answered", (body["input_ids"], result.token_ids, result.logprobs, version)))
                    finish = ({"type": "stop", "matched": result.token_ids[-1]} if result.finish_reason == "stop"
                              else {"type": "length", "length": len(result.token_ids)})
            return 200, {"text": "", "output_ids": [t for _, t, _ in triples],
                         "meta_info": {"id": str(rid), "finish_reason": finish,
                                       "prompt_tokens": len(body["input_ids"]), "completion_tokens": len(triples),
                                       "weight_version": version, "output_token_logprobs": triples}}
        finally:
            with self.cond:
                del self.running[rid]
                self.cond.notify_all()

    def pause(self, body: Any) -> tuple[int, dict[str, Any]]:
        if not isinstance(body, dict) or set(body) - {"mode"} or body.get("mode", "abort") not in PAUSE_MODES:
            return self._refuse(f"bad PauseGenerationReqInput {body!r}")
        with self.cond:
            self.events.append(("pause", body.get("mode", "abort")))
            self.paused = True
            if body.get("mode", "abort") == "abort":  # abort all, answer once none is left
                while self.running:
                    for flag in self.running.values():
                        flag.set()
                    self.cond.wait(0.1)
        return 200, {"message": "Generation paused successfully.", "status": "ok"}

    def resume(self, body: Any) -> tuple[int, dict[str, Any]]:
        if not isinstance(body, dict) or any(k not in CONTINUE_FIELDS or not isinstance(v, CONTINUE_FIELDS[k])
                                             for k, v in body.items()):
            return self._refuse(f"bad ContinueGenerationReqInput {body!r}")
        with self.cond:
            self.events.append(("continue", None))
            self.paused = False
            self.cond.notify_all()
        return 200, {"message": "Generation continued successfully.", "status": "ok"}

    def update(self, body: Any) -> tuple[int, dict[str, Any]]:
        if not isinstance(body, dict) or any(k not in UPDATE_FIELDS or not isinstance(v, UPDATE_FIELDS[k])
                                             for k, v in body.items()) or "model_path" not in body:
            return self._refuse(f"bad UpdateWeightFromDiskReqInput {body!r}")
        with self.cond:
            self.events.append(("update", (body.get("weight_version"), len(self.running))))
            self.engine.update_weights(body["model_path"], body.get("weight_version"))
            self.version = body.get("weight_version") or self.version
        return 200, {"success": True, "message": "Succeeded to update model weights.", "num_paused_requests": 0}

    def close(self) -> None:
        with self.cond:
            self.paused = False
            self.cond.notify_all()
        self.server.shutdown()
        self.server.server_close()
        self.engine.close()


@pytest.fixture
def sglang(scratch_model):
    server = PausableSGLang(scratch_model)
    yield server
    server.close()


def _records(path):
    return [TrajectoryRecord.model_validate_json(line) for line in path.read_text().splitlines() if line.strip()]


def test_async_with_sglang_is_no_longer_refused(tmp_path, scratch_model):
    config = parse_config(letter_config(tmp_path / "run", scratch_model, engine="sglang:http://127.0.0.1:1",
                                        rollout={"mode": "async"}))
    assert check_async(config) == []


def test_an_async_run_pauses_sglang_around_each_push_and_resends_what_it_aborted(tmp_path, scratch_model, sglang,
                                                                                  one_torch_thread):
    run, steps = tmp_path / "run", 4
    config = parse_config(letter_config(run, scratch_model, engine=f"sglang:{sglang.url}", steps=steps,
                                        checkpoint_every=steps,
                                        rollout={"mode": "async", "max_staleness": 1, "concurrency": 4}))
    train(config)
    assert sglang.refused == []
    events = sglang.events
    controls = [(i, kind, detail) for i, (kind, detail) in enumerate(events) if kind in ("pause", "update", "continue")]

    # every update: paused (mode abort) right before it, nothing unanswered at it, continued right after it
    updates = [c for c in controls if c[1] == "update"]
    lines = steps_of(run)
    final = int(lines[-1]["weight_version"])
    assert final >= 1 and [u[2][0] for u in updates] == [str(v) for v in range(final + 1)]  # "0": the start's
    for k, (_, kind, _) in enumerate(controls):
        if kind == "update":
            assert controls[k - 1][1:] == ("pause", "abort") and controls[k + 1][1] == "continue"
    assert all(detail[1] == 0 for _, _, detail in updates)

    # requests were in flight at pushes: each aborted one is sent again, after a continue, on the new weights
    aborted = [(i, d) for i, (kind, d) in enumerate(events) if kind == "aborted"]
    answered = [(i, d) for i, (kind, d) in enumerate(events) if kind == "answered"]
    assert aborted, "no push landed while a request was in flight (make hold_s longer)"
    continues = [i for i, kind, _ in controls if kind == "continue"]
    for i, (ids, _, _, version) in aborted:
        resume = next(c for c in continues if c > i)
        again = [d for j, d in answered if j > resume and d[0] == ids]
        assert again and int(again[0][3]) == int(version) + 1, "an aborted request was not sent again"

    # no sample lost: every episode finished (none ended as the engine's error), and every sampled turn is an
    # answered request's, its recorded version the one the server sampled it with; none is an aborted one's
    entries = (run / "rollouts" / "buffer" / "entries.jsonl").read_text().splitlines()
    buffer = [TrajectoryRecord.model_validate(json.loads(line)["record"]) for line in entries if line.strip()]
    trained = [e for line in lines for e in line["trained_episodes"]]
    assert len(trained) == len(set(trained)), "a sample was trained twice"
    served: dict[tuple, set[str]] = {}
    for _, (_, toks, lps, v) in answered:
        served.setdefault((tuple(toks), tuple(lps)), set()).add(v)
    batches = [_records(run / "rollouts" / f"step-{line['step']:06d}" / "trajectories.jsonl") for line in lines]
    seen = set()
    for records in [*batches, buffer]:
        for record in records:
            assert record.outcome.value != "engine_error", record.outcome_detail
            for turn in record.turns:  # (an identical sample of the same prompt has the same version too)
                assert served.get((tuple(turn.token_ids), tuple(turn.logprobs))) == {turn.weight_version}, \
                    "a turn that no answered request of its version sampled"
            seen.add(record.episode_id)
            assert [int(v) for v in record.versions.weight_versions] == [int(t.weight_version) for t in record.turns]
    assert all(len(records) == 8 for records in batches)  # 2 whole groups of 4 per step
    assert {e for records in batches for r in records for e in [r.episode_id]} <= seen

    # the figures: aborted-and-resent requests per step add up to the aborts; the pauses count as rollout idle
    assert sum(line["sglang_requests_reissued"] for line in lines) <= len(aborted)
    assert all(0.0 <= line["async_rollout_idle_ratio"] <= 1.0 for line in lines)


def test_a_failed_update_stops_sampling_and_resumes_the_server(tmp_path, scratch_model, sglang):
    engine = PausingSGLangEngine(SGLangEngine(sglang.url, max_context=512))
    sync = weight_sync_for(engine, base_model_dir=scratch_model, staging_dir=tmp_path, timeout_s=30, staged=True)
    state = TransformersEngine.from_pretrained(scratch_model).model.state_dict()
    state = {k: v.clone() for k, v in state.items()}
    state.pop(next(k for k in state if "mlp" in k))  # a state dict that does not fit: it fails before any request
    with pytest.raises(WeightSyncError):
        sync.push(state, "1")
    assert sglang.events == []  # refused before the pause: nothing happened on the server
    full = {k: v.clone() for k, v in TransformersEngine.from_pretrained(scratch_model).model.state_dict().items()}
    sglang_update = sglang.update

    def failing(body):
        sglang_update(body)
        return 400, {"success": False, "message": "Failed to update weights", "num_paused_requests": 0}

    sglang.update = failing
    with pytest.raises(WeightSyncError, match="Failed to update weights"):
        sync.push(full, "2")
    assert [k for k, _ in sglang.events] == ["pause", "update", "continue"]  # never left paused
    with pytest.raises(Exception, match="failed weight push"):
        engine.generate([1, 2, 3], SamplingParams(max_new_tokens=2))  # never samples stale weights as new
    assert not any(k == "answered" for k, _ in sglang.events)


def test_a_server_without_the_pause_route_fails_the_push_in_one_line(tmp_path, scratch_model):
    from test_weight_sync import LoopbackSGLang  # update_weights_from_disk and get_model_info only

    server = LoopbackSGLang()
    try:
        engine = PausingSGLangEngine(SGLangEngine(server.url, max_context=512))
        sync = weight_sync_for(engine, base_model_dir=scratch_model, staging_dir=tmp_path, timeout_s=30,
                               staged=True)
        full = {k: v.clone() for k, v in TransformersEngine.from_pretrained(scratch_model).model.state_dict().items()}
        t0 = time.monotonic()
        with pytest.raises(WeightSyncError, match=r"/pause_generation answered 404.*needs one with it"):
            sync.push(full, "1")
        assert time.monotonic() - t0 < 10
        assert [r[1] for r in server.requests] == ["/pause_generation", "/continue_generation"]  # no load
    finally:
        server.close()


def test_only_a_pausing_engine_takes_staged_sglang_pushes(tmp_path, scratch_model):
    with pytest.raises(TypeError, match="PausingSGLangEngine"):
        weight_sync_for(SGLangEngine("http://127.0.0.1:1"), base_model_dir=scratch_model, staging_dir=tmp_path,
                        staged=True)
