"""Containers (and networks) that dead envhub processes left behind, removed when the next one starts.

A ``kill -9`` runs no cleanup. A container that was running goes by itself (its executor reads
EOF, docker's ``auto_remove`` deletes it), but one whose owner died between ``create`` and
``start`` stays in state *Created* for good: nothing will ever start, and so remove, it.
:mod:`.cleanup` runs :func:`sweep_dead_owners` once per process, before its first docker
sandbox exists, so such leftovers last only until the next envhub run on the machine.

The sweep runs while other envhub processes work on the same engine (CI runs tests beside
other runs), so it removes a container only when all of these hold:

- it carries our labels (``envhub.owned=1``) and names this host: another machine's client on
  a shared engine cannot be checked from here, so its containers are left to ``envhub sandbox
  prune``;
- it was never started or has stopped (*created*, *exited*, *dead*): a running sandbox either has
  a live owner holding its attach stream or is about to remove itself. A served container
  (``envhub serve --docker``, labelled ``envhub.backend=serve``) is the exception: its server runs
  on without its owner, so it is removed running too (as are a Harbor task's containers and its egress
  proxy, labelled the same way: their ``sleep infinity`` never ends by itself);
- its owner pid is not this process and is gone: no such process, or the process that holds the
  pid now started after the container was created (the pid was reused).

Networks with our labels (a Harbor allowlist's internal network) whose owner is gone are removed
after the containers, unless something still uses them.

The process and landlock backends leave scratch directories (the agent's files) in the temp dir.
Each one's name is its owner record, ``envhub-<kind>-<pid>-<start>-<host>-<random>`` (the owner's
pid, its start in clock ticks since boot, a tag of this host's name): a landlock agent may write
inside the directory but cannot rename it (a process backend's agent is not confined at all).
:func:`sweep_scratch` removes those of one kind whose owner is gone -- no such process, a zombie,
or another process now holds the pid -- and only real directories of this user, never through a
symlink (:func:`remove_tree`).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import math
import os
import re
import socket
import stat
import tempfile
from typing import Any

from envhub.sandboxes import fsops
from envhub.sandboxes.dockerapi import LABEL_BACKEND, LABEL_HOST, LABEL_OWNED, LABEL_PID, SERVE_BACKEND

log = logging.getLogger(__name__)

#: Container states that no live owner leaves a container in for more than a moment.
STOPPED_STATES = ("created", "exited", "dead")
#: Slack between the engine's creation time (whole seconds) and a process's start time.
CLOCK_SLACK_S = 2.0
#: A scratch directory's name prefix per backend (``process`` keeps its older ``proc``).
SCRATCH_KINDS = {"process": "proc", "landlock": "landlock"}
_SCRATCH_NAME = re.compile(r"^envhub-(?P<kind>[a-z]+)-(?P<pid>\d+)-(?P<start>\d+)-(?P<host>[0-9a-f]{8})-")


def _state_and_start(pid: int) -> tuple[bytes, int] | None:
    """``pid``'s state letter and start (clock ticks since boot), or None when unreadable."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            # comm (field 2) may hold spaces and parentheses: fields after it follow the last ')'
            fields = fh.read().rsplit(b")", 1)[1].split()
        return fields[0], int(fields[19])
    except (OSError, IndexError, ValueError):
        return None


def _process_start_time(pid: int) -> float | None:
    """When ``pid`` started (seconds since the epoch), or None when that cannot be read."""
    found = _state_and_start(pid)
    try:
        with open("/proc/stat", "rb") as fh:
            btime = next(int(line.split()[1]) for line in fh if line.startswith(b"btime "))
    except (OSError, IndexError, ValueError, StopIteration):
        return None
    return None if found is None else btime + found[1] / os.sysconf("SC_CLK_TCK")


def owner_gone(labels: dict[str, str], created: float) -> bool:
    """True only when the envhub process that created a container (``created``: epoch seconds)
    on this host is certainly gone; any doubt keeps the container."""
    if labels.get(LABEL_OWNED) != "1" or labels.get(LABEL_HOST) != socket.gethostname():
        return False
    try:
        pid = int(labels.get(LABEL_PID, ""))
    except ValueError:
        return False
    if pid <= 0 or pid == os.getpid():
        return False
    if _no_such_process(pid):
        return True
    started = _process_start_time(pid)  # someone's process holds the pid: whose, its start time says
    return started is not None and started > created + CLOCK_SLACK_S


