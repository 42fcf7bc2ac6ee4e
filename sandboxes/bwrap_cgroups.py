"""One cgroup per bwrap sandbox: its total memory and process count, bounded by the kernel.

bwrap itself cannot use cgroups, and rlimits count per process: a sandbox whose command forks
could hold memory times pids in all (2.4 GiB under a 512 MiB limit was measured). Where this
process may create cgroups, each bwrap sandbox gets its own -- bwrap, the resident executor and
everything it starts are in it from before bwrap's first fork -- with

- cgroup v1: ``memory.limit_in_bytes`` = the sandbox's memory limit, ``memory.memsw.limit_in_bytes``
  the same (no swap) where swap accounting exists, ``memory.swappiness`` 0, and ``pids.max``;
- cgroup v2: ``memory.max``, ``memory.swap.max`` 0 and ``pids.max``.

The cgroups are made inside this process's own cgroup (v1, per controller), so whatever bounds
this process bounds its sandboxes too; v2 only allows that where the memory controller is
delegated there, or to this cgroup's parent (then they are made beside it). An OOM inside is
the kernel killing the sandbox's largest process (the executor makes every command the OOM
killer's first choice); :meth:`SandboxCgroup.oom_kills` counts them for the exec results.

Where no writable cgroup exists, :func:`cgroup_plan` says why, and the sandbox falls back to
per-process limits (which ``envhub sandbox doctor`` and the auto backend choice report).

Names are ``envhub-sb-<owner pid>-<token>``. A sandbox removes its cgroup when it closes; a
``kill -9`` cannot, so the first sandbox of each process removes those of owners that are gone
(:func:`sweep_dead_owners`, the same owner rules as docker's leftovers).
"""

from __future__ import annotations

import contextlib
import errno
import functools
import logging
import os
import re
import signal
import socket
import threading
import time
import uuid
from dataclasses import dataclass, field

from envhub.sandboxes.dockerapi import LABEL_HOST, LABEL_OWNED, LABEL_PID
from envhub.sandboxes.leftovers import owner_gone
from envhub.sandboxes.procs import stat_value

log = logging.getLogger(__name__)

PREFIX = "envhub-sb-"
_NAME = re.compile(rf"^{PREFIX}(\d+)-[0-9a-z]+$")
#: Processes of the sandbox beyond ``Limits.pids``: bwrap's monitor and the executor.
PIDS_SLACK = 2
#: How long a close waits for the sandbox's processes to be gone before it leaves the cgroup
#: to the next process's sweep.
REMOVE_TIMEOUT_S = 3.0
MOUNTINFO = "/proc/self/mountinfo"
SELF_CGROUP = "/proc/self/cgroup"

_sweep_lock = threading.Lock()
_swept = False


@dataclass(frozen=True)
class CgroupPlan:
    """Where sandbox cgroups go here: ``version`` 1 or 2 and the parent directory of each
    hierarchy used (v1: ``memory`` and, if mounted, ``pids``; v2: ``unified``), or version 0
    and ``reason`` when this process cannot make them."""

    version: int
    parents: dict[str, str] = field(default_factory=dict)
    reason: str = ""

    @property
    def ok(self) -> bool:
        return self.version in (1, 2)

    def describe(self) -> str:
        """One line for the doctor: the bound, or why there is none."""
        if not self.ok:
            return (f"total memory NOT bounded per sandbox ({self.reason}): it is capped per process, so a "
                    "command that forks can hold up to memory x pids")
        if self.version == 1:
            knobs = "memory.limit_in_bytes + memsw" + (", pids.max" if "pids" in self.parents else "")
        else:
            knobs = "memory.max, swap.max 0, pids.max"
        return f"total memory bounded per sandbox by its own cgroup (v{self.version}: {knobs})"


def _mounts() -> list[tuple[str, str, str, list[str]]]:
    """(root, mount point, fs type, super options) of every cgroup mount this process sees."""
    found = []
    with open(MOUNTINFO) as fh:
        for line in fh:
            head, _, tail = line.partition(" - ")
            fields, rest = head.split(), tail.split()
            if len(fields) >= 5 and len(rest) >= 3 and rest[0] in ("cgroup", "cgroup2"):
                found.append((fields[3], fields[4], rest[0], rest[2].split(",")))
    return found


def _own_paths() -> dict[str, str]:
    """This process's cgroup per v1 controller, and under ``""`` its v2 cgroup."""
    paths = {}
    with open(SELF_CGROUP) as fh:
        for line in fh:
            parts = line.rstrip("\n").split(":", 2)
            if len(parts) == 3:
                for name in parts[1].split(",") if parts[1] else [""]:
                    paths[name] = parts[2]
    return paths


