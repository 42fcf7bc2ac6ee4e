"""Schemathesis against /openapi.json, in-process: bad input must never become a 5xx.

Every operation gets a bounded number of generated requests (valid and invalid bodies, headers,
query strings). Half the stateful requests carry a live session id, so the code behind the
session check is fuzzed too, not only the 404 in front of it.
"""

from __future__ import annotations

import hashlib

import pytest

pytest.importorskip("fastapi")
schemathesis = pytest.importorskip("schemathesis")
from hypothesis import HealthCheck, settings  # noqa: E402
from schemathesis.checks import not_a_server_error  # noqa: E402
from starlette.testclient import TestClient  # noqa: E402

from envhub.server import ServerConfig, create_app  # noqa: E402
from envhub.server.wire import SESSION_HEADER  # noqa: E402

app = create_app("envhub/Computation-v0", ServerConfig(max_sessions=64, session_ttl_s=60,
                                                       max_body_bytes=64 * 1024))
schema = schemathesis.openapi.from_asgi("/openapi.json", app)
_live: list[str] = []


def _session() -> str:
    """A session with a running episode (replaced when fuzzing has finished its episode)."""
    client = TestClient(app)  # no lifespan: that would close every session when it ends
    if _live:
        state = client.get("/state", headers={SESSION_HEADER: _live[0]})
        if state.status_code == 200 and not state.json()["done"]:
            return _live[0]
        client.delete(f"/envhub/sessions/{_live.pop()}")
    sid = client.post("/envhub/sessions").json()["session_id"]
    client.post("/reset", json={"task_id": "comp-bigint-L1-0"}, headers={SESSION_HEADER: sid})
    _live.append(sid)
    return sid


@schema.parametrize()
@settings(max_examples=25, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
def test_no_input_makes_a_server_error(case):
    headers = case.headers or {}
    sid = headers.get(SESSION_HEADER)
    if sid is not None and sid != "new" and int(hashlib.sha1(repr(case.body).encode()).hexdigest(), 16) % 2:
        headers[SESSION_HEADER] = _session()
        case.headers = headers
    case.call_and_validate(checks=[not_a_server_error])
