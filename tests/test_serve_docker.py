"""``envhub serve --docker``: the image builds offline on envhub/base and runs the way OpenEnv's
``LocalDockerProvider`` runs images (port 8000, /health), driven by OpenEnv's own client.

Needs a Docker engine and the base image (``envhub sandbox build``); skipped otherwise. The first
build takes about a minute; later runs reuse the image while its inputs are unchanged.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time

import httpx
import pytest

import envhub

pytestmark = [pytest.mark.docker, pytest.mark.slow]
pytest.importorskip("fastapi")

ENV_ID = "envhub/Computation-v0"


def _docker_ready() -> str | None:
    if shutil.which("docker") is None:
        return "no docker CLI"
    if subprocess.run(["docker", "info"], capture_output=True, timeout=30).returncode != 0:
        return "the Docker engine is not running"
    from envhub.sandboxes.images import base_image_tag

    if subprocess.run(["docker", "image", "inspect", base_image_tag()], capture_output=True,
                      timeout=30).returncode != 0:
        return f"{base_image_tag()} is not built (envhub sandbox build)"
    return None


@pytest.fixture(scope="module")
def image() -> str:
    why = _docker_ready()
    if why:
        pytest.skip(why)
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
        ports = subprocess.run(["docker", "port", container.container_id], capture_output=True, text=True).stdout
        assert "0.0.0.0" not in ports  # reachable from this machine only
        deadline = time.monotonic() + 60
        health = ""
        while time.monotonic() < deadline:
            state = subprocess.run(["docker", "inspect", "--format", "{{json .State.Health}}",
                                    container.container_id], capture_output=True, text=True).stdout
            health = (json.loads(state) or {}).get("Status", "")
            if health == "healthy":
                break
            time.sleep(1)
        assert health == "healthy"
