"""``ServerConfig.prewarm`` (``envhub serve --prewarm N``): the agent sandboxes are started before
the server serves, and a session's first tool call gets one of them."""

from __future__ import annotations

import pytest

pytest.importorskip("fastapi")
from fastapi.testclient import TestClient

from envhub.parsing import format_tool_call
from envhub.server import ServerConfig, create_app

ENV_ID = "envhub/Computation-v0"


def _idle(metrics: str) -> int:
    return sum(int(float(line.rsplit(" ", 1)[1])) for line in metrics.splitlines()
               if line.startswith('envhub_sandbox_pool_idle{backend="process"}'))


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the process backend asked for by name isolates nothing
def test_the_pool_is_warm_before_the_first_client() -> None:
    config = ServerConfig(max_sessions=4, prewarm=3, env_kwargs={"sandbox": "process", "sandbox_pool": 1})
    with TestClient(create_app(ENV_ID, config)) as client:
        assert _idle(client.get("/metrics").text) >= 3
        assert 'envhub_sandbox_pool_size{backend="process"}' in client.get("/metrics").text
        with client.websocket_connect("/ws") as ws:
            ws.send_json({"type": "reset", "data": {}})
            assert ws.receive_json()["type"] == "observation"
            step = format_tool_call("python", {"code": "print(6 * 7)"})
            ws.send_json({"type": "step", "data": {"text": step}})
            reply = ws.receive_json()
            assert "42" in reply["data"]["observation"]["messages"][0]["content"]
            ws.send_json({"type": "close"})