def _inside(mount_root: str, mount_point: str, path: str) -> str | None:
    """``path`` (a cgroup path) as a directory under ``mount_point``, None when not mounted there."""
    rel = os.path.relpath(path, mount_root)
    if rel == os.pardir or rel.startswith(os.pardir + os.sep):
        return None
    return os.path.normpath(os.path.join(mount_point, rel))


def _controllers(directory: str, name: str) -> list[str]:
    try:
        with open(os.path.join(directory, name)) as fh:
            return fh.read().split()
    except OSError:
        return []


def _v2_parent(mount_point: str, own: str) -> str | None:
    """A v2 cgroup whose children get the memory controller: this one if it delegates it, else
    its parent (inside the mount) when that one does -- then ours is one of its children."""
    if "memory" in _controllers(own, "cgroup.subtree_control"):
        return own
    parent = os.path.dirname(own)
    if own != mount_point and "memory" in _controllers(own, "cgroup.controllers") and \
            os.path.commonpath([parent, mount_point]) == mount_point:
        return parent
    return None


def _find_parents() -> tuple[int, dict[str, str], str]:
    mounts, own = _mounts(), _own_paths()
    v1 = {}
    for root, point, fstype, options in mounts:
        for controller in ("memory", "pids"):
            if fstype == "cgroup" and controller in options and controller in own:
                directory = _inside(root, point, own[controller])
                if directory is not None:
                    v1[controller] = directory
    if "memory" in v1:
        return 1, v1, ""
    for root, point, fstype, _ in mounts:
        if fstype == "cgroup2" and "" in own:
            directory = _inside(root, point, own[""])
            parent = _v2_parent(point, directory) if directory else None
            if parent is not None:
                return 2, {"unified": parent}, ""
            return 0, {}, "cgroup v2 without the memory controller delegated to this process's cgroup"
    return 0, {}, "no cgroup memory controller is mounted"


@functools.cache
def cgroup_plan() -> CgroupPlan:
    """Where this process can make sandbox cgroups (probed once: a test cgroup is made and removed)."""
    try:
        version, parents, reason = _find_parents()
    except OSError as exc:
        return CgroupPlan(0, reason=f"cannot read this process's cgroups: {exc}")
    if not version:
        return CgroupPlan(0, reason=reason)
    probe = f"{PREFIX}{os.getpid()}-probe{uuid.uuid4().hex[:8]}"
    for role, parent in parents.items():
        path = os.path.join(parent, probe)
        try:
            os.mkdir(path)
            os.rmdir(path)
        except OSError as exc:
            if role == "pids":  # optional: RLIMIT_NPROC still bounds the processes
                parents = {k: v for k, v in parents.items() if k != "pids"}
                continue
            return CgroupPlan(0, reason=f"cannot create a cgroup in {parent}: {exc.strerror or exc}")
    return CgroupPlan(version, parents)


def _write(path: str, value: str) -> None:
    with open(path, "w") as fh:
        fh.write(value)


def _members(path: str) -> set[int]:
    try:
        with open(os.path.join(path, "cgroup.procs")) as fh:
            return {int(line) for line in fh if line.strip()}
    except (OSError, ValueError):
        return set()


def _kill_members(path: str) -> None:
    """SIGKILL every process in the cgroup at ``path``. Through pidfds taken before the members
    are read again, so a pid reused by a process outside it is never signalled."""
    fds = {}
    for pid in _members(path):
        with contextlib.suppress(OSError):
            fds[pid] = os.pidfd_open(pid)
    still = _members(path)
    for pid, fd in fds.items():
        with contextlib.suppress(OSError):
            if pid in still:
                signal.pidfd_send_signal(fd, signal.SIGKILL)
        os.close(fd)


