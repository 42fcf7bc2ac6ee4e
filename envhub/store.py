"""Durable run output: an append-only JSONL file that survives ``kill -9``, and atomic JSON files.

Each record is written with one ``write`` call (more only after a short write) on an ``O_APPEND``
descriptor and fsynced, so a killed process leaves at most one torn *last* line.
:meth:`JsonlStore.open` repairs that by truncating the file to the last complete line, which is
what makes resuming safe: every episode on disk is whole, and every whole episode is skipped on
the next run. A record that cannot be
written (a full disk) is cut off again, so the file stays whole, and the error names the file.
A complete line that is not a record is never guessed around: reading stops with its file and line.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from envhub.parsing import sanitize_text


def _utf8(text: str) -> bytes:
    """``text`` as UTF-8; a lone surrogate (which UTF-8 cannot hold) becomes U+FFFD instead of raising."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return sanitize_text(text).encode("utf-8")


@contextlib.contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temp path beside ``path``; when the block succeeds, the file is fsynced and
    replaces ``path`` in one rename. A crash or kill leaves the previous file (or none), never a
    torn one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    os.close(fd)
    try:
        yield Path(tmp)
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_text_atomic(path: str | Path, text: str) -> Path:
    """Write ``text`` to ``path`` atomically (see :func:`atomic_path`)."""
    with atomic_path(path) as tmp:
        tmp.write_bytes(_utf8(text))
    return Path(path)


def write_json_atomic(path: str | Path, data: Any) -> None:
    """Write JSON to ``path`` atomically (see :func:`write_text_atomic`)."""
    write_text_atomic(path, json.dumps(data, indent=2, sort_keys=True) + "\n")


class CorruptRecordError(ValueError):
    """A complete line of a JSONL file that is not a JSON record; the message names file and line."""

    def __init__(self, path: str | Path, line: int, why: str) -> None:
        super().__init__(f"{path}:{line}: {why}; repair or delete that line to go on")
        self.path = Path(path)
        self.line = line


def read_jsonl(path: str | Path) -> Iterator[dict[str, Any]]:
    """Complete records of a JSONL file; a torn last line (no newline) is ignored. A complete
    line that is not a JSON object raises :class:`CorruptRecordError`."""
    for n, raw in jsonl_lines(path):
        yield parse_record(path, n, raw)


def jsonl_lines(path: str | Path) -> Iterator[tuple[int, bytes]]:
    """(line number, bytes) of each complete, non-blank line of a JSONL file (see :func:`read_jsonl`)."""
    with open(path, "rb") as fh:
        for n, raw in enumerate(fh, 1):
            if raw.endswith(b"\n") and raw.strip():
                yield n, raw


def parse_record(path: str | Path, n: int, raw: bytes) -> dict[str, Any]:
    """Line ``n`` of the JSONL file ``path`` as a JSON object, or :class:`CorruptRecordError`."""
    try:
        record = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise CorruptRecordError(path, n, f"not JSON ({exc.msg} at column {exc.colno})") from None
    except UnicodeDecodeError:
        raise CorruptRecordError(path, n, "not UTF-8") from None
    if not isinstance(record, dict):
        raise CorruptRecordError(path, n, f"a JSON {type(record).__name__}, not a record")
    return record


class StoreWriteError(OSError):
    """Appending a record failed (disk full, file too large, I/O error). The record is not in the
    file and every record before it is whole. ``errno`` and ``strerror`` are the cause's."""

    def __init__(self, path: Path, cause: OSError) -> None:
        super().__init__(cause.errno, cause.strerror or str(cause), str(path))
        self.path = path


class JsonlStore:
    """Append-only JSONL file of records keyed by ``key``; thread-safe."""

    def __init__(self, path: str | Path, key: str = "episode_id"):
        self.path = Path(path)
        self.key = key
        self._lock = threading.Lock()
        self._fd: int | None = None
        self.keys: set[str] = set()

    def open(self) -> JsonlStore:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._repair()
        if self.path.exists():
            self.keys = set()
            for n, rec in enumerate(read_jsonl(self.path), 1):
                if self.key not in rec:
                    raise CorruptRecordError(self.path, n, f"a record without {self.key!r}")
                self.keys.add(rec[self.key])
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        return self

    def append(self, record: dict[str, Any] | str) -> None:
        line = record if isinstance(record, str) else json.dumps(record, ensure_ascii=False)
        data = _utf8(line.rstrip("\n") + "\n")  # never raises on a bad string: the record is kept
        key = json.loads(data)[self.key] if isinstance(record, str) else record[self.key]
        if isinstance(key, str):
            key = sanitize_text(key)  # as it reads back from the file
        with self._lock:
            if self._fd is None:
                raise RuntimeError("store is not open")
            if key in self.keys:
                return
            size = os.fstat(self._fd).st_size
            try:
                rest = memoryview(data)
                while rest:  # after a short write the next one says why (ENOSPC, EFBIG) or goes on
                    written = os.write(self._fd, rest)
                    if written <= 0:
                        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
                    rest = rest[written:]
                os.fsync(self._fd)
            except OSError as exc:
                with contextlib.suppress(OSError):  # no torn record left behind: the file stays whole
                    os.ftruncate(self._fd, size)
                raise StoreWriteError(self.path, exc) from exc
            self.keys.add(key)

    def rewrite(self, drop: Callable[[str], bool]) -> int:
        """Remove the records whose key ``drop`` names, in one atomic replacement of the file (a kill
        leaves the old file or the new one, whole) while appends wait; returns how many went."""
        with self._lock:
            if self._fd is None:
                raise RuntimeError("store is not open")
            gone = {key for key in self.keys if drop(key)}
            if not gone:
                return 0
            with atomic_path(self.path) as tmp, open(tmp, "wb") as out:
                for n, raw in jsonl_lines(self.path):
                    if parse_record(self.path, n, raw)[self.key] not in gone:
                        out.write(raw)
            os.close(self._fd)
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            self.keys -= gone
            return len(gone)

    def close(self) -> None:
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None

    def __enter__(self) -> JsonlStore:
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _repair(self) -> None:
        if not self.path.exists():
            return
        with open(self.path, "rb+") as fh:
            data = fh.read()
            if not data or data.endswith(b"\n"):
                return
            fh.truncate(data.rfind(b"\n") + 1)