def _no_such_process(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        pass
    return False


def sweep_dead_owners(client: Any | None = None) -> int:
    """Remove the stopped containers of dead envhub owners on this host (see the module
    docstring); returns how many this call removed."""
    from envhub.sandboxes.docker_backend import _force_remove
    from envhub.sandboxes.dockerapi import docker_client

    client = client or docker_client()
    rows = client.api.containers(all=True, filters={"label": f"{LABEL_OWNED}=1", "status": list(STOPPED_STATES)})
    rows += client.api.containers(filters={"label": [f"{LABEL_OWNED}=1", f"{LABEL_BACKEND}={SERVE_BACKEND}"],
                                           "status": "running"})  # a server runs on without its owner
    gone = [row["Id"] for row in rows
            if owner_gone(dict(row.get("Labels") or {}), float(row.get("Created") or math.inf))]
    removed = sum(_force_remove(client.api, cid) for cid in gone)
    if removed:
        log.info("removed %d container(s) left behind by envhub processes that are gone", removed)
    networks = 0
    for net in client.api.networks(filters={"label": f"{LABEL_OWNED}=1"}):
        if owner_gone(dict(net.get("Labels") or {}), _epoch(str(net.get("Created") or ""))):
            with contextlib.suppress(Exception):  # still in use by a live container: kept
                client.api.remove_network(net["Id"])
                networks += 1
    if networks:
        log.info("removed %d network(s) left behind by envhub processes that are gone", networks)
    return removed + networks


def _epoch(created: str) -> float:
    """A docker ``Created`` timestamp (RFC 3339, nanoseconds) as epoch seconds; inf when unreadable
    (owner_gone then keeps the object unless its pid is free)."""
    import datetime

    stamp = re.sub(r"(\.\d{6})\d*", r"\1", created).replace("Z", "+00:00")
    try:
        return datetime.datetime.fromisoformat(stamp).timestamp()
    except ValueError:
        return math.inf


def _host_tag() -> str:
    return hashlib.sha256(socket.gethostname().encode()).hexdigest()[:8]


def make_scratch(backend: str) -> str:
    """A new scratch directory of ``backend`` in the temp dir, named after its owner (this process)."""
    found = _state_and_start(os.getpid())
    start = 0 if found is None else found[1]
    return tempfile.mkdtemp(prefix=f"envhub-{SCRATCH_KINDS[backend]}-{os.getpid()}-{start}-{_host_tag()}-")


def _record_owner_gone(pid: int, start: int) -> bool:
    """True only when the process a scratch name records is certainly gone; any doubt keeps it."""
    if pid <= 0:
        return False
    if _no_such_process(pid):
        return True
    found = _state_and_start(pid)  # someone's process holds the pid: whose, its start says
    return found is not None and (found[0] == b"Z" or (start != 0 and found[1] != start))  # 0: unknown


def remove_tree(dir_fd: int, name: str) -> bool:
    """Remove the directory ``name`` (in ``dir_fd``) with all it holds, following no symlink:
    ``name`` must be a directory itself, and the links inside go as links. True when it is gone."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=dir_fd)
    except OSError:
        return False
    try:
        fsops.wipe(fd)
    finally:
        os.close(fd)
    try:
        os.rmdir(name, dir_fd=dir_fd)
    except OSError:
        return False
    return True


def sweep_scratch(backend: str, root: str | None = None) -> int:
    """Remove ``backend``'s scratch directories in ``root`` (the temp dir) whose owner is gone (see
    the module docstring); returns how many this call removed."""
    try:
        root_fd = os.open(root or tempfile.gettempdir(), os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return 0
    removed = 0
    try:
        for name in os.listdir(root_fd):
            match = _SCRATCH_NAME.match(name)
            if match is None or match["kind"] != SCRATCH_KINDS[backend] or match["host"] != _host_tag():
                continue
            try:
                info = os.stat(name, dir_fd=root_fd, follow_symlinks=False)
            except OSError:
                continue
            if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid():
                continue
            if _record_owner_gone(int(match["pid"]), int(match["start"])) and remove_tree(root_fd, name):
                removed += 1
    finally:
        os.close(root_fd)
    if removed:
        log.info("removed %d %s scratch dir(s) left behind by envhub processes that are gone", removed, backend)
    return removed
