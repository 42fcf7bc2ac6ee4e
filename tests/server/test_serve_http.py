"""HTTP face of the server: OpenEnv's stateless routes, envhub's stateful mode, errors, auth, metrics.

In-process (Starlette's TestClient): no sockets, so these run in milliseconds.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

pytest.importorskip("fastapi")
from fastapi.testclient import TestClient
from starlette.websockets import WebSocketDisconnect

import envhub
from envhub.parsing import format_tool_call
from envhub.server import ServerConfig, create_app
from envhub.server.wire import SESSION_HEADER

ENV_ID = "envhub/Computation-v0"
TASK = "comp-bigint-L1-0"


def gold_answer(task_id: str = TASK) -> str:
    env = envhub.make(ENV_ID)
    return env.gold_actions(env.tasks.get(task_id))[-1].text


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    app = create_app(ENV_ID, ServerConfig(max_sessions=3, session_ttl_s=60, max_body_bytes=4096))
    with TestClient(app) as c:
        yield c


def new_session(client: TestClient) -> str:
    r = client.post("/envhub/sessions")
    assert r.status_code == 201, r.text
    return r.json()["session_id"]


def test_openenv_routes_and_shapes(client: TestClient):
    assert client.get("/health").json() == {"status": "healthy"}
    meta = client.get("/metadata").json()
    assert meta["name"] == ENV_ID and isinstance(meta["description"], str)
    schema = client.get("/schema").json()
    assert set(schema["action"]["properties"]) == {"text", "tool_calls", "metadata"}
    assert "messages" in schema["observation"]["properties"]
    assert {"episode_id", "step_count"} <= set(schema["state"]["properties"])
    r = client.post("/reset", json={"task_id": TASK})  # stateless, as in OpenEnv
    body = r.json()
    assert r.status_code == 200 and set(body) >= {"observation", "reward", "done"}
    assert [m["role"] for m in body["observation"]["messages"]] == ["system", "user"]
    assert body["metadata"]["task_id"] == TASK
    assert client.post("/reset").status_code == 200  # an empty body is a default reset
    state = client.get("/state").json()
    assert state["episode_id"] is None and state["step_count"] == 0


def test_stateless_step_explains_itself(client: TestClient):
    r = client.post("/step", json={"action": {"text": "hi"}})
    assert r.status_code == 409
    assert r.json()["code"] == "EPISODE_NOT_RUNNING" and SESSION_HEADER in r.json()["message"]


def test_stateful_http_episode(client: TestClient):
    sid = new_session(client)
    headers = {SESSION_HEADER: sid}
    assert client.post("/reset", json={"task_id": TASK, "episode_id": "ep-1"}, headers=headers).status_code == 200
    r = client.post("/step", json={"action": {"text": "no tool call"}}, headers=headers)
    assert r.json()["done"] is False and "Format error" in r.json()["observation"]["messages"][0]["content"]
    r = client.post("/step", json={"action": {"text": gold_answer()}, "request_id": "r1"}, headers=headers)
    assert r.json()["done"] is True and r.json()["reward"] == 1.0
    again = client.post("/step", json={"action": {"text": gold_answer()}, "request_id": "r1"}, headers=headers)
    assert again.json() == r.json()  # a retried request is answered, not re-applied
    state = client.get("/state", headers=headers).json()
    assert state["episode_id"] == "ep-1" and state["step_count"] == 2 and state["outcome"] == "success"
    r = client.post("/step", json={"action": {"text": "late"}}, headers=headers)
    assert r.status_code == 409 and r.json()["code"] == "EPISODE_NOT_RUNNING"
    assert client.delete(f"/envhub/sessions/{sid}").status_code == 204
    assert client.get("/state", headers=headers).status_code == 404


def test_reset_with_new_creates_a_session(client: TestClient):
    r = client.post("/reset", json={"task_id": TASK}, headers={SESSION_HEADER: "new"})
    sid = r.headers[SESSION_HEADER]
    assert len(sid) >= 43  # 256 bits from secrets.token_urlsafe
    structured = {"action": {"tool_calls": [{"name": "answer", "arguments": {"answer": "1"}}]}}
    r = client.post("/step", json=structured, headers={SESSION_HEADER: sid})
    assert r.json()["observation"]["outcome"] == "wrong_answer"
    r = client.post("/envhub/abort", json={"outcome": "engine_error"}, headers={SESSION_HEADER: sid})
    assert r.json()["observation"]["outcome"] == "wrong_answer"  # a finished episode stays finished
    client.delete(f"/envhub/sessions/{sid}")


def test_abort_ends_an_episode_with_an_infra_outcome(client: TestClient):
    sid = new_session(client)
    headers = {SESSION_HEADER: sid}
    client.post("/reset", json={"task_id": TASK}, headers=headers)
    r = client.post("/envhub/abort", json={"outcome": "engine_error", "detail": "model died"}, headers=headers)
    assert r.json()["done"] is True and r.json()["observation"]["outcome"] == "engine_error"
    assert client.get("/envhub/gold", headers=headers).status_code == 403  # not exposed by default
    client.delete(f"/envhub/sessions/{sid}")


@pytest.mark.parametrize(("body", "status", "code"), [
    (b"{not json", 400, "INVALID_JSON"),
    (b'{"action": {"text": "x"}, "bogus": 1}', 422, "VALIDATION_ERROR"),
    (b'{"action": {"text": 5}}', 422, "VALIDATION_ERROR"),
    (b'{"action": {"tool_calls": [{"name": "answer", "arguments": "x"}]}}', 422, "VALIDATION_ERROR"),
    (b'{"action": "text"}', 422, "VALIDATION_ERROR"),
    (b"[]", 422, "VALIDATION_ERROR"),
])
def test_bad_step_bodies_are_clear_4xx(client: TestClient, body: bytes, status: int, code: str):
    sid = new_session(client)
    r = client.post("/step", content=body, headers={SESSION_HEADER: sid, "content-type": "application/json"})
    assert r.status_code == status, r.text
    assert r.json()["code"] == code and r.json()["message"]
    client.delete(f"/envhub/sessions/{sid}")


def test_unknown_fields_are_named(client: TestClient):
    r = client.post("/reset", json={"seed": 1, "sede": 2})
    assert r.status_code == 422 and "sede" in r.json()["message"]
    r = client.post("/reset", json={"seed": "one"})
    assert r.status_code == 422 and "seed" in r.json()["message"]
    r = client.post("/reset", json={"task_id": "comp-nope-L1-1"})
    assert r.status_code == 404 and r.json()["code"] == "UNKNOWN_TASK"


def test_unknown_session_and_routes(client: TestClient):
    r = client.post("/step", json={"action": {"text": "x"}}, headers={SESSION_HEADER: "forged"})
    assert r.status_code == 404 and r.json()["code"] == "SESSION_NOT_FOUND"
    assert client.get("/nope").json()["code"] == "NOT_FOUND"
    assert client.put("/reset").status_code == 405


def test_body_size_limit(client: TestClient):
    r = client.post("/reset", content=b"{" + b" " * 5000 + b"}", headers={"content-type": "application/json"})
    assert r.status_code == 413 and r.json()["code"] == "PAYLOAD_TOO_LARGE"


def test_capacity_is_an_explicit_503():
    app = create_app(ENV_ID, ServerConfig(max_sessions=2, session_ttl_s=60))
    with TestClient(app) as c:
        first = [new_session(c) for _ in range(2)]
        r = c.post("/envhub/sessions")
        assert r.status_code == 503 and r.json()["code"] == "CAPACITY_REACHED"
        assert int(r.headers["retry-after"]) >= 1
        with c.websocket_connect("/ws") as ws:  # the same refusal over the WebSocket
            assert ws.receive_json()["data"]["code"] == "CAPACITY_REACHED"
        c.delete(f"/envhub/sessions/{first[0]}")
        assert c.post("/envhub/sessions").status_code == 201


def test_mcp_errors_are_json_rpc(client: TestClient):
    assert client.post("/mcp", json={}).json()["error"]["code"] == -32600
    assert client.post("/mcp", content=b"{oops").json()["error"]["code"] == -32700
    r = client.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "nope"}).json()
    assert r["error"]["code"] == -32601
    r = client.post("/mcp", json={"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                                  "params": {"name": "answer", "arguments": {"answer": "1"}}}).json()
    assert r["error"]["code"] == -32602 and "session" in r["error"]["message"]
    tools = client.post("/mcp", json={"jsonrpc": "2.0", "id": 3, "method": "tools/list"}).json()
    assert [t["name"] for t in tools["result"]["tools"]] == ["python", "answer"]
    assert tools["result"]["tools"][1]["inputSchema"]["required"] == ["answer"]


def test_metrics_have_bounded_labels(client: TestClient):
    for path in ("/a", "/b/c", "/d?x=1", "/envhub/sessions/zzz"):
        client.get(path)
    text = client.get("/metrics").text
    assert "# TYPE envhub_requests_total counter" in text
    series = [line for line in text.splitlines() if line.startswith("envhub_requests_total{")]
    routes = {line.split('route="')[1].split('"')[0] for line in series}
    assert "other" in routes and not any(r.startswith("/") for r in routes)
    assert all(line.split("{")[1].split("}")[0].count("=") == 3 for line in series)  # env, route, outcome
    assert 'envhub_episodes_total{env="envhub/Computation-v0",outcome="success"}' in text
    assert "envhub_sessions_max" in text


def test_token_is_required_everywhere_but_health():
    app = create_app(ENV_ID, ServerConfig(token="s3cret"))
    with TestClient(app) as c:
        assert c.get("/health").status_code == 200
        for method, path in (("get", "/metrics"), ("post", "/reset"), ("get", "/schema"), ("post", "/mcp")):
            r = getattr(c, method)(path)
            assert r.status_code == 401 and r.headers["www-authenticate"].startswith("Bearer")
        assert c.get("/schema", headers={"Authorization": "Bearer wrong"}).status_code == 401
        assert c.get("/schema", headers={"Authorization": "Bearer s3cret"}).status_code == 200
        with pytest.raises(WebSocketDisconnect) as info, c.websocket_connect("/ws"):
            pass
        assert info.value.code == 1008
        with c.websocket_connect("/ws", headers={"Authorization": "Bearer s3cret"}) as ws:
            ws.send_json({"type": "reset", "data": {"task_id": TASK}})
            assert ws.receive_json()["type"] == "observation"


def test_serve_refuses_a_public_host_without_a_token():
    import typer
    from typer.testing import CliRunner

    from envhub.server.cli import check_exposure, is_loopback, serve_command

    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("10.1.2.3")
    check_exposure("0.0.0.0", "tok", False)
    cli = typer.Typer()
    cli.command()(serve_command)
    result = CliRunner().invoke(cli, [ENV_ID, "--host", "0.0.0.0"], env={"ENVHUB_TOKEN": ""})
    assert result.exit_code == 2 and "--token" in result.output


def test_tool_call_formats_match_local_env(client: TestClient):
    """A step over HTTP yields the same observation as the same step on a local env."""
    env = envhub.make(ENV_ID)
    env.reset(task_id=TASK)
    local = env.step(format_tool_call("answer", {"answer": "7"}))
    sid = new_session(client)
    client.post("/reset", json={"task_id": TASK}, headers={SESSION_HEADER: sid})
    remote = client.post("/step", json={"action": {"text": format_tool_call("answer", {"answer": "7"})}},
                         headers={SESSION_HEADER: sid}).json()
    assert remote["observation"]["verdict"] == local.verdict.model_dump(mode="json")
    client.delete(f"/envhub/sessions/{sid}")


@pytest.mark.parametrize("body", [
    b"[" * 1000 + b"]" * 1000,                                           # a RecursionError used to escape
    b'{"jsonrpc": "2.0", "id": "\\ud800", "method": "tools/list"}',     # the reply could not be encoded
    b'{"jsonrpc": "2.0", "id": 1, "method": "tools/\\udfff"}',
])
def test_mcp_answers_hostile_json_with_a_parse_error_not_a_500(body: bytes):
    app = create_app(ENV_ID, ServerConfig(max_sessions=3, session_ttl_s=60))
    with TestClient(app, raise_server_exceptions=False) as c:
        r = c.post("/mcp", content=body, headers={"content-type": "application/json"})
        assert r.status_code == 200, r.text
        assert r.json()["error"]["code"] == -32700
        assert c.post("/mcp", json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"}).json()["result"]["tools"]


def test_a_body_nested_past_the_stack_is_invalid_json():
    app = create_app(ENV_ID, ServerConfig(max_sessions=3, session_ttl_s=60))
    with TestClient(app, raise_server_exceptions=False) as c:
        r = c.post("/reset", content=b'{"task_id": ' + b"[" * 5000 + b"]" * 5000 + b"}",
                   headers={"content-type": "application/json"})
        assert r.status_code == 400 and r.json()["code"] == "INVALID_JSON", r.text


def _validator_of(client: TestClient, path: str, method: str = "post", status: str = "200"):
    """A JSON-schema validator of ``path``'s ``status`` answer, as the app's own /openapi.json says it."""
    jsonschema = pytest.importorskip("jsonschema")
    doc = client.get("/openapi.json").json()
    schema = doc["paths"][path][method]["responses"][status]["content"]["application/json"]["schema"]
    return jsonschema.Draft202012Validator({**schema, "components": doc["components"]})


def test_every_step_answer_fits_the_openapi_schema(client: TestClient):
    """``/step`` answers OpenEnv's MCP actions with their own envelopes (ListToolsObservation,
    CallToolObservation): the schema the app publishes must allow each one as it is sent."""
    step = _validator_of(client, "/step")
    reset = _validator_of(client, "/reset")
    listed = client.post("/step", json={"action": {"type": "list_tools"}})
    assert listed.status_code == 200 and listed.json()["observation"]["tools"]
    answers = [listed.json()]
    sid = new_session(client)
    head = {SESSION_HEADER: sid}
    started = client.post("/reset", json={"task_id": TASK}, headers=head)
    assert not list(reset.iter_errors(started.json()))
    for action in ({"type": "call_tool", "tool_name": "python", "arguments": {"code": "print(6 * 7)"}},
                   {"type": "call_tool", "tool_name": "no_such_tool", "arguments": {}},
                   {"text": "not a tool call"},
                   {"type": "call_tool", "tool_name": "answer", "arguments": {"answer": gold_answer()}}):
        r = client.post("/step", json={"action": action}, headers=head)
        assert r.status_code == 200, r.text
        answers.append(r.json())
    assert answers[-1]["done"] and answers[2]["observation"]["error"]["error_type"] == "tool_not_found"
    client.delete(f"/envhub/sessions/{sid}")
    for body in answers:
        problems = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in step.iter_errors(body)]
        assert not problems, (body, problems)
