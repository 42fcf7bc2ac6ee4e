"""Docker-specific: hardening as the engine sees it, offline images, cleanup on signals, prune."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sandbox_fixtures import assert_no_leaked_containers, leaked_containers, require_backend
from typer.testing import CliRunner

from envhub.sandboxes import (
    SandboxPool,
    SandboxSpec,
    base_image_tag,
    build_base_image,
    build_family_image,
    create_sandbox,
    prune,
)
from envhub.sandboxes.base import Limits
from envhub.sandboxes.cli import app
from envhub.sandboxes.docker_backend import DockerSandbox, owned_containers
from envhub.sandboxes.dockerapi import LABEL_INPUTS, LABEL_OWNED, LABEL_PID, docker_client
from envhub.sandboxes.seccomp_policy import docker_security_opt

pytestmark = pytest.mark.docker
LIMITS = Limits(cpus=0.5, memory_mb=300, pids=50, disk_mb=16)


@pytest.fixture(scope="module", autouse=True)
def docker_ready() -> Iterator[None]:
    require_backend("docker")
    yield
    assert_no_leaked_containers()


@pytest.fixture(scope="module")
def sandbox() -> Iterator[DockerSandbox]:
    with DockerSandbox(SandboxSpec(limits=LIMITS)).start() as sb:
        yield sb


def _wait_gone(container_id: str, seconds: float = 20.0) -> bool:
    client = docker_client()
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if not client.api.containers(all=True, filters={"id": container_id}):
            return True
        time.sleep(0.2)
    return False


def test_container_is_hardened(sandbox: DockerSandbox) -> None:
    info = docker_client().api.inspect_container(sandbox.container_id)
    host, config = info["HostConfig"], info["Config"]
    assert host["NetworkMode"] == "none"
    assert host["CapDrop"] == ["ALL"] and not host.get("CapAdd")
    assert "no-new-privileges" in host["SecurityOpt"]
    assert docker_security_opt() in host["SecurityOpt"]  # envhub's seccomp profile, not the engine's default
    assert host["PidsLimit"] == LIMITS.pids
    assert host["Memory"] == host["MemorySwap"] == LIMITS.memory_mb * 1024 * 1024
    assert host["NanoCpus"] == int(LIMITS.cpus * 1e9)
    assert host["ReadonlyRootfs"] is True
    assert f"size={LIMITS.disk_mb}m" in host["Tmpfs"]["/work"] and "/tmp" in host["Tmpfs"]
    assert host["AutoRemove"] is True and not host.get("Privileged")
    assert config["User"] == "1000:1000"
    assert config["StdinOnce"] is True and config["OpenStdin"] is True
    labels = config["Labels"]
    assert labels[LABEL_OWNED] == "1" and labels[LABEL_PID] == str(os.getpid())
    assert labels["envhub.image"] == base_image_tag() and labels["envhub.inputs"]


def test_inside_view_matches(sandbox: DockerSandbox) -> None:
    status = sandbox.exec("id -u; grep -E '^(CapEff|NoNewPrivs|Seccomp):' /proc/self/status").stdout.split()
    assert status[0] == "1000"
    assert status[status.index("CapEff:") + 1] == "0000000000000000"
    assert status[status.index("NoNewPrivs:") + 1] == "1"
    assert status[status.index("Seccomp:") + 1] == "2"
    assert sandbox.exec("cat /sys/fs/cgroup/pids/pids.max 2>/dev/null || cat /sys/fs/cgroup/pids.max").stdout.strip() \
        == str(LIMITS.pids)


def test_base_image_is_cached(monkeypatch: pytest.MonkeyPatch) -> None:
    from envhub.sandboxes import images

    before = docker_client().images.get(base_image_tag()).id
    monkeypatch.setattr(images, "_debootstrap", lambda *a: pytest.fail("rebuilt an up-to-date image"))
    messages: list[str] = []
    assert build_base_image(log_fn=messages.append) == base_image_tag()
    assert "up to date" in messages[0]
    assert docker_client().images.get(base_image_tag()).id == before
    labels = docker_client().images.get(base_image_tag()).labels
    assert labels[LABEL_INPUTS] == images.inputs_hash(images.base_inputs(images.find_mirror()))


def test_family_image_layers_on_the_base(tmp_path: Path) -> None:
    (tmp_path / "hello.txt").write_text("family tools\n")
    (tmp_path / "Dockerfile").write_text(textwrap.dedent("""\
        ARG ENVHUB_BASE
        FROM ${ENVHUB_BASE}
        COPY hello.txt /opt/hello.txt
    """))
    client = docker_client()
    tag = build_family_image("test-family", tmp_path)
    try:
        assert tag.startswith("envhub/test-family:")
        first = client.images.get(tag).id
        assert build_family_image("test-family", tmp_path) == tag  # cached
        assert client.images.get(tag).id == first
        with create_sandbox("docker", SandboxSpec(image=tag)) as sb:
            assert sb.exec("cat /opt/hello.txt; id -u").stdout == "family tools\n1000\n"
    finally:
        client.images.remove(tag, force=True)


@pytest.mark.slow
def test_build_from_a_public_style_base() -> None:
    """The --from path, fed with a local image since no registry is reachable here."""
    tag = "envhub/test-from:1"
    client = docker_client()
    try:
        assert build_base_image(from_image=base_image_tag(), tag=tag) == tag
        with create_sandbox("docker", SandboxSpec(image=tag)) as sb:
            assert sb.exec("id -u && python3 -c 'import pytest'").stdout == "1000\n"
    finally:
        client.images.remove(tag, force=True)


def test_missing_image_is_a_sandbox_error() -> None:
    from envhub.sandboxes import SandboxError

    with pytest.raises(SandboxError, match="does not exist here"):
        create_sandbox("docker", SandboxSpec(image="envhub/no-such-image:0"))


def test_pool_replaces_a_container_whose_pid1_was_killed() -> None:
    from envhub.sandboxes import SandboxError

    with SandboxPool("docker", SandboxSpec(limits=LIMITS), size=2) as pool:
        lease = pool.acquire()
        docker_client().api.kill(lease.container_id)  # PID 1 (the executor) dies from outside
        with pytest.raises(SandboxError):
            lease.exec("true")
        lease.release()
        pool.wait_refills()
        assert pool.stats.replaced == 1
        leases = [pool.acquire(), pool.acquire()]
        assert [x.exec("echo ok").stdout for x in leases] == ["ok\n", "ok\n"]
        for x in leases:
            x.release()


CHILD = textwrap.dedent("""\
    import sys, time
    from envhub.sandboxes import create_sandbox
    sb = create_sandbox("docker")  # never closed by this script
    print(sb.container_id, flush=True)
    mode = sys.argv[1]
    if mode == "exit":
        sys.exit(0)
    if mode == "raise":
        raise RuntimeError("boom")
    time.sleep(120)
