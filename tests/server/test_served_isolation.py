"""Agent code in a served container sees nothing of ours (the landlock backend, docs/serving.md).

Each env's OpenEnv package is exported and built offline, with a marker file added to its task
data and one to its verifier package, and started the way OpenEnv's ``LocalDockerProvider``
starts images (Docker's default seccomp profile and capabilities, the image's uid) with a
marker as its bearer token. Through the env's own tools the agent's code then searches the
whole filesystem it can see, and ``/proc/*/{cmdline,environ,maps,status,mem}`` of every other
process, for the markers, and tries the server's port and an outside address: nothing is found,
nothing opens, nothing connects. The gold still earns 1 and the noop 0, through OpenEnv's own
``GenericEnvClient`` and ``MCPToolClient``.
"""

from __future__ import annotations

import json
import secrets
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from isolation_probe import probe_report, probe_source
from sandbox_fixtures import require_backend

import envhub
from envhub.parsing import format_tool_call
from envhub.sandboxes import base_image_tag
from envhub.server.openenv_package import export_openenv_package

pytestmark = [pytest.mark.docker, pytest.mark.slow]
openenv_core = pytest.importorskip("openenv.core")
runtime = pytest.importorskip("openenv.core.containers.runtime")

SITE = "/opt/envhub/site/envhub"
#: Where the markers go, below the package's site: (task data, verifier data).
ENVS = {
    "envhub/Computation-v0": ("tasks/computation", "verifiers"),
    "envhub/CodeRepair-v0": ("tasks/code_repair/data", "verifiers/probes"),
}


class Served:
    def __init__(self, env_id: str, tag: str, url: str, token: str, markers: list[bytes], paths: list[str]) -> None:
        self.env_id, self.tag, self.url, self.token = env_id, tag, url, token
        self.markers, self.paths = markers, paths
        self.local = envhub.make(env_id, split="test")

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}


