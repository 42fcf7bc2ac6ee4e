"""The probe runner's process tree: which processes descend from it, what a batch of them has
spent, and killing only those.

Standard library only; shipped beside the runner as ``envhub_probe_reaper.py``. Read from
``/proc/<pid>/stat`` ppid chains; every kill goes through a pidfd after the chain is checked again.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time


def pidfd(pid: int) -> int | None:
    with contextlib.suppress(AttributeError, OSError):
        return os.pidfd_open(pid)
    return None


def _ppid(pid: int) -> tuple[int, bool]:
    """(parent pid, is a zombie) from /proc/<pid>/stat; (0, True) once it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()
        return int(fields[1]), fields[0] == b"Z"
    except (OSError, IndexError, ValueError):
        return 0, True


def descendants(root: int) -> list[int]:
    """Live (non-zombie) processes whose ppid chain leads to ``root``, from /proc; none where it is
    closed (landlock: the group kill, then the sandbox's ``contain``, catch what is left)."""
    children: dict[int, list[int]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for pid in (int(e) for e in entries if e.isdigit()):
        parent, zombie = _ppid(pid)
        if not zombie:
            children.setdefault(parent, []).append(pid)
    out, todo = [], list(children.get(root, []))
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, []))
    return out


def descends_from(pid: int, root: int) -> bool:
    for _ in range(4096):
        pid = _ppid(pid)[0]
        if pid <= 0 or pid == root:
            return pid == root
    return False


def kill_descendant(pid: int, root: int) -> None:
    """SIGKILL ``pid`` if it still descends from ``root``: checked on a pidfd, so no pid reuse can
    redirect the signal to an unrelated process (without pidfds a tiny race remains)."""
    handle = pidfd(pid)
    try:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            if descends_from(pid, root):
                signal.pidfd_send_signal(handle, signal.SIGKILL) if handle is not None else os.kill(pid, signal.SIGKILL)
    finally:
        if handle is not None:
            os.close(handle)


def _own_usage(pid: int, tick: int) -> tuple[float, float] | None:
    """(CPU seconds of ``pid`` and the children it reaped, seconds it waited for a CPU), or None
    where /proc does not show them (landlock keeps /proc closed to commands)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()
        with open(f"/proc/{pid}/schedstat", "rb") as fh:
            waited_ns = int(fh.read().split()[1])
        return sum(int(f) for f in fields[11:15]) / tick, waited_ns / 1e9
    except (OSError, IndexError, ValueError):
        return None


def _cpu(pid: int, tick: int) -> float:
    usage = _own_usage(pid, tick)
    return 0.0 if usage is None else usage[0]


class BatchClock:
    """How much of its ``limit`` a batch has spent, whatever else the machine runs: the seconds it
    ran or could have run (wall time less the time its process waited for a CPU others held) or the
    CPU seconds it and its descendants used, whichever is more. So a batch that spins, sleeps or
    stops itself spends its limit as on a quiet machine, and one that only waits for a busy machine
    spends nothing. The wall clock is only a ceiling (``wall_factor`` times the limit); where /proc
    shows nothing, the wall clock is all there is."""

    SCAN_S = 0.1  # how often the other descendants' CPU is summed (a /proc walk)

    def __init__(self, pid: int, root: int, limit: float, wall_factor: float, wall_end: float) -> None:
        self.pid, self.root, self.limit = pid, root, limit
        self.t0 = time.monotonic()
        self.ceiling = min(self.t0 + wall_factor * limit, wall_end)
        self.tick = os.sysconf("SC_CLK_TCK")
        self.others, self.next_scan = 0.0, self.t0 + self.SCAN_S  # a short batch never needs the walk
        self.next_read, self.last = self.t0, 0.0

    def spent(self) -> float:
        now = time.monotonic()
        usage = _own_usage(self.pid, self.tick)
        if usage is None:
            return now - self.t0
        if now >= self.next_scan:
            self.others = sum(_cpu(p, self.tick) for p in descendants(self.root) if p != self.pid)
            self.next_scan = now + self.SCAN_S
        cpu, waited = usage
        return max(now - self.t0 - waited, cpu + self.others)

    def over(self, every: float = 0.0) -> bool:
        """Past the ceiling, or the limit spent (read at most once per ``every`` seconds)."""
        now = time.monotonic()
        if now >= self.next_read:
            self.last, self.next_read = self.spent(), now + every
        return now >= self.ceiling or self.last >= self.limit
