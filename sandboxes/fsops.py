"""File operations that stay safe on a tree the agent controls; for the executor and the host.

The executor loads this module inside every sandbox (``resident.executor_argv`` injects its
source), and the host imports it to read a sandbox's work dir directly. Hence: **stdlib only, Python >= 3.8, no imports from envhub**.

Two rules make every operation here safe whatever the agent left in the tree:

- a path is walked one component at a time relative to an open directory fd with
  ``O_NOFOLLOW``, so a symlink never redirects a read or a write outside the root; FIFOs,
  sockets and devices are never opened for reading (``O_NONBLOCK`` plus an ``fstat`` check);
- nothing recurses on the tree's structure or grows without a bound: walks are iterative,
  hold at most one descriptor per level, and stop at a number of entries, a depth and a number
  of bytes; what a walk leaves out, and why, is part of its result.
"""

from __future__ import annotations

import base64
import contextlib
import errno
import os
import stat

#: Bounds of one walk (:func:`scan`). A real repository is far inside all of them.
MAX_ENTRIES = 100_000
MAX_DEPTH = 128
MAX_NAME_BYTES = 32 * 1024 * 1024
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY
_PATH_FLAGS = getattr(os, "O_PATH", os.O_RDONLY) | os.O_DIRECTORY


class OpError(Exception):
    """A request the executor refuses (bad path, missing file): a reply, not a crash.

    ``kind`` is one of ``not_found``, ``bad_path``, ``is_dir``, ``too_large``, ``os_error``
    (then ``errno`` says which; the host raises the matching ``OSError`` subclass).
    """

    def __init__(self, kind: str, message: str, errno_: int | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.errno = errno_


def _os_error(exc: OSError, what: str) -> OpError:
    """The reply for an ``OSError`` on ``what``: missing, not a directory, or the errno itself."""
    if exc.errno == errno.ENOENT:
        return OpError("not_found", f"no such file or directory: {what}")
    if exc.errno in (errno.ENOTDIR, errno.ELOOP):
        return OpError("bad_path", f"{what} is not a directory (or is a symlink)")
    return OpError("os_error", f"{what}: {exc.strerror or exc}", exc.errno)


def rel_parts(rel: str) -> list[str]:
    """Split a root-relative path; refuse absolute paths, ``..``, NUL bytes and lone surrogates."""
    if "\0" in rel:
        raise OpError("bad_path", f"path {rel!r} contains a NUL byte")
    try:
        rel.encode("utf-8")
    except UnicodeEncodeError:
        raise OpError("bad_path", f"path {rel!r} is not valid UTF-8") from None
    if rel.startswith("/"):
        raise OpError("bad_path", f"path {rel!r} must be relative to the work directory")
    parts = [p for p in rel.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise OpError("bad_path", f"path {rel!r} leaves the work directory")
    return parts


def _open_root(root: str | int, flags: int) -> int:
    """Open the root (a path, or an open directory fd that stays the caller's) with ``flags``."""
    try:
        if isinstance(root, int):
            return os.open(".", flags, dir_fd=root)
        return os.open(root, flags)
    except OSError as exc:
        raise _os_error(exc, "the work directory") from None


def open_dir(root: str | int, parts: list[str], create: bool = False) -> int:
    """Open ``root/parts...`` as an ``O_PATH`` directory fd without following any symlink.

    ``O_PATH`` needs search permission only, as a path lookup does; the fd serves as ``dir_fd``.
    """
    fd = _open_root(root, _PATH_FLAGS)
    try:
        for i, part in enumerate(parts):
            if create:
                try:
                    os.mkdir(part, 0o755, dir_fd=fd)
                except FileExistsError:
                    pass
                except OSError as exc:
                    raise _os_error(exc, "/".join(parts[: i + 1])) from None
            try:
                nfd = os.open(part, _PATH_FLAGS | os.O_NOFOLLOW, dir_fd=fd)
            except OSError as exc:
                raise _os_error(exc, "/".join(parts[: i + 1])) from None
            os.close(fd)
            fd = nfd
    except BaseException:
        os.close(fd)
        raise
    return fd


def safe_write(root: str | int, rel: str, data: bytes, mode: int = 0o644) -> None:
    """Write a regular file under ``root``; a symlink or file already there is replaced."""
    parts = rel_parts(rel)
    if not parts:
        raise OpError("is_dir", "cannot write to the work directory itself")
    dfd = open_dir(root, parts[:-1], create=True)
    try:
        name = parts[-1]
        try:
            st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
        except FileNotFoundError:
            st = None
        if st is not None and stat.S_ISDIR(st.st_mode):
            raise OpError("is_dir", f"{rel} is a directory")
        try:
            if st is not None and not stat.S_ISREG(st.st_mode):
                os.unlink(name, dir_fd=dfd)
            fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, mode & 0o777, dir_fd=dfd)
        except OSError as exc:
            raise _os_error(exc, rel) from None
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            os.fchmod(fh.fileno(), mode & 0o777)
    finally:
        os.close(dfd)


def read_all(fd: int, limit: int) -> bytes | None:
    """Up to ``limit`` bytes of an open file, in chunks (``read(n)`` would allocate n bytes up
    front); None when there are more."""
    chunks, total = [], 0
    while True:
        chunk = os.read(fd, min(1 << 20, limit + 1 - total))
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        total += len(chunk)
        if total > limit:
            return None


def safe_read(root: str | int, rel: str, max_bytes: int) -> bytes:
    """Read a regular file under ``root``; symlinks, FIFOs, sockets and devices are refused."""
    parts = rel_parts(rel)
    if not parts:
        raise OpError("is_dir", "the work directory is a directory")
    dfd = open_dir(root, parts[:-1])
    try:
        try:
            fd = os.open(parts[-1], _FILE_FLAGS, dir_fd=dfd)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise OpError("bad_path", f"{rel} is a symlink: not followed") from None
            if exc.errno == errno.ENXIO:
                raise OpError("bad_path", f"{rel} is a socket, not a regular file") from None
            raise _os_error(exc, rel) from None
        try:
            st = os.fstat(fd)
            if stat.S_ISDIR(st.st_mode):
                raise OpError("is_dir", f"{rel} is a directory")
            if not stat.S_ISREG(st.st_mode):
                raise OpError("bad_path", f"{rel} is a {kind_of(st.st_mode)}, not a regular file")
            data = read_all(fd, max_bytes)
        finally:
            os.close(fd)
    finally:
        os.close(dfd)
    if data is None:
        raise OpError("too_large", f"{rel} is larger than {max_bytes} bytes")
    return data


# ---- bounded walks ---------------------------------------------------------------------------


def kind_of(mode: int) -> str:
    """``dir``, ``file``, ``link``, ``fifo``, ``socket``, ``device`` or ``other``."""
    for test, name in ((stat.S_ISDIR, "dir"), (stat.S_ISREG, "file"), (stat.S_ISLNK, "link"),
                       (stat.S_ISFIFO, "fifo"), (stat.S_ISSOCK, "socket"), (stat.S_ISCHR, "device"),
                       (stat.S_ISBLK, "device")):
        if test(mode):
            return name
    return "other"


class Scan:
    """One bounded walk (:func:`scan`) and what it found.

    ``entries``: ``(path, kind, stat)`` of everything listed, parents before children;
    ``files``: path -> content of every regular file read (when reading);
    ``left_out``: path -> why it was not listed in full, entered or read;
    ``cut``: one line per bound the walk hit, saying what is missing beyond it.
    """

    def __init__(self, max_entries: int = MAX_ENTRIES, max_depth: int = MAX_DEPTH,
                 max_name_bytes: int = MAX_NAME_BYTES, read_bytes: int | None = None,
                 strict_bytes: bool = False) -> None:
        self.entries: list[tuple[str, str, os.stat_result]] = []
        self.files: dict[str, bytes] = {}
        self.left_out: dict[str, str] = {}
        self.cut: list[str] = []
        self.max_entries, self.max_depth, self.max_name_bytes = max_entries, max_depth, max_name_bytes
        self.entries_left, self.names_left = max_entries, max_name_bytes
        self.read_bytes, self.strict_bytes = read_bytes, strict_bytes
        self.bytes_left = read_bytes or 0
        self.exhausted = False

    def note_cut(self, message: str) -> None:
        if message not in self.cut:
            self.cut.append(message)

    def list_dir(self, fd: int, prefix: str) -> list[tuple[str, os.stat_result]] | None:
        """The sorted entries of an open directory, within the entry and name budgets."""
        where = prefix.rstrip("/") or "."
        if self.exhausted:
            self.left_out[where] = "not listed: the walk's budget was spent"
            return None
        found = []
        try:
            with os.scandir(fd) as it:
                for entry in it:
                    if self.entries_left <= 0 or self.names_left <= 0:
                        self.exhausted = True
                        limit = (f"{self.max_entries} entries" if self.entries_left <= 0
                                 else f"{self.max_name_bytes} bytes of names")
                        self.note_cut(f"the walk stopped after {limit}; the rest of {where} and what "
                                      "comes after it is not listed")
                        break
                    self.entries_left -= 1
                    self.names_left -= len(prefix) + len(entry.name) + 1
                    try:
                        entry.name.encode("utf-8")
                    except UnicodeEncodeError:
                        shown = entry.name.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
                        self.left_out[prefix + shown] = "name is not valid UTF-8: left out"
                        continue
                    with contextlib.suppress(OSError):  # gone meanwhile
                        found.append((entry.name, entry.stat(follow_symlinks=False)))
        except OSError as exc:
            self.left_out[where] = f"directory not readable ({exc.strerror})"
            return None
        found.sort(key=lambda item: item[0])
        return found

    def leaf(self, dfd: int, name: str, path: str, st: os.stat_result) -> None:
        """Record a non-directory; when reading, read it (a regular file) or say why not."""
        kind = kind_of(st.st_mode)
        self.entries.append((path, kind, st))
        if self.read_bytes is None:
            return
        if kind != "file":
            self.left_out[path] = _special_reason(kind, dfd, name)
            return
        data = None
        if st.st_size <= self.bytes_left:
            try:
                fd = os.open(name, _FILE_FLAGS, dir_fd=dfd)
            except OSError as exc:
                self.left_out[path] = f"file not readable ({exc.strerror})"
                return
            try:
                if not stat.S_ISREG(os.fstat(fd).st_mode):
                    self.left_out[path] = "changed while being read: left out"
                    return
                data = read_all(fd, self.bytes_left)
            except OSError as exc:
                self.left_out[path] = f"file not readable ({exc.strerror})"
                return
            finally:
                os.close(fd)
        if data is None:
            if self.strict_bytes:
                raise OpError("too_large", f"more than {self.read_bytes} bytes under the tree (at {path})")
            self.left_out[path] = f"not read: over the walk's budget of {self.read_bytes} bytes"
            self.note_cut(f"files beyond {self.read_bytes} bytes in all were not read")
            return
        self.bytes_left -= len(data)
        self.files[path] = data

    def walk(self, top: int) -> Scan:
        """Walk the directory open as ``top`` (it stays open): one descriptor per level."""
        first = self.list_dir(top, "")
        stack = [(os.dup(top), "", 1, iter(first))] if first is not None else []
        try:
            while stack:
                dfd, prefix, depth, pending = stack[-1]
                item = next(pending, None)
                if item is None:
                    os.close(dfd)
                    stack.pop()
                    continue
                name, st = item
                path = prefix + name
                if not stat.S_ISDIR(st.st_mode):
                    self.leaf(dfd, name, path, st)
                    continue
                self.entries.append((path, "dir", st))
                if depth >= self.max_depth:
                    self.left_out[path] = f"directory deeper than {self.max_depth} levels: not entered"
                    self.note_cut(f"directories deeper than {self.max_depth} levels were not entered")
                    continue
                try:
                    sub = os.open(name, _DIR_FLAGS, dir_fd=dfd)
                except OSError as exc:
                    self.left_out[path] = f"directory not readable ({exc.strerror})"
                    continue
                entries = self.list_dir(sub, path + "/")
                if entries is None:
                    os.close(sub)
                else:
                    stack.append((sub, path + "/", depth + 1, iter(entries)))
        finally:
            for frame in stack:
                os.close(frame[0])
        return self


def _special_reason(kind: str, dfd: int, name: str) -> str:
    if kind == "link":
        try:
            target = os.readlink(name, dir_fd=dfd)
        except OSError:
            target = "?"
        return f"symlink to {target[:200]!r}: not followed"
    return {"fifo": "FIFO: not read", "socket": "socket: not read", "device": "device node: not read"}.get(
        kind, "special file: not read")


def scan(top: int, **bounds: object) -> Scan:
    """Walk the directory open as ``top`` (it stays open) without recursion or symlinks.

    ``bounds`` are :class:`Scan`'s: ``max_entries``, ``max_depth``, ``max_name_bytes`` and, to
    read regular files too, ``read_bytes`` in all (a file over what is left is ``left_out``, or
    with ``strict_bytes`` raises ``OpError("too_large")``). Directories below ``max_depth``
    levels are listed but not entered. Never raises for what is in the tree: an unreadable
    directory or file, a special file, a name that is not UTF-8, an entry that vanishes
    meanwhile -- each is noted in ``left_out``.
    """
    return Scan(**bounds).walk(top)  # type: ignore[arg-type]


def scan_path(root: str | int, rel: str, **bounds: object) -> Scan:
    """:func:`scan` of ``root/rel``; a ``rel`` that is not a directory gives itself, by name.

    Raises ``OpError`` only for a bad or missing ``rel``; an unreadable ``rel`` is ``left_out``.
    """
    parts = rel_parts(rel)
    result = Scan(**bounds)  # type: ignore[arg-type]
    pfd = open_dir(root, parts[:-1]) if parts else None
    try:
        if pfd is None:
            top = _open_root(root, _DIR_FLAGS & ~os.O_NOFOLLOW)
        else:
            try:
                st = os.stat(parts[-1], dir_fd=pfd, follow_symlinks=False)
            except OSError as exc:
                raise _os_error(exc, rel) from None
            if not stat.S_ISDIR(st.st_mode):
                result.leaf(pfd, parts[-1], parts[-1], st)
                return result
            top = os.open(parts[-1], _DIR_FLAGS, dir_fd=pfd)
    except (OpError, OSError) as exc:
        if isinstance(exc, OpError) and exc.kind != "os_error":
            raise
        result.left_out["."] = f"directory not readable ({exc.strerror if isinstance(exc, OSError) else exc})"
        return result
    finally:
        if pfd is not None:
            os.close(pfd)
    try:
        return result.walk(top)
    finally:
        os.close(top)


def tree_reply(found: Scan) -> dict:
    """A read :class:`Scan` as JSON-ready data: ``files`` as ``[path, base64]`` pairs, plus
    ``left_out`` and ``cut`` (the executor's ``read_tree`` reply)."""
    return {"files": [[p, base64.b64encode(d).decode("ascii")] for p, d in found.files.items()],
            "left_out": found.left_out, "cut": found.cut}


# ---- removal ---------------------------------------------------------------------------------


def _unlink_or_enter(fd: int, name: str) -> int | None:
    """Remove a non-directory entry; for a directory, make it ours to empty and return its fd."""
    try:
        st = os.stat(name, dir_fd=fd, follow_symlinks=False)
        if not stat.S_ISDIR(st.st_mode):
            os.unlink(name, dir_fd=fd)
            return None
        if st.st_mode & 0o700 != 0o700:
            os.chmod(name, 0o700, dir_fd=fd)  # a directory: only the agent's processes could race, and they are gone
        return os.open(name, _DIR_FLAGS, dir_fd=fd)
    except OSError:
        return -1


def wipe(root: str | int) -> None:
    """Empty a directory, whatever the agent left in it: any depth, any permissions.

    ``root`` is a trusted path or an open directory fd, which stays the caller's (the executor
    passes the scratch dirs it holds: a link the agent put in a name's place is never followed).
    Iterative with one open descriptor at a time (it climbs back with ``..``), so neither a deep
    chain nor a low descriptor limit stops it; an entry that cannot go is skipped.
    """
    try:
        if not os.stat(root).st_mode & stat.S_ISVTX:  # our work dir, not a shared /tmp
            with contextlib.suppress(OSError):
                os.chmod(root, 0o755)
        if isinstance(root, int):
            cur = os.open(".", os.O_RDONLY | os.O_DIRECTORY, dir_fd=root)
        else:
            cur = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    names: list[str] = []  # the path from ``root`` down to ``cur``
    stuck: list[set[str]] = [set()]  # per level: entries that would not go
    try:
        while True:
            try:
                with os.scandir(cur) as it:
                    batch = [e.name for e in it if e.name not in stuck[-1]]
            except OSError:
                batch = []
            entered = None
            for name in batch:
                sub = _unlink_or_enter(cur, name)
                if sub == -1:
                    stuck[-1].add(name)
                elif sub is not None:
                    entered = (name, sub)
                    break
            if entered is not None:
                os.close(cur)
                cur = entered[1]
                names.append(entered[0])
                stuck.append(set())
                continue
            if not names:
                return
            try:
                parent = os.open("..", os.O_RDONLY | os.O_DIRECTORY, dir_fd=cur)
            except OSError:
                return
            os.close(cur)
            cur = parent
            name = names.pop()
            stuck.pop()
            try:
                os.rmdir(name, dir_fd=cur)
            except OSError:
                stuck[-1].add(name)
    finally:
        os.close(cur)
