"""Interop with the real ``openenv`` package: its own clients and its validator against our server.

Everything runs on 127.0.0.1 (a server on a background thread, port 0). The computation
episode plays the family's gold actions, its python tool call included: the server is pinned to
the ``process`` sandbox backend (which works wherever the tests run), and the test fails, rather
than skipping the tool call, if the tool does not run.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

import envhub
from envhub.parsing import DefaultParser
from envhub.types import Action

pytest.importorskip("fastapi")
openenv_core = pytest.importorskip("openenv.core")

from envhub.server import ServerConfig, create_app  # noqa: E402
from envhub.server.testing import serve_in_thread  # noqa: E402

ENV_ID = "envhub/Computation-v0"
#: The backend every test machine has; the gold episode's python call must really run in it.
SANDBOX = "process"


def gold_answer(env: envhub.Env, task_id: str) -> str:
    """The value the gold solution submits."""
    text = env.gold_actions(env.tasks.get(task_id))[-1].text
    return str(DefaultParser().parse(text).calls[0].arguments["answer"])


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    app = create_app(ENV_ID, ServerConfig(max_sessions=8, session_ttl_s=30, env_kwargs={"sandbox": SANDBOX}))
    with serve_in_thread(app) as base:
        yield base


@pytest.fixture(scope="module")
def local() -> envhub.Env:
    return envhub.make(ENV_ID, sandbox=SANDBOX)


@pytest.fixture(scope="module")
def gold_plan(local: envhub.Env) -> tuple[str, list[Action]]:
    task = local.tasks.get(local.tasks.task_ids("train")[3])
    actions = local.gold_actions(task)
    names = [call.name for a in actions for call in DefaultParser().parse(a.text).calls]
    assert names[:-1] and "python" in names[:-1] and names[-1] == "answer", names  # a tool call, then the answer
    return task.task_id, actions


def test_openenv_generic_client_runs_a_gold_episode_to_success(url: str, gold_plan: tuple[str, list[Action]]):
    task_id, actions = gold_plan
    with openenv_core.GenericEnvClient(base_url=url).sync() as client:
        result = client.reset(task_id=task_id)
        assert not result.done
        roles = [m["role"] for m in result.observation["messages"]]
        assert roles == ["system", "user"]
        assert {t["name"] for t in result.observation["tools"]} == {"python", "answer"}
        tool_replies = []
        for action in actions:
            assert not result.done
            result = client.step(action.model_dump(mode="json", exclude_none=True))
            if not result.done:
                tool_replies += [m for m in result.observation["messages"] if m["role"] == "tool"]
        # the python tool really ran in the sandbox: it printed the value the gold answer submits
        answer = str(DefaultParser().parse(actions[-1].text).calls[0].arguments["answer"])
        assert tool_replies and any(r.get("name") == "python" and answer in r["content"] for r in tool_replies), \
            tool_replies
        assert result.done
        assert result.reward == 1.0
        assert result.observation["outcome"] == "success"
        state = client.state()
        assert state["step_count"] == len(actions)
        assert state["task"]["task_id"] == task_id
        assert "hidden" not in state["task"]  # the answer never leaves the server


def test_openenv_client_sees_errors_as_openenv_errors(url: str):
    with openenv_core.GenericEnvClient(base_url=url).sync() as client:
        with pytest.raises(RuntimeError, match="EPISODE_NOT_RUNNING"):
            client.step({"text": "hello"})
        with pytest.raises(RuntimeError, match="VALIDATION_ERROR"):
            client.step({"txt": "typo"})
        with pytest.raises(RuntimeError, match="UNKNOWN_TASK"):
            client.reset(task_id="no-such-task")
        assert not client.reset(seed=3).done  # the connection survives errors


def test_openenv_mcp_tool_client_lists_and_calls_tools(url: str, local: envhub.Env):
    task = local.tasks.get(local.tasks.task_ids("train")[5])
    answer = gold_answer(local, task.task_id)
    with openenv_core.MCPToolClient(base_url=url).sync() as client:
        assert {t.name for t in client.list_tools()} == {"python", "answer"}
        client.reset(task_id=task.task_id)
        out = client.call_tool("answer", answer=answer)
        assert "outcome=success" in out
    assert httpx.get(url + "/envhub/info").json()["active_sessions"] == 0  # its session was closed


def test_openenv_mcp_actions_step_over_ws(url: str, local: envhub.Env):
    """OpenEnv's docs step an MCP env with ``CallToolAction`` / ``ListToolsAction``: its own
    ``MCPToolClient.step`` over /ws gets its own observation types back."""
    mcp_types = pytest.importorskip("openenv.core.env_server.mcp_types")
    task = local.tasks.get(local.tasks.task_ids("train")[7])
    answer = gold_answer(local, task.task_id)
    with openenv_core.MCPToolClient(base_url=url).sync() as client:
        client.reset(task_id=task.task_id)
        listed = client.step(mcp_types.ListToolsAction())
        assert isinstance(listed.observation, mcp_types.ListToolsObservation) and not listed.done
        assert {t.name: t.input_schema for t in listed.observation.tools} == \
            {t.name: t.parameters for t in local.tool_specs}
        ran = client.step(mcp_types.CallToolAction(tool_name="python", arguments={"code": "print(6 * 7)"}))
        assert isinstance(ran.observation, mcp_types.CallToolObservation) and ran.observation.error is None
        assert ran.observation.result["data"].strip().endswith("42") and not ran.done
        missing = client.step(mcp_types.CallToolAction(tool_name="nope", arguments={}))
        assert missing.observation.error.error_type is mcp_types.ToolErrorType.TOOL_NOT_FOUND
        assert client.state().step_count == 1  # an unknown tool took no step
        bad = client.step(mcp_types.CallToolAction(tool_name="answer", arguments={"answer": 5}))
        assert bad.observation.result["is_error"] and not bad.done  # the env explains, as to a model
        done = client.step(mcp_types.CallToolAction(tool_name="answer", arguments={"answer": answer}))
        assert done.done and done.reward == 1.0 and "outcome=success" in done.observation.result["data"]


def test_openenv_mcp_actions_on_http_step(url: str, local: envhub.Env):
    """The same actions on HTTP /step, parsed by OpenEnv's own client code: ``list_tools`` needs
    no session (as on OpenEnv's stateless /step); ``call_tool`` steps a session's episode."""
    mcp_types = pytest.importorskip("openenv.core.env_server.mcp_types")
    parse = openenv_core.MCPToolClient(base_url=url)._parse_result
    task_id = local.tasks.task_ids("train")[9]
    with httpx.Client(base_url=url) as http:
        listed = http.post("/step", json={"action": mcp_types.ListToolsAction().model_dump()})
        assert listed.status_code == 200
        assert [t.name for t in parse(listed.json()).observation.tools] == ["python", "answer"]
        call = mcp_types.CallToolAction(tool_name="answer", arguments={"answer": gold_answer(local, task_id)})
        assert http.post("/step", json={"action": call.model_dump()}).status_code == 409  # no episode
        sid = http.post("/envhub/sessions").json()["session_id"]
        head = {"X-Envhub-Session": sid}
        assert http.post("/reset", json={"task_id": task_id}, headers=head).status_code == 200
        result = parse(http.post("/step", json={"action": call.model_dump()}, headers=head).json())
        assert isinstance(result.observation, mcp_types.CallToolObservation)
        assert result.done and result.reward == 1.0
        wrong = http.post("/step", json={"action": {"type": "call_tools", "tool_name": "answer"}}, headers=head)
        assert wrong.status_code == 422 and "call_tool" in wrong.json()["message"]
        http.delete(f"/envhub/sessions/{sid}")


def test_openenv_validate_url_passes(url: str):
    """``openenv validate --url``: its own command function, run in-process (a fresh interpreter
    would spend most of this test importing openenv's CLI)."""
    validate_cmd = pytest.importorskip("openenv.cli.commands.validate")
    if "url" not in validate_cmd.validate.__code__.co_varnames:
        pytest.skip("this openenv has no `validate --url`")
    import typer
    from typer.testing import CliRunner

    cli = typer.Typer()
    cli.command()(validate_cmd.validate)
    result = CliRunner().invoke(cli, ["--url", url, "--json"])
    assert result.exit_code == 0, result.output
    assert '"passed": true' in result.output


def test_plain_mcp_session_over_http(url: str):
    """A spec MCP client: initialize -> Mcp-Session-Id -> tools/call -> DELETE."""
    with httpx.Client(base_url=url) as http:
        init = http.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "initialize",
                                       "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                                                  "clientInfo": {"name": "t", "version": "0"}}})
        assert init.status_code == 200
        sid = init.headers["mcp-session-id"]
        assert "Compute" in init.json()["result"]["instructions"] or init.json()["result"]["instructions"]
        note = http.post("/mcp", json={"jsonrpc": "2.0", "method": "notifications/initialized"},
                         headers={"Mcp-Session-Id": sid})
        assert note.status_code == 202
        unknown = http.post("/mcp", json={"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                                          "params": {"name": "nope", "arguments": {}}},
                            headers={"Mcp-Session-Id": sid}).json()
        assert unknown["error"]["code"] == -32602
        bad_args = http.post("/mcp", json={"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                                           "params": {"name": "answer", "arguments": {"answer": 5}}},
                             headers={"Mcp-Session-Id": sid}).json()["result"]
        assert bad_args["isError"] and not bad_args["structuredContent"]["done"]
        reset = http.post("/mcp", json={"jsonrpc": "2.0", "id": 4, "method": "envhub/reset",
                                        "params": {"task_id": "comp-bigint-L1-0"}},
                          headers={"Mcp-Session-Id": sid}).json()["result"]
        assert "Compute exactly" in reset["instructions"]
        answer = gold_answer(envhub.make(ENV_ID), "comp-bigint-L1-0")
        done = http.post("/mcp", json={"jsonrpc": "2.0", "id": 5, "method": "tools/call",
                                       "params": {"name": "answer", "arguments": {"answer": answer}}},
                         headers={"Mcp-Session-Id": sid}).json()["result"]
        assert done["structuredContent"]["done"] is True
        assert done["structuredContent"]["outcome"] == "success" and done["structuredContent"]["reward"] == 1.0
        assert http.delete("/mcp", headers={"Mcp-Session-Id": sid}).status_code == 204
        gone = http.post("/mcp", json={"jsonrpc": "2.0", "id": 6, "method": "tools/list"},
                         headers={"Mcp-Session-Id": sid})
        assert gone.status_code == 404


def test_official_mcp_sdk_client(url: str):
    """The reference MCP client (streamable HTTP) against /mcp: initialize, list, call, end."""
    import asyncio

    transport = pytest.importorskip("mcp.client.streamable_http")
    from mcp import ClientSession

    open_client = getattr(transport, "streamable_http_client", None) or transport.streamablehttp_client

    async def session() -> tuple[list[str], str, dict]:
        async with open_client(url + "/mcp") as (read, write, _), ClientSession(read, write) as s:
            init = await s.initialize()
            tools = [t.name for t in (await s.list_tools()).tools]
            done = await s.call_tool("answer", {"answer": "42"})
            return tools, init.instructions or "", done.structuredContent or {}

    before = httpx.get(url + "/envhub/info").json()["active_sessions"]
    tools, instructions, result = asyncio.run(session())
    assert tools == ["python", "answer"]
    assert "computation" in instructions.lower() or "compute" in instructions.lower()
    assert result["done"] is True  # a random task: "42" is right, wrong or not even in the asked form
    assert result["outcome"] in {"success", "wrong_answer", "format_error"}
    assert httpx.get(url + "/envhub/info").json()["active_sessions"] == before  # DELETE ended it
