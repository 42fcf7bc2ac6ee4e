"""``envhub.make("openenv:DIR", docker=True)``: our own Computation env exported as an OpenEnv
package (``envhub tasks export --format openenv``), built from its Dockerfile offline, run as a
container and played back through the bridge -- the round trip must earn what the native env
earns for gold and noop, and leave no container behind, ``kill -9`` of its owner included."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path

import pytest
from sandbox_fixtures import require_backend
from typer.testing import CliRunner

import envhub
from envhub.cli.commands import app
from envhub.policies import NoopPolicy
from envhub.sandboxes import base_image_tag
from envhub.tasks.openenv.env import OpenEnvBridge
from envhub.types import Action

pytestmark = [pytest.mark.docker, pytest.mark.slow]
ENV_ID = "envhub/Computation-v0"


@pytest.fixture(scope="module")
def package(tmp_path_factory: pytest.TempPathFactory) -> Path:
    require_backend("docker")
    dest = tmp_path_factory.mktemp("openenv") / "computation"
    result = CliRunner().invoke(app, ["tasks", "export", ENV_ID, "--format", "openenv", str(dest),
                                      "--base-image", base_image_tag()])
    assert result.exit_code == 0, result.output
    return dest


def _containers(directory: Path) -> list[str]:
    out = subprocess.run(["docker", "ps", "-aq", "--filter", f"label=envhub.openenv-package={directory}"],
                         capture_output=True, text=True, check=True).stdout
    return out.split()


def test_the_exported_package_hosted_back_earns_what_the_native_env_earns(package: Path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        native = envhub.make(ENV_ID, split="test", sandbox="process")
    bridge = envhub.make(f"openenv:{package}", docker=True, split="test")
    try:
        assert isinstance(bridge, OpenEnvBridge) and _containers(package)
        assert list(bridge.tasks.task_ids("test")) == list(native.tasks.task_ids("test"))
        for task_id in list(native.tasks.task_ids("test"))[:3]:
            task = native.tasks.get(task_id)
            assert native.play(task_id, native.gold_actions).reward == 1.0
            bridge.reset(task_id=task_id)
            for action in native.gold_actions(task):
                obs = bridge.step(action)
            assert obs.done and obs.reward == 1.0 and obs.outcome.value == "success"
            floor = bridge.reset(task_id=task_id)
            empty = NoopPolicy().start(bridge, floor, seed=0).act(floor).text
            obs = bridge.step(empty)
            native_floor = native.play(task_id, lambda _task, text=empty: [Action(text=text)])
            assert obs.done and obs.reward == native_floor.reward == 0.0 and obs.outcome == native_floor.outcome
    finally:
        bridge.close()
        native.close()
    assert _containers(package) == []


def test_a_killed_owner_leaves_no_container(package: Path):
    script = textwrap.dedent(f"""
        import os, signal, envhub
        env = envhub.make("openenv:{package}", docker=True)
        print("up", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600)
    assert "up" in done.stdout and done.returncode == -9, done.stderr[-2000:]
    deadline = time.monotonic() + 60
    while _containers(package) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert _containers(package) == []
