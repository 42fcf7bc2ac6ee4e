"""``envhub bench host`` at its smallest, on real servers (``python -m envhub.server envhub/Computation-v0
--sandbox process``): the CLI's figures have both sides, every round, the alternating order, and both sides
played the same actions against the same server (identical step replies). No timing is asserted.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("openenv.core")

from envhub.server.bench.host import (
    SIDES,
    BridgeSide,
    ClientSide,
    HostBenchSettings,
    report_lines,
    run_bench,
)
from envhub.server.testing import serve_in_subprocess

EMPTY_CODE = {"type": "call_tool", "tool_name": "python", "arguments": {"code": ""}}


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    """A server with Computation's own budget (6 turns an episode), unlike the bench's default one."""
    with serve_in_subprocess(["envhub/Computation-v0", "--sandbox", "process"]) as (base, _proc):
        yield base


def test_the_smallest_run_on_the_cli_has_both_sides_and_the_same_replies(tmp_path: Path):
    out = tmp_path / "host.json"
    done = subprocess.run([sys.executable, "-m", "envhub.cli", "bench", "host", "--rounds", "2", "--steps", "3",
                           "--warmup", "1", "--json", "--out", str(out)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(out.read_text())
    assert json.loads(done.stdout) == result  # --json prints what --out writes
    assert result["server"]["origin"].startswith("python -m envhub.server envhub/Computation-v0")
    assert result["mode"] == "mcp" and result["payload"] == EMPTY_CODE
    assert [r["order"] for r in result["rounds"]] == [["envhub", "openenv"], ["openenv", "envhub"]]
    for key in ("overhead_ms", "ratio", *(f"{side}.{f}" for side in SIDES for f in ("median_ms", "p90_ms"))):
        figure = result[key] if "." not in key else result[key.split(".")[0]][key.split(".")[1]]
        assert len(figure["values"]) == 2 and figure["min"] <= figure["median"] <= figure["max"], key
    assert isinstance(result["target_met"], bool) and result["target_ms"] == 1.0
    # the same replies, step for step, on both sides and in both rounds (each round resets the same task)
    assert result["replies_match"] and all(r["replies_match"] for r in result["rounds"])
    assert len({r[side]["digest"] for r in result["rounds"] for side in SIDES}) == 1
    sample = result["sample_reply"]
    assert sample["observation"]["result"]["data"] == "Error: the code is empty"
    assert (sample["reward"], sample["done"], sample["observation"]["metadata"]["turn"]) == (0.0, False, 1)
    lines = report_lines(result)
    assert any(line.startswith("target (overhead <= 1 ms a step at the median): ") for line in lines)
    assert "replies: the same on both sides in every round" in lines


def test_both_sides_step_the_same_server_through_a_done_step_and_reset_alike(url: str):
    """Past the server's 6-turn budget: the 6th step is done on both sides, and the 7th is turn 1 of a
    new episode; the action runs on the server (its reply is the tool's own)."""
    ours = BridgeSide(url, "python", {"code": ""})
    try:
        assert ours.payload == EMPTY_CODE and ours.env.env_id == "openenv:" + url
        theirs = ClientSide(url, ours.payload, ours.reset_data)
        try:
            (_, mine), (_, its) = ours.play(7), theirs.play(7)
        finally:
            theirs.close()
    finally:
        ours.close()
    assert mine == its and len(mine) == 7
    assert [r["done"] for r in mine] == [False] * 5 + [True, False]
    assert [r["observation"]["metadata"]["turn"] for r in mine] == [1, 2, 3, 4, 5, 6, 1]


def test_a_given_url_and_action_are_played_and_a_missing_tool_is_one_error(url: str):
    result = run_bench(HostBenchSettings(rounds=1, steps=2, warmup=0, url=url, arguments={"code": "print(6 * 7)"}),
                       out=None)
    assert result["server"] == {"url": url, "origin": "given with --url"} and result["replies_match"]
    assert result["sample_reply"]["observation"]["result"]["data"].strip() == "42"
    with pytest.raises(ValueError, match="has no tool 'nope'; its tools: python, answer"):
        run_bench(HostBenchSettings(rounds=1, steps=1, url=url, tool="nope"), out=None)
