"""Edges where /openapi.json and the server once disagreed (schemathesis found them), over real HTTP.

- The reset seed's upper bound: FastAPI's OpenAPI models wrote ``2**63 - 1`` as the float
  ``9.223372036854776e+18`` (that is ``2**63``), so a seed the document allowed was refused.
- ``POST /mcp`` without the body the document requires answered 200.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("fastapi")
import httpx

from envhub.server import ServerConfig, create_app
from envhub.server.testing import serve_in_thread


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    app = create_app("envhub/Computation-v0", ServerConfig(max_sessions=4, session_ttl_s=60))
    with serve_in_thread(app) as base:
        yield base


@pytest.fixture(scope="module")
def document(url: str) -> dict[str, Any]:
    return httpx.get(url + "/openapi.json", timeout=30).json()


def test_the_seed_bounds_in_the_document_are_the_ones_enforced(url: str, document: dict[str, Any]) -> None:
    seed = document["components"]["schemas"]["ResetRequest"]["properties"]["seed"]
    (integer,) = [branch for branch in seed["anyOf"] if branch.get("type") == "integer"]
    low, high = integer["minimum"], integer["maximum"]
    assert (low, high) == (0, 2**63 - 1)
    assert all(type(bound) is int for bound in (low, high))  # not floats, which cannot hold 2**63 - 1
    raw = httpx.get(url + "/openapi.json", timeout=30).text
    assert '"maximum":9223372036854775807' in raw.replace(" ", "")

    def reset(value: int) -> int:
        return httpx.post(url + "/reset", json={"seed": value}, timeout=60).status_code

    assert (reset(low), reset(high)) == (200, 200)
    assert (reset(low - 1), reset(high + 1)) == (422, 422)


def test_mcp_without_a_body_is_an_http_error_as_the_document_says(url: str, document: dict[str, Any]) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    post = document["paths"]["/mcp"]["post"]
    assert post["requestBody"]["required"] is True
    schema = post["responses"]["400"]["content"]["application/json"]["schema"]
    for headers in ({}, {"content-type": "application/json"}):
        r = httpx.post(url + "/mcp", headers=headers, timeout=30)
        assert r.status_code == 400, r.text
        body = r.json()
        jsonschema.validate(body, schema)
        assert body["error"]["code"] == -32700 and "no body" in body["error"]["message"]
    # A body that is JSON but no JSON-RPC request keeps its JSON-RPC error in a 200 (openenv validate).
    r = httpx.post(url + "/mcp", content=json.dumps({}), headers={"content-type": "application/json"}, timeout=30)
    assert r.status_code == 200 and r.json()["error"]["code"] == -32600
    tools = httpx.post(url + "/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, timeout=30)
    assert tools.status_code == 200 and tools.json()["result"]["tools"]