@pytest.fixture(scope="module", params=sorted(ENVS))
def served(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    require_backend("docker")
    env_id = request.param
    task_dir, verifier_dir = ENVS[env_id]
    package = export_openenv_package(env_id, tmp_path_factory.mktemp("pkg") / "package", split="test",
                                     base_image=base_image_tag(), echo=lambda _m: None)
    markers = [f"envhub-{kind}-marker-{secrets.token_hex(12)}".encode() for kind in ("task", "verifier", "token")]
    paths = []
    for where, marker in zip((task_dir, verifier_dir), markers, strict=False):
        (package / "site" / "envhub" / where / "envhub-marker.txt").write_bytes(marker + b"\n")
        paths.append(f"{SITE}/{where}/envhub-marker.txt")
    tag = f"envhub-test-isolation:{uuid.uuid4().hex[:8]}"
    build = subprocess.run(["docker", "build", "--network", "none", "-q", "-t", tag, str(package)],
                           capture_output=True, text=True, timeout=900)
    assert build.returncode == 0, build.stderr[-3000:]
    provider = runtime.LocalDockerProvider()
    token = markers[2].decode()
    try:
        url = provider.start_container(tag, env_vars={"ENVHUB_TOKEN": token})
        provider.wait_for_ready(url, timeout_s=180)
        served = Served(env_id, tag, url, token, markers, paths)
        yield served
        served.local.close()
    finally:
        provider.stop_container()
        subprocess.run(["docker", "rmi", "-f", tag], capture_output=True, timeout=120)
        shutil.rmtree(package, ignore_errors=True)


def _probe_actions(served: Served) -> list[str]:
    source = probe_source(served.markers, served.paths)
    if served.env_id == "envhub/Computation-v0":
        return [format_tool_call("python", {"code": source})]
    return [format_tool_call("write_file", {"path": "probe.py", "content": source}),
            format_tool_call("run", {"command": "python3 probe.py"})]


def _probe(served: Served, url: str) -> dict:
    task_id = served.local.tasks.task_ids("test")[0]
    with openenv_core.GenericEnvClient(base_url=url, headers=served.headers, message_timeout_s=600).sync() as client:
        client.reset(task_id=task_id)
        for text in _probe_actions(served):
            result = client.step({"text": text})
    return probe_report(str(result.observation))


def test_agent_code_finds_no_secret_opens_no_process_and_reaches_no_network(served: Served) -> None:
    report = _probe(served, served.url)
    assert report["found"] == [report["control"]], report  # only its own control copy
    assert report["opened"] == [], report  # no /proc entry of any other process opens
    assert set(report["network"]) == {"server_port", "outside_tcp", "outside_udp", "outside_tcp6"}
    assert not any(v == "connected" for v in report["network"].values()), report["network"]


def test_the_gold_earns_one_and_the_noop_zero_through_openenvs_clients(served: Served) -> None:
    local = served.local
    gold_task, noop_task = (local.tasks.get(t) for t in local.tasks.task_ids("test")[1:3])
    with openenv_core.GenericEnvClient(base_url=served.url, headers=served.headers,
                                       message_timeout_s=600).sync() as client:
        client.reset(task_id=gold_task.task_id)
        for action in local.gold_actions(gold_task):
            result = client.step(action.model_dump(mode="json", exclude_none=True))
        assert result.done and result.reward == 1.0, result.observation
    terminal = "answer" if served.env_id == "envhub/Computation-v0" else "submit"
    arguments = {"answer": "no answer"} if terminal == "answer" else {}
    with openenv_core.MCPToolClient(base_url=served.url, headers=served.headers,
                                    message_timeout_s=600).sync() as client:
        client.reset(task_id=noop_task.task_id)
        out = client.call_tool(terminal, **arguments)
        assert "episode finished" in out and "reward=0.0" in out and "outcome=success" not in out, out


def test_without_the_confinement_the_same_probe_finds_every_secret(served: Served) -> None:
    """The probe's power: the same image with the process backend named (what a served container
    gave agent code before) lets it read the task and verifier markers and the token."""
    provider = runtime.LocalDockerProvider()
    try:
        url = provider.start_container(served.tag, env_vars={"ENVHUB_TOKEN": served.token, "ENVHUB_SANDBOX": "process"})
        provider.wait_for_ready(url, timeout_s=180)
        report = _probe(served, url)
    finally:
        provider.stop_container()
    assert set(served.paths) <= set(report["found"]), report["found"]
    assert any(p.startswith("/proc/") for p in report["found"]), report["found"]  # the token, in memory
    assert report["network"]["server_port"] == "connected"


def test_the_server_refuses_to_start_where_nothing_can_confine_agent_code(served: Served, tmp_path: Path) -> None:
    """Landlock filtered out by the container's seccomp profile: the server says why and exits."""
    from envhub.sandboxes.seccomp_policy import docker_profile

    profile = docker_profile()
    profile["syscalls"].append({"names": ["landlock_create_ruleset", "landlock_add_rule", "landlock_restrict_self"],
                                "action": "SCMP_ACT_ERRNO", "errnoRet": 38})
    path = tmp_path / "seccomp.json"
    path.write_text(json.dumps(profile))
    run = subprocess.run(["docker", "run", "--rm", "--network", "none", "--security-opt", f"seccomp={path}",
                          served.tag], capture_output=True, text=True, timeout=300)
    assert run.returncode != 0
    assert "is not served here" in run.stderr and "landlock: Landlock ABI 0 here" in run.stderr, run.stderr[-3000:]


SWAP_PY = ("import os\nw = os.getcwd()\nos.chdir('..')\ntry:\n    os.rename(w, w + '.x')\n    os.symlink('/proc', w)\n"
           "    print('swapped')\nexcept OSError as exc:\n    print('refused', exc.errno)\n")


def test_a_swapped_work_dir_redirects_no_tool_and_poisons_no_later_episode(served: Served) -> None:
    """The agent renames its work dir and puts a link to /proc in its place (#38 item 1): no tool,
    no submission and no later episode of the server follows the link."""
    local = served.local
    first, *later = (local.tasks.get(t) for t in local.tasks.task_ids("test")[3:6])
    code_repair = served.env_id == "envhub/CodeRepair-v0"
    swap = ([format_tool_call("write_file", {"path": "swap.py", "content": SWAP_PY}),
             format_tool_call("run", {"command": "python3 swap.py"})] if code_repair
            else [format_tool_call("python", {"code": SWAP_PY})])
    with openenv_core.GenericEnvClient(base_url=served.url, headers=served.headers,
                                       message_timeout_s=600).sync() as client:
        client.reset(task_id=first.task_id)
        for text in swap:
            result = client.step({"text": text})
        assert "refused" in str(result.observation) or "swapped" in str(result.observation), result.observation
        if code_repair:
            listed = str(client.step({"text": format_tool_call("list_files", {})}).observation)
            read = str(client.step({"text": format_tool_call("read_file", {"path": "self/cmdline"})}).observation)
            assert "cmdline" not in listed and "self" not in listed.split(), listed
            assert served.token not in read and "envhub" not in read, read
            result = client.step({"text": format_tool_call("submit", {})})
        else:
            result = client.step({"text": format_tool_call("answer", {"answer": "no answer"})})
        assert result.done and result.reward == 0.0, result.observation
        assert "env_error" not in str(result.observation) and "verifier_error" not in str(result.observation)
        for task in later:  # the same server, the pooled sandboxes: every later episode starts clean
            client.reset(task_id=task.task_id)
            for action in local.gold_actions(task):
                result = client.step(action.model_dump(mode="json", exclude_none=True))
            assert result.done and result.reward == 1.0, result.observation
