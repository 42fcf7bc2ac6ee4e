"""Containers that dead envhub processes left behind, removed when the next one starts.

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
  on without its owner, so it is removed running too;
- its owner pid is not this process and is gone: no such process, or the process that holds the
  pid now started after the container was created (the pid was reused).
"""

from __future__ import annotations

import logging
import math
import os
import socket
from typing import Any

from envhub.sandboxes.dockerapi import LABEL_BACKEND, LABEL_HOST, LABEL_OWNED, LABEL_PID, SERVE_BACKEND

log = logging.getLogger(__name__)

#: Container states that no live owner leaves a container in for more than a moment.
STOPPED_STATES = ("created", "exited", "dead")
#: Slack between the engine's creation time (whole seconds) and a process's start time.
CLOCK_SLACK_S = 2.0


def _process_start_time(pid: int) -> float | None:
    """When ``pid`` started (seconds since the epoch), or None when that cannot be read."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            # comm (field 2) may hold spaces and parentheses: fields after it follow the last ')'
            fields = fh.read().rsplit(b")", 1)[1].split()
        with open("/proc/stat", "rb") as fh:
            btime = next(int(line.split()[1]) for line in fh if line.startswith(b"btime "))
        return btime + int(fields[19]) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError, StopIteration):
        return None


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
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        pass  # someone's process holds the pid: whose, its start time says
    started = _process_start_time(pid)
    return started is not None and started > created + CLOCK_SLACK_S


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
    return removed