def remove_cgroup(path: str, timeout: float = REMOVE_TIMEOUT_S) -> bool:
    """Kill what is left in the cgroup at ``path`` and remove it; True when it is gone."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            os.rmdir(path)
            return True
        except FileNotFoundError:
            return True
        except OSError as exc:
            if exc.errno != errno.EBUSY or time.monotonic() > deadline:
                log.warning("could not remove the sandbox cgroup %s: %s", path, exc)
                return False
        _kill_members(path)
        time.sleep(0.005)


class SandboxCgroup:
    """The cgroup(s) of one sandbox, made with its limits. OSError when they cannot be made."""

    def __init__(self, plan: CgroupPlan, memory_bytes: int, pids: int, token: str) -> None:
        self.version = plan.version
        name = f"{PREFIX}{os.getpid()}-{token[:16]}"
        self.paths = {role: os.path.join(parent, name) for role, parent in plan.parents.items()}
        made = []
        try:
            for path in self.paths.values():
                os.mkdir(path)
                made.append(path)
            self._set_limits(memory_bytes, pids)
        except OSError:
            for path in made:
                remove_cgroup(path)
            raise

    @property
    def _memory(self) -> str:
        return self.paths["memory" if self.version == 1 else "unified"]

    def _set_limits(self, memory_bytes: int, pids: int) -> None:
        memory, procs = self._memory, self.paths.get("pids" if self.version == 1 else "unified")
        if self.version == 1:
            _write(os.path.join(memory, "memory.limit_in_bytes"), str(memory_bytes))
            for knob, value in (("memory.memsw.limit_in_bytes", str(memory_bytes)), ("memory.swappiness", "0")):
                with contextlib.suppress(FileNotFoundError):  # no swap accounting in this kernel
                    _write(os.path.join(memory, knob), value)
        else:
            _write(os.path.join(memory, "memory.max"), str(memory_bytes))
            with contextlib.suppress(FileNotFoundError):
                _write(os.path.join(memory, "memory.swap.max"), "0")
        if procs is not None:
            with contextlib.suppress(FileNotFoundError):  # v2 without the pids controller
                _write(os.path.join(procs, "pids.max"), str(pids + PIDS_SLACK))

    def place(self, pid: int) -> None:
        """Move process ``pid`` (before it forks anything) into the sandbox's cgroup(s)."""
        for path in self.paths.values():
            _write(os.path.join(path, "cgroup.procs"), str(pid))

    def oom_kills(self) -> int:
        """How many processes the kernel has killed for the sandbox's memory limit so far."""
        name = "memory.oom_control" if self.version == 1 else "memory.events"
        return stat_value([os.path.join(self._memory, name)], "oom_kill")

    def shmem_bytes(self) -> int:
        """Memory of the sandbox that no process holds alone: tmpfs files, SysV segments, memfds."""
        return stat_value([os.path.join(self._memory, "memory.stat")], "shmem")

    def peak_bytes(self) -> int | None:
        """The most memory the sandbox has held at once (None where the kernel does not say)."""
        name = "memory.max_usage_in_bytes" if self.version == 1 else "memory.peak"
        try:
            with open(os.path.join(self._memory, name)) as fh:
                return int(fh.read())
        except (OSError, ValueError):
            return None

    def members(self) -> set[int]:
        """Host pids of the processes in the sandbox's cgroup(s)."""
        return set().union(*(_members(path) for path in self.paths.values()))

    def kill_all(self, timeout: float = REMOVE_TIMEOUT_S) -> bool:
        """SIGKILL every process of the sandbox until none is left; True when none is."""
        deadline = time.monotonic() + timeout
        while self.members():
            if time.monotonic() > deadline:
                return False
            for path in self.paths.values():
                _kill_members(path)
            time.sleep(0.005)
        return True

    def remove(self) -> bool:
        """Kill what is left inside and remove the cgroup(s); True when all are gone."""
        return all([remove_cgroup(path) for path in self.paths.values()])


def sweep_dead_owners(plan: CgroupPlan | None = None) -> int:
    """Remove the sandbox cgroups of envhub processes that are gone; returns how many."""
    plan = plan or cgroup_plan()
    host, removed = socket.gethostname(), 0
    for parent in plan.parents.values():
        try:
            names = os.listdir(parent)
        except OSError:
            continue
        for name in names:
            match = _NAME.match(name)
            path = os.path.join(parent, name)
            if match is None:
                continue
            try:
                created = os.stat(path).st_mtime
            except OSError:
                continue
            labels = {LABEL_OWNED: "1", LABEL_HOST: host, LABEL_PID: match.group(1)}
            if owner_gone(labels, created) and remove_cgroup(path):
                removed += 1
    if removed:
        log.info("removed %d bwrap sandbox cgroup(s) left behind by envhub processes that are gone", removed)
    return removed


def sandbox_cgroup(memory_bytes: int, pids: int, token: str) -> SandboxCgroup | None:
    """A new cgroup for one sandbox, or None where this process cannot make one (see
    :func:`cgroup_plan`). The first call of a process sweeps dead owners' leftovers first."""
    global _swept
    plan = cgroup_plan()
    if not plan.ok:
        return None
    with _sweep_lock:
        if not _swept:
            _swept = True
            try:
                sweep_dead_owners(plan)
            except OSError as exc:
                log.warning("sweeping bwrap cgroups of dead envhub processes failed: %r", exc)
    return SandboxCgroup(plan, memory_bytes, pids, token)
