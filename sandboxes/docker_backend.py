"""The Docker backend: a hardened container whose PID 1 is the resident executor.

Hardening (see :func:`container_config`): no network, every capability dropped,
no-new-privileges, envhub's seccomp profile (:func:`.seccomp_policy.docker_profile`, the list
bwrap's filter is compiled from) instead of the engine's default, which differs by engine
version, a pids limit, a memory limit with swap equal to it (no swap), CPU quota, read-only root
with size-limited tmpfs for ``/work``, ``/tmp`` and ``/dev/shm``, uid 1000.

We talk to the executor over the container's attach stream (no ``docker exec`` per call). The
container is created with ``stdin_once`` and ``auto_remove``: when our attach connection closes
-- ``close()``, or this process dying even by ``kill -9`` -- the executor reads EOF, exits, and
Docker deletes the container. ``close()`` also force-removes it, so it is gone synchronously.
Every container carries ``envhub.owned=1`` and our pid/host, which :func:`prune` uses to remove
leftovers of dead processes.

Memory: the container's memory cgroup counts everything the agent pins, SysV segments an exited
process left, memfds and tmpfs files included. Every command is the OOM killer's first choice
(``oom_score_adj`` 1000, re-asserted for every process of the sandbox at each command's start),
so while the agent has processes the kernel kills one of those, not the executor. Docker could
start the executor lower (``--oom-score-adj``), but that value is also the floor every process in
the container may lower itself to, so it would not rank the executor below the agent's processes
(and -1000, unkillable, would let the agent make every process unkillable and stall the
executor's own allocations); the executor keeps the default. When the kernel kills the executor
anyway -- no process of the agent's left to kill, or one that lowered its own score -- the
engine's ``oom`` and ``die`` events tell it apart from a container that broke, and the sandbox
starts afresh (:mod:`.oom_restart`): the call answers as killed for memory, never a
``SandboxError``.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from dataclasses import dataclass
from typing import Any

from envhub.sandboxes import cleanup
from envhub.sandboxes.base import SandboxError, SandboxSpec
from envhub.sandboxes.channel import DockerAttachTransport, Transport
from envhub.sandboxes.dockerapi import (
    LABEL_HOST,
    LABEL_IMAGE,
    LABEL_INPUTS,
    LABEL_OWNED,
    LABEL_PID,
    docker_client,
    is_not_found,
    local_image,
    owner_labels,
)
from envhub.sandboxes.images import base_image_tag, ensure_base_image
from envhub.sandboxes.oom_restart import OomRestart
from envhub.sandboxes.resident import BASE_ENV, executor_argv
from envhub.sandboxes.seccomp_policy import docker_security_opt

log = logging.getLogger(__name__)

AGENT_USER = "1000:1000"
#: How long ``close`` waits for a removal Docker already started (auto_remove of a dead container).
REMOVAL_WAIT_S = 15.0
WORKDIR = "/work"
#: A per-sandbox token on its container, so a sweep can tell "being started by a live sandbox"
#: from "left behind" before the sandbox knows its container id.
LABEL_SANDBOX = "envhub.sandbox"
#: How long the cleanup sweep waits for container creations other threads have under way.
SWEEP_WAIT_S = 5.0
#: How long a call that found the executor dead waits for the engine's ``die`` event of its container.
DEATH_WAIT_S = 3.0
#: The exit code of a container whose PID 1 the kernel killed (SIGKILL).
KILLED_EXIT = "137"
_launched = False
#: token -> ident of the thread whose create_container call is in flight (single dict ops only:
#: a sweep must never wait on a lock the interrupted main thread holds).
_creating: dict[str, int] = {}


def container_config(spec: SandboxSpec, image: str, command: list[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(create_container kwargs, create_host_config kwargs) for one sandbox. Pure, for tests."""
    limits = spec.limits
    memory = f"{limits.memory_mb}m"
    disk = limits.disk_mb
    host = {
        "network_mode": "bridge" if limits.network else "none",
        "cap_drop": ["ALL"],
        "security_opt": ["no-new-privileges", docker_security_opt()],
        "pids_limit": limits.pids,
        "mem_limit": memory,
        "memswap_limit": memory,
        "nano_cpus": int(limits.cpus * 1e9),
        "read_only": True,
        "tmpfs": {
            WORKDIR: f"rw,exec,nosuid,nodev,size={disk}m,uid=1000,gid=1000,mode=0755",
            "/tmp": f"rw,exec,nosuid,nodev,size={disk}m,mode=1777",
        },
        "shm_size": f"{limits.shm_mb}m",  # its own tmpfs (ipc_mode private), charged to the memory cgroup
        "auto_remove": True,
        "ipc_mode": "private",
        # Our protocol runs over stdout: keep it out of the json-file log (latency, disk).
        "log_config": {"type": "none", "config": {}},
    }
    create = {
        "image": image,
        "command": command,
        "user": AGENT_USER,
        "stdin_open": True,  # with detach=False docker-py also sets StdinOnce: see the docstring
        "detach": False,
        "tty": False,
        "working_dir": WORKDIR,
        "hostname": "sandbox",
        "network_disabled": not limits.network,
        "environment": {**BASE_ENV, "HOME": "/tmp", "USER": "agent"},
        "labels": {},
    }
    return create, host


