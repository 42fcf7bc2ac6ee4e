"""``envhub serve --docker``: the image builds offline on envhub/base and runs the way OpenEnv's
``LocalDockerProvider`` runs images (port 8000, /health), driven by OpenEnv's own client.

Needs a Docker engine and the base image (built first if the engine answers but it is missing);
skipped without an engine -- a failure instead where ``ENVHUB_REQUIRE_SANDBOXES`` names docker
(CI), as for every sandbox test. The first build takes about a minute; later runs reuse the image
while its inputs are unchanged.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
import time

import httpx
import pytest
from sandbox_fixtures import require_backend

import envhub
from envhub.sandboxes.dockerapi import LABEL_BACKEND, LABEL_OWNED, LABEL_PID, docker_client

pytestmark = [pytest.mark.docker, pytest.mark.slow]
pytest.importorskip("fastapi")

ENV_ID = "envhub/Computation-v0"


@pytest.fixture(scope="module")
def image() -> str:
    """The server image, built through docker-py like the sandboxes (no docker CLI needed); the
    engine and base image come through the shared policy (a failure, not a skip, where
    ``ENVHUB_REQUIRE_SANDBOXES`` names docker)."""
    require_backend("docker")
    from envhub.server.docker import build_server_image

    return build_server_image(ENV_ID, echo=lambda _m: None)


def test_openenv_local_docker_provider_runs_our_image(image: str):
    containers = pytest.importorskip("openenv.core.containers.runtime")
    openenv_core = pytest.importorskip("openenv.core")
    local = envhub.make(ENV_ID)
    task = local.tasks.get(local.tasks.task_ids("train")[3])
    provider = containers.LocalDockerProvider()
    url = provider.start_container(image)
    try:
        provider.wait_for_ready(url, timeout_s=120)
        with openenv_core.GenericEnvClient(base_url=url).sync() as client:
            result = client.reset(task_id=task.task_id)
            for action in local.gold_actions(task):  # the python tool runs inside the container
                result = client.step(action.model_dump(mode="json", exclude_none=True))
            assert result.done and result.observation["outcome"] == "success"
    finally:
        provider.stop_container()


def test_published_on_loopback_with_a_token_and_a_healthcheck(image: str):
    from envhub.server.docker import server_container

    with server_container(image, host="127.0.0.1", token="tok") as container:
        assert container.url.startswith("http://127.0.0.1:")
        assert httpx.get(container.url + "/health").json() == {"status": "healthy"}
        assert httpx.get(container.url + "/schema").status_code == 401
        auth = {"Authorization": "Bearer tok"}
        assert httpx.get(container.url + "/envhub/info", headers=auth).json()["env_id"] == ENV_ID
        engine = docker_client()
        bindings = engine.api.port(container.container_id, 8000)
        assert bindings and {b["HostIp"] for b in bindings} == {"127.0.0.1"}  # reachable from this machine only
        deadline = time.monotonic() + 60
        health = ""
        while time.monotonic() < deadline:
            state = engine.api.inspect_container(container.container_id)["State"]
            health = (state.get("Health") or {}).get("Status", "")
            if health == "healthy":
                break
            time.sleep(1)
        assert health == "healthy"


def test_a_missing_engine_fails_where_docker_is_required(tmp_path) -> None:
    """CI sets ENVHUB_REQUIRE_SANDBOXES=docker: an unreachable engine must fail this module's
    tests, never skip them silently."""
    env = {**os.environ, "ENVHUB_REQUIRE_SANDBOXES": "docker",
           "DOCKER_HOST": f"unix://{tmp_path}/no-engine.sock"}
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rfEs",
                          __file__, "-k", "published_on_loopback"],
                         capture_output=True, text=True, env=env, timeout=300)
    assert run.returncode == 1, run.stdout[-3000:]
    assert "required here (ENVHUB_REQUIRE_SANDBOXES)" in run.stdout, run.stdout[-3000:]
    assert "skipped" not in run.stdout.splitlines()[-1], run.stdout[-3000:]


class _Served:
    """``envhub serve --docker`` in a subprocess, its output read as it comes."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "envhub.cli", "serve", ENV_ID, "--docker", "--port", "0"],
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.text = ""
        threading.Thread(target=self._read, daemon=True).start()
        deadline = time.monotonic() + 300  # a source edit since the fixture's build rebuilds the image
        while not (found := re.search(r"\(container ([0-9a-f]{12})\)", self.text)):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.proc.kill()
                raise AssertionError(f"envhub serve --docker did not start:\n{self.text[-3000:]}")
            time.sleep(0.1)
        self.container = found[1]

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.text += line


def _served_containers(pid: int) -> list[str]:
    """The containers (running or not) that the envhub process ``pid`` serves from."""
    rows = docker_client().api.containers(all=True, filters={"label": [f"{LABEL_PID}={pid}",
                                                                        f"{LABEL_BACKEND}=serve"]})
    return [row["Id"][:12] for row in rows]


def _remove(*containers: str) -> None:
    for cid in containers:
        with contextlib.suppress(Exception):  # gone already, as it should be
            docker_client().api.remove_container(cid, force=True)


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGINT, 0), (signal.SIGTERM, -signal.SIGTERM),
                                              (signal.SIGHUP, -signal.SIGHUP)],
                         ids=["SIGINT", "SIGTERM", "SIGHUP"])
def test_serve_docker_removes_its_container_on_ctrl_c_sigterm_and_sighup(image: str, signum: int, code: int):
    served = _Served()
    try:
        labels = docker_client().api.inspect_container(served.container)["Config"]["Labels"]
        assert labels[LABEL_OWNED] == "1" and labels[LABEL_PID] == str(served.proc.pid)  # the sandboxes' labels
        served.proc.send_signal(signum)
        served.proc.wait(timeout=60)
        assert served.proc.returncode == code, served.text[-3000:]
        assert _served_containers(served.proc.pid) == [], f"left running after {signal.Signals(signum).name}"
    finally:
        served.proc.kill()
        _remove(served.container)


def test_a_kill_9_leaves_a_container_that_the_next_start_removes(image: str):
    """``kill -9`` runs no cleanup and the server runs on in its container; the next envhub process
    that starts a container removes it, as it removes dead rollouts' leftovers."""
    first = _Served()
    second = None
    try:
        first.proc.kill()
        first.proc.wait(timeout=30)
        assert _served_containers(first.proc.pid) == [first.container]  # running on, ownerless
        assert docker_client().api.inspect_container(first.container)["State"]["Running"]
        second = _Served()
        assert _served_containers(first.proc.pid) == [], "the next start left the dead owner's container"
        assert _served_containers(second.proc.pid) == [second.container]
        second.proc.send_signal(signal.SIGTERM)
        second.proc.wait(timeout=60)
        assert _served_containers(second.proc.pid) == []
    finally:
        for served in (first, second):
            if served is not None:
                served.proc.kill()
                _remove(served.container)
