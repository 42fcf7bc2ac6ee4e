"""The frozen document collection and its question set, loaded with checksum verification.

The data files are written once by ``python -m envhub.tasks.retrieval.offline.build_corpus`` and
shipped as package data. Loading verifies each file's sha256 against ``manifest.json`` before parsing it: a corrupted
or hand-edited snapshot must fail loudly rather than quietly shift answers under a running
experiment. Parsed data is cached per process (it is immutable), so every env instance, worker
thread and benchmark shares one copy.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from envhub.store import atomic_path

DATA_DIR = Path(__file__).resolve().parent / "data"
CORPUS_FILE = "corpus.jsonl.gz"
QUESTIONS_FILE = "questions.jsonl.gz"
MANIFEST_FILE = "manifest.json"

#: Characters per page of ``open``: big enough for most docstrings, small enough for a context.
PAGE_CHARS = 2_000


class CorpusIntegrityError(RuntimeError):
    """A data file does not match the checksum recorded when the snapshot was built."""


@dataclass(frozen=True)
class Document:
    doc_id: str
    title: str
    module: str
    kind: str
    name: str
    text: str
    signature: str = ""
    params: tuple[dict[str, Any], ...] = field(default=(), repr=False)

    def pages(self, page_chars: int = PAGE_CHARS) -> int:
        return max(1, -(-len(self.text) // page_chars))


@dataclass(frozen=True)
class Corpus:
    """The documents, by id and in a fixed order (the order of the BM25 index)."""

    version: str
    sha256: str
    documents: tuple[Document, ...]

    @cached_property
    def by_id(self) -> dict[str, Document]:
        return {d.doc_id: d for d in self.documents}

    def __len__(self) -> int:
        return len(self.documents)

    def __iter__(self) -> Iterator[Document]:
        return iter(self.documents)


def sha256_file(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def write_data_file(path: Path, data: bytes) -> None:
    """Replace ``path`` by ``data`` atomically, readable by everyone (0644) like any shipped file."""
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)
        tmp.chmod(0o644)


def write_jsonl_gz(path: Path, rows: Iterable[dict[str, Any]]) -> None:
    """Deterministic gzip JSONL: sorted keys, no mtime or file name in the gzip header."""
    payload = "".join(json.dumps(r, sort_keys=True, ensure_ascii=False) + "\n" for r in rows).encode()
    raw = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=9) as gz:
        gz.write(payload)
    write_data_file(path, raw.getvalue())


def read_jsonl_gz(path: Path) -> list[dict[str, Any]]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def make_manifest(data_dir: Path, *, corpus_version: str, python: str, n_docs: int,
                  n_questions: int) -> dict[str, Any]:
    return {
        "corpus_version": corpus_version,
        "python": python,
        "documents": n_docs,
        "questions": n_questions,
        "sha256": {name: sha256_file(data_dir / name) for name in (CORPUS_FILE, QUESTIONS_FILE)},
    }


def read_manifest(data_dir: Path = DATA_DIR) -> dict[str, Any]:
    return json.loads((data_dir / MANIFEST_FILE).read_text(encoding="utf-8"))


def _verified(data_dir: Path, name: str) -> tuple[Path, str]:
    path = data_dir / name
    expected = read_manifest(data_dir)["sha256"][name]
    actual = sha256_file(path)
    if actual != expected:
        raise CorpusIntegrityError(
            f"{path} has sha256 {actual}, but the manifest records {expected}; the snapshot is corrupt "
            "or was edited by hand -- rebuild it with `python -m envhub.tasks.retrieval.offline.build_corpus`"
        )
    return path, actual


_lock = threading.Lock()
_corpora: dict[Path, Corpus] = {}
_questions: dict[Path, list[dict[str, Any]]] = {}


def load_corpus(data_dir: Path = DATA_DIR) -> Corpus:
    """The verified corpus (cached per process and directory)."""
    data_dir = data_dir.resolve()
    with _lock:
        if data_dir not in _corpora:
            path, digest = _verified(data_dir, CORPUS_FILE)
            docs = tuple(
                Document(doc_id=r["id"], title=r["title"], module=r["module"], kind=r["kind"], name=r["name"],
                         text=r["text"], signature=r.get("signature", ""), params=tuple(r.get("params", ())))
                for r in read_jsonl_gz(path)
            )
            _corpora[data_dir] = Corpus(read_manifest(data_dir)["corpus_version"], digest, docs)
        return _corpora[data_dir]


def load_questions(data_dir: Path = DATA_DIR) -> list[dict[str, Any]]:
    """The verified question records (cached per process and directory)."""
    data_dir = data_dir.resolve()
    with _lock:
        if data_dir not in _questions:
            path, _ = _verified(data_dir, QUESTIONS_FILE)
            _questions[data_dir] = read_jsonl_gz(path)
        return _questions[data_dir]