class DockerSandbox(OomRestart):
    backend = "docker"
    workdir = WORKDIR
    _destroy_closes_channel_fds = False

    def __init__(self, spec: SandboxSpec | None = None) -> None:
        super().__init__(spec)
        self.container_id: str | None = None
        self.image: str = self.spec.image or base_image_tag()

    def _launch(self) -> Transport:
        global _launched
        _launched = True
        client = docker_client()
        if self.spec.image is None:
            ensure_base_image()
        image = local_image(client, self.image)
        if image is None:
            raise SandboxError(f"image {self.image} does not exist here (no registry to pull from); "
                               f"build it: envhub sandbox build")
        labels = dict(image.labels or {})
        self.image_id = f"docker:{self.image}@{image.id}"
        config = {
            "workdir": WORKDIR,
            "wipe": [WORKDIR, "/tmp", "/dev/shm"],
            "env": {**BASE_ENV, "HOME": "/tmp", "USER": "agent"},
            "kill_all": True,
            "wipe_ipc": True,  # its own IPC namespace: SysV objects, /dev/shm, /dev/mqueue
            "oom": "cgroup",
            "limits": self._rlimits(),
            "token": self.token,
        }
        create, host = container_config(self.spec, self.image, executor_argv("python3", {**config, "preload": list(self.spec.preload)}))
        create["labels"] = {**owner_labels(), "envhub.backend": "docker", LABEL_IMAGE: self.image,
                            LABEL_INPUTS: labels.get(LABEL_INPUTS, ""), LABEL_SANDBOX: self.token}
        api = client.api
        _creating[self.token] = threading.get_ident()
        try:
            container = api.create_container(host_config=api.create_host_config(**host), **create)
        finally:
            _creating.pop(self.token, None)
        self.container_id = container["Id"]
        if self.closed or cleanup.shutting_down():  # a signal's cleanup ran meanwhile
            raise SandboxError("the docker sandbox was closed while its container was being created")
        sock = api.attach_socket(self.container_id, params={"stdin": 1, "stdout": 1, "stream": 1})
        transport = DockerAttachTransport(sock)
        try:
            api.start(self.container_id)
        except Exception:
            transport.close()
            raise
        return transport

    def _executor_host_pid(self) -> int | None:
        """The container's PID 1 -- the executor -- in the engine's PID namespace (ours when the
        engine runs on this host and we are not in a container of our own)."""
        if not self.container_id:
            return None
        try:
            return int(docker_client().api.inspect_container(self.container_id)["State"]["Pid"]) or None
        except Exception:
            return None

    def _describe(self) -> str:
        if not self.container_id:
            return ""
        try:
            info = docker_client().api.inspect_container(self.container_id)
        except Exception as exc:
            if is_not_found(exc):
                return f"container {self.container_id[:12]} no longer exists"
            return f"container {self.container_id[:12]}: cannot inspect ({exc})"
        state = info.get("State", {})
        parts = [f"container {self.container_id[:12]} is {state.get('Status')}"]
        if state.get("Status") != "running":
            parts.append(f"exit code {state.get('ExitCode')}")
        if state.get("OOMKilled"):
            parts.append("OOM-killed")
        if state.get("Error"):
            parts.append(state["Error"])
        return ", ".join(parts)

    def _destroy(self) -> None:
        if not self.container_id:
            return
        api = docker_client().api
        try:
            api.remove_container(self.container_id, force=True)
            return
        except Exception as exc:
            if is_not_found(exc):
                return
            if "already in progress" not in str(exc):
                log.warning("could not remove container %s: %s", self.container_id[:12], exc)
                return
        # auto_remove got there first (the container died): wait for it, so close() means gone.
        deadline = time.monotonic() + REMOVAL_WAIT_S
        while time.monotonic() < deadline:
            if not api.containers(all=True, filters={"id": self.container_id}):
                return
            time.sleep(0.05)
        log.warning("container %s is still being removed after %.0fs", self.container_id[:12], REMOVAL_WAIT_S)

    def _ident(self) -> str:
        return (self.container_id or "")[:12]

    def _memory_mark(self) -> int:
        """Now, on the engine's event clock (nanoseconds; a local engine shares ours)."""
        return time.time_ns()

    def _killed_for_memory(self, since: int) -> bool:
        """The container died of SIGKILL after an OOM kill in it, both after ``since`` (see
        :func:`killed_for_memory`)."""
        return bool(self.container_id) and killed_for_memory(docker_client().api, self.container_id, since)

    def _discard_executor(self) -> None:
        """The container, gone before a new one starts (its removal waited for)."""
        self._destroy()
        self.container_id = None