""")


def _spawn_child(mode: str = "wait") -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen([sys.executable, "-c", CHILD, mode], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    assert proc.stdout is not None
    container_id = proc.stdout.readline().strip()
    assert container_id, "the child did not start a sandbox"
    return proc, container_id


@pytest.mark.slow
@pytest.mark.parametrize("how", ["exit", "raise", "SIGTERM", "SIGINT"])
def test_every_way_out_cleans_up_containers(how: str) -> None:
    proc, container_id = _spawn_child("wait" if how.startswith("SIG") else how)
    if how.startswith("SIG"):
        proc.send_signal(getattr(signal, how))
    proc.wait(timeout=60)
    assert (proc.returncode == 0) == (how == "exit")  # the previous handler / exit status still ran
    # Synchronously removed before exit: not left for auto_remove to do later.
    assert not docker_client().api.containers(all=True, filters={"id": container_id})


def test_kill_9_leaves_nothing_behind() -> None:
    proc, container_id = _spawn_child()
    proc.kill()
    proc.wait(timeout=30)
    # stdin_once + auto_remove: the attach stream closed, the executor exits, docker removes it.
    assert _wait_gone(container_id, 30)


def test_prune_removes_only_orphans(monkeypatch: pytest.MonkeyPatch) -> None:
    from envhub.sandboxes import docker_backend

    client = docker_client()
    dead = subprocess.Popen(["true"])
    dead.wait()
    labels = {LABEL_OWNED: "1", "envhub.host": os.uname().nodename}
    orphan = client.containers.run(base_image_tag(), ["sleep", "300"], detach=True, network_mode="none",
                                   labels={**labels, LABEL_PID: str(dead.pid)})
    alive_owner = client.containers.run(base_image_tag(), ["sleep", "300"], detach=True, network_mode="none",
                                        labels={**labels, LABEL_PID: "1"})  # pid 1 is always alive
    ours = {orphan.id, alive_owner.id}
    # Other envhub runs may share this engine: let prune see only this test's two containers.
    everything = docker_backend.owned_containers
    monkeypatch.setattr(docker_backend, "owned_containers",
                        lambda client=None: [c for c in everything(client) if c.id in ours])
    try:
        assert prune() == 1
        ids = {c.id for c in everything()}
        assert orphan.id not in ids and alive_owner.id in ids
        assert prune(all_owners=True) == 1
        assert alive_owner.id not in {c.id for c in everything()}
    finally:
        for container in (orphan, alive_owner):
            with contextlib.suppress(Exception):
                container.remove(force=True)


@pytest.mark.slow
def test_cli_build_doctor_prune() -> None:
    runner = CliRunner()
    built = runner.invoke(app, ["build"])
    assert built.exit_code == 0 and "up to date" in built.output, built.output
    doc = runner.invoke(app, ["doctor", "--require", "docker"])
    assert doc.exit_code == 0, doc.output
    assert "docker" in doc.output and "auto selects" in doc.output
    pruned = runner.invoke(app, ["prune"])
    assert pruned.exit_code == 0 and "removed" in pruned.output


def test_zz_no_envhub_container_left_behind(sandbox: DockerSandbox) -> None:
    """Runs last in this module: everything the sandbox tests started and closed is gone."""
    assert leaked_containers() == []
    sandbox.close()
    assert leaked_containers() == []
    assert sandbox.container_id not in {c.id for c in owned_containers()}
