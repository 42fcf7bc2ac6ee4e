"""The sandbox's scratch directories (work dir, home, ``/tmp``), held by descriptor.

Where the executor runs as the uid that owns the directory holding its work dir (the process
backend; the landlock backend of a server that is not root), the agent's command can rename the
work dir and put a symlink in its place. The executor therefore opens each scratch directory once,
at start, without following a link at its last component, and holds it: every file operation and
every command's working directory goes through that descriptor, so a swap redirects nothing. At
reset a directory whose name now means something else (a link, another directory, nothing) gets it
back: whatever took the name is removed without being followed and the directory is made afresh.

Loaded by the executor inside every sandbox (``resident.executor_argv`` injects its source):
**stdlib only, Python >= 3.8, no imports from envhub**.
"""

from __future__ import annotations

import contextlib
import os
import stat
import sys

if __name__ == "envhub_scratch":  # inside a sandbox: loaded by the executor's bootstrap
    fsops = sys.modules["envhub_fsops"]
else:
    from envhub.sandboxes import fsops

_HELD_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_PARENT_FLAGS = getattr(os, "O_PATH", os.O_RDONLY) | os.O_DIRECTORY | os.O_CLOEXEC


def identity(st: os.stat_result) -> tuple[int, int]:
    return st.st_dev, st.st_ino


class HeldDir:
    """A directory opened once, its last component never followed, and used only through ``fd``.

    Its parent is opened by path: that path is the host's (or the image's), made before any agent
    code ran. ``create`` makes the directory first if it is missing.
    """

    def __init__(self, path: str, create: bool = False) -> None:
        parent, self.name = os.path.split(os.path.normpath(path))
        self.path = path
        self.parent = os.open(parent or "/", _PARENT_FLAGS)
        try:
            if create:
                with contextlib.suppress(OSError):  # there already (or not ours to make: then the open says so)
                    os.mkdir(self.name, 0o755, dir_fd=self.parent)
            self.fd = os.open(self.name, _HELD_FLAGS, dir_fd=self.parent)
        except BaseException:
            os.close(self.parent)
            raise

    def identity(self) -> list[int]:
        """``[st_dev, st_ino]`` of the held directory: what the host checks its own view against."""
        return list(identity(os.fstat(self.fd)))

    def in_place(self) -> bool:
        """Whether the name still means the held directory (not a link, not another directory)."""
        try:
            st = os.stat(self.name, dir_fd=self.parent, follow_symlinks=False)
        except OSError:
            return False
        return stat.S_ISDIR(st.st_mode) and identity(st) == identity(os.fstat(self.fd))

    def reset(self) -> None:
        """Empty the held directory; where its name was taken, remove what took it (never
        following it) and hold a fresh directory under the name. A name that cannot be taken
        back (the agent's parent directory refuses) leaves the held directory in use: every
        operation goes through it anyway."""
        fsops.wipe(self.fd)
        if self.in_place():
            return
        try:
            remove_entry(self.parent, self.name)
            os.mkdir(self.name, 0o755, dir_fd=self.parent)
            fresh = os.open(self.name, _HELD_FLAGS, dir_fd=self.parent)
        except OSError:
            return
        os.close(self.fd)
        self.fd = fresh


def remove_entry(dir_fd: int, name: str) -> None:
    """Remove ``name`` in the directory open as ``dir_fd``: a directory emptied first, anything
    else (a symlink included) unlinked, never followed."""
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(st.st_mode):
        os.unlink(name, dir_fd=dir_fd)
        return
    with contextlib.suppress(OSError):
        os.chmod(name, 0o700, dir_fd=dir_fd)  # not a link (just checked), and the agent's processes are gone
    fd = os.open(name, _HELD_FLAGS, dir_fd=dir_fd)
    try:
        fsops.wipe(fd)
    finally:
        os.close(fd)
    os.rmdir(name, dir_fd=dir_fd)


def tidy(dir_fd: int, keep: list, mode: int) -> None:
    """Give the directory open as ``dir_fd`` (the scratch dirs' parent) back its ``mode`` and
    remove every entry not named in ``keep`` (what the agent left beside its work dir where it
    could write there). Best effort: what cannot be done here could not be done by the agent."""
    with contextlib.suppress(OSError):
        os.chmod(f"/proc/self/fd/{dir_fd}", mode)  # fchmod refuses an O_PATH descriptor
    try:
        fd = os.open(".", os.O_RDONLY | os.O_DIRECTORY, dir_fd=dir_fd)
    except OSError:
        return
    try:
        with os.scandir(fd) as it:
            extra = [entry.name for entry in it if entry.name not in keep]
    except OSError:
        return
    finally:
        os.close(fd)
    for name in extra:
        with contextlib.suppress(OSError):
            remove_entry(dir_fd, name)
