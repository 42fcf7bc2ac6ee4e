"""Fixtures of the code-repair tests that play episodes through the tools: the module-scoped env on
each isolating backend (docker and bwrap) and its first train instance. A test module that
defines its own ``env`` uses that one instead."""

from __future__ import annotations

import pytest
from sandbox_fixtures import backend_params, require_backend

import envhub

ENV = "envhub/CodeRepair-v0"


@pytest.fixture(scope="module", params=backend_params("docker", "bwrap"))
def env(request):
    require_backend(request.param)
    e = envhub.make(ENV, split="train", sandbox=request.param)
    yield e
    e.close()


@pytest.fixture(scope="module")
def inst(env):
    return env.tasks.instance(env.tasks.task_ids("train")[0])
