"""Gymnasium's AsyncVectorEnv started after the parent process used an env (real docker / bwrap).

With ``fork`` the workers inherit the parent's memory: its warm sandbox pool (whose executor
pipes the parent still uses), its Docker client connection and its release thread pool (whose
threads do not survive the fork). Each must be forgotten in the child, or the workers and the
parent talk over each other's channels and ``close()`` waits forever.
"""

from __future__ import annotations

import time

import gymnasium
import pytest
from sandbox_fixtures import assert_no_leaked_containers, backend_params, require_backend

from envhub.parsing import format_tool_call
from envhub.sandboxes import pool
from envhub.types import Outcome

ENV = "envhub/Computation-v0"
INFRA = {o.value for o in Outcome if o.is_infra}


def _python(code: str) -> str:
    return format_tool_call("python", {"code": code})


def _parent_with_an_idle_pooled_sandbox(backend: str) -> gymnasium.Env:
    """A parent env that has run a whole episode: its sandbox is back in the shared pool, idle."""
    env = gymnasium.make(ENV, sandbox=backend)
    env.reset(seed=0)
    assert env.step(_python("print(6 * 7)"))[0].endswith("42")
    env.step(format_tool_call("answer", {"answer": "1"}))
    deadline = time.monotonic() + 30
    while not any(p.idle for p in pool._shared.values()):
        assert time.monotonic() < deadline, "the finished episode never gave its sandbox back"
        time.sleep(0.05)
    env.reset(seed=3)
    return env


def _play_vector(backend: str, context: str) -> list[str]:
    # "envhub:" makes Gymnasium import envhub (which registers the envs) in a spawned worker
    envs = gymnasium.vector.AsyncVectorEnv(
        [lambda: gymnasium.make(f"envhub:{ENV}", sandbox=backend) for _ in range(3)], shared_memory=False,
        context=context)
    try:
        envs.reset(seed=[1, 2, 4])
        obs, *_ = envs.step([_python(f"print({i} * 100)") for i in range(3)])
        assert [o.rsplit("\n", 1)[-1] for o in obs] == ["0", "100", "200"], obs
        _, _, term, _, info = envs.step([format_tool_call("answer", {"answer": "1"})] * 3)
        assert all(term)
        return list(info["outcome"])
    finally:
        started = time.monotonic()
        envs.close()
        # a hang guard: close() takes well under a second (0.01 s here); the bug made it wait forever
        assert time.monotonic() - started < 30, "AsyncVectorEnv.close() hung"


@pytest.mark.timeout(180)
@pytest.mark.parametrize("backend", backend_params("docker", "bwrap"))
def test_forked_workers_do_not_share_the_parents_pooled_sandbox(backend: str) -> None:
    require_backend(backend)
    parent = _parent_with_an_idle_pooled_sandbox(backend)
    try:
        outcomes = _play_vector(backend, "fork")
        assert not set(outcomes) & INFRA, outcomes
        # the parent's own pooled sandbox was not touched by the workers
        assert parent.step(_python("print(6 * 8)"))[0].endswith("48")
    finally:
        parent.close()
    assert_no_leaked_containers()


@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.parametrize("backend", backend_params("docker"))
def test_spawned_workers_keep_working(backend: str) -> None:
    require_backend(backend)
    parent = _parent_with_an_idle_pooled_sandbox(backend)
    try:
        assert not set(_play_vector(backend, "spawn")) & INFRA
    finally:
        parent.close()
