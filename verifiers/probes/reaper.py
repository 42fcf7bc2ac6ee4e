"""The probe runner's process tree: which processes descend from it, and killing only those.

Standard library only; shipped beside the runner as ``envhub_probe_reaper.py``. Read from
``/proc/<pid>/stat`` ppid chains; every kill goes through a pidfd after the chain is checked again.
"""

from __future__ import annotations

import contextlib
import os
import signal


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
