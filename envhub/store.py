"""Durable run output: an append-only JSONL file that survives ``kill -9``, and atomic JSON files.

Each record is written with one ``write`` call on an ``O_APPEND`` descriptor and fsynced, so a
killed process leaves at most one torn *last* line. :meth:`JsonlStore.open` repairs that by
truncating the file to the last complete line, which is what makes resuming safe: every episode
on disk is whole, and every whole episode is skipped on the next run.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import threading
from collections.abc import Iterator
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


def read_jsonl(path: str | Path) -> Iterator[dict[str, Any]]:
    """Complete records of a JSONL file; a torn last line (no newline) is ignored."""
    with open(path, "rb") as fh:
        for raw in fh:
            if raw.endswith(b"\n") and raw.strip():
                yield json.loads(raw)


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
            self.keys = {rec[self.key] for rec in read_jsonl(self.path)}
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
            written = os.write(self._fd, data)
            if written != len(data):  # a short write on a regular file means the disk is full
                raise OSError(f"short write to {self.path}: {written} of {len(data)} bytes")
            os.fsync(self._fd)
            self.keys.add(key)

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