def killed_for_memory(api: Any, container_id: str, since_ns: int, wait_s: float = DEATH_WAIT_S) -> bool:
    """Whether the engine saw container ``container_id`` die of SIGKILL (exit 137) after an OOM
    kill in its memory cgroup, both after ``since_ns`` (the engine's clock): the kernel killed its
    PID 1 for the container's memory limit. Nothing inside can SIGKILL a container's PID 1; a
    ``docker kill`` from outside is told apart by the OOM event it lacks (one that follows an OOM
    kill of a command in the same call is taken for the agent's).

    Read from the engine's event log (it keeps the recent past), waiting up to ``wait_s`` for the
    ``die`` event; False when the container did not die (a hung executor) or died otherwise.
    """
    deadline = time.monotonic() + wait_s
    start = f"{since_ns // 10**9 - 1}"
    while True:
        now = time.time_ns()
        try:
            events = list(api.events(since=start, until=f"{now // 10**9}.{now % 10**9:09d}", decode=True,
                                     filters={"container": container_id, "event": ["oom", "die"]}))
        except Exception as exc:  # the engine does not answer: it cannot say, so the death stays infra
            log.warning("could not read the events of container %s: %s", container_id[:12], exc)
            return False
        oom, exit_code = False, None
        for event in events:
            if int(event.get("timeNano") or 0) <= since_ns:
                continue
            action = event.get("Action") or event.get("status")
            if action == "oom":
                oom = True
            elif action == "die":
                exit_code = str((event.get("Actor") or {}).get("Attributes", {}).get("exitCode"))
        if exit_code is not None:
            return oom and exit_code == KILLED_EXIT
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)


def sweep_own_containers() -> int:
    """Remove this process's sandbox containers that no open sandbox accounts for; how many.

    Runs after every :func:`cleanup.close_all` (a signal, exit): a container whose creation a
    worker thread had under way while the sandboxes were being closed is removed here, not left
    for ``prune``. Creations in flight on other threads are waited for (bounded) first; one on the
    main thread cannot finish while that thread runs a signal handler, so it is not waited for.
    """
    if not _launched:
        return 0
    main = threading.main_thread().ident
    deadline = time.monotonic() + SWEEP_WAIT_S
    while time.monotonic() < deadline and any(t != main for t in list(_creating.values())):
        time.sleep(0.02)
    # A sandbox started after the close is legitimate -- unless the process is going down.
    keep = set() if cleanup.shutting_down() else \
        {getattr(sb, "token", None) for sb in cleanup.live() if not getattr(sb, "closed", False)}
    client = docker_client()
    rows = client.api.containers(all=True, filters={"label": [f"{LABEL_PID}={os.getpid()}",
                                                              "envhub.backend=docker"]})
    labelled = ((row["Id"], row.get("Labels") or {}) for row in rows)
    return sum(_force_remove(client.api, cid) for cid, labels in labelled
               if labels.get(LABEL_HOST) == socket.gethostname() and labels.get(LABEL_SANDBOX) not in keep)


def _force_remove(api: Any, container_id: str) -> bool:
    """Remove a container, running or not; False when it was gone or already being removed."""
    try:
        api.remove_container(container_id, force=True)
        return True
    except Exception as exc:  # gone meanwhile, or auto_remove is already removing it
        if not is_not_found(exc) and "already in progress" not in str(exc):
            log.warning("could not remove %s: %s", container_id[:12], exc)
        return False


cleanup.add_sweeper(sweep_own_containers)


@dataclass(frozen=True)
class OwnedContainer:
    id: str
    labels: dict[str, str]
    state: str


def owned_containers(client: Any | None = None) -> list[OwnedContainer]:
    """Every container (running or not) labelled ``envhub.owned=1``.

    One list call, no per-container inspect: other envhub processes create and remove
    containers concurrently, and an inspect of one that just went away would fail.
    """
    client = client or docker_client()
    rows = client.api.containers(all=True, filters={"label": f"{LABEL_OWNED}=1"})
    return [OwnedContainer(r["Id"], dict(r.get("Labels") or {}), r.get("State", "")) for r in rows]


def _owner_alive(labels: dict[str, str]) -> bool:
    if labels.get(LABEL_HOST) != socket.gethostname():
        return False  # another machine's engine socket? we cannot tell: treat as leftover
    try:
        pid = int(labels.get(LABEL_PID, "0"))
    except ValueError:
        return False
    if pid <= 0:
        return False
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def prune(all_owners: bool = False) -> int:
    """Remove envhub containers left behind; returns how many.

    By default only those whose owning process is gone (so a concurrent envhub run is left
    alone), plus this process's own sandbox containers that no open sandbox accounts for (not the
    server it runs in ``envhub serve --docker``). ``all_owners=True`` removes every envhub-labelled container.
    """
    client = docker_client()
    # Every container this process creates carries its sandbox's token, from before it has an id.
    open_sandboxes = {getattr(sb, "token", None) for sb in cleanup.live()} - {None}
    removed = 0
    for container in owned_containers(client):
        labels = container.labels
        mine_but_untracked = (labels.get(LABEL_PID) == str(os.getpid()) and labels.get("envhub.backend") == "docker"
                              and labels.get(LABEL_SANDBOX) not in open_sandboxes)  # a sandbox: not a served one
        if all_owners or not _owner_alive(labels) or mine_but_untracked:
            removed += _force_remove(client.api, container.id)
    return removed
