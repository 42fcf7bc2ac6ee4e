"""BM25 search over the corpus, backed by a maintained library (bm25s; rank-bm25 as baseline).

Why bm25s: it precomputes the BM25 score of every (token, document) pair into a sparse matrix
at index time, so scoring a query is a handful of sparse-row sums. rank-bm25 recomputes every
document's score in Python-level loops per query token; on this corpus its median query is
hundreds of times slower (``envhub bench search`` measures both in the same run). The top-k
selection over the library's scores is ours (``top_k``: exact, stable, fast). Both get the
same tokens and k1/b; their IDF variants differ slightly (bm25s uses Lucene's, which is never
negative; rank-bm25's Okapi IDF floors very common terms), so rankings can differ in the tail.

We own only the tokenizer: lowercase word pieces, dotted names kept whole as well as split
(``os.path.join`` indexes as ``os.path.join``, ``os``, ``path``, ``join``, so a qualified-name
query finds its page first), identifiers also split at underscores (``move_to_end`` adds
``move`` and ``end``), and English stop words dropped. A document is indexed as its title three times (a cheap field boost: a name query should find
the object's own page before pages that merely mention it; measured on the gold queries, top-1
hits go from 86 % with one extra copy to 88 %) followed by its text.

The index is built once per process and corpus (``get_index``) and shared by every env instance;
querying is read-only and thread-safe.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .corpus import Corpus

BACKENDS = ("bm25s", "rank_bm25")
K1, B = 1.5, 0.75

_WORD = re.compile(r"[a-z0-9_]+(?:\.[a-z0-9_]+)*")
STOPWORDS = frozenset({
    "a", "an", "and", "are", "as", "at", "be", "but", "by", "do", "does", "for", "from", "has", "have", "how",
    "if", "in", "into", "is", "it", "its", "no", "not", "of", "on", "or", "such", "that", "the", "their", "then",
    "there", "these", "they", "this", "to", "was", "were", "what", "when", "where", "which", "who", "will", "with",
})


def tokenize(text: str) -> list[str]:
    """Lowercased word tokens. A dotted name (``os.path.join``) is a token of its own and also
    contributes its components; an identifier with underscores also contributes its parts."""
    out: list[str] = []
    for dotted in _WORD.findall(text.lower()):
        components = dotted.split(".")
        if len(components) > 1:
            out.append(dotted)
        for word in components:
            if "_" in word:
                word = word.strip("_")
                parts = word.split("_")
                if len(parts) > 1:
                    out.extend(p for p in parts if len(p) > 1 and p not in STOPWORDS)
            if len(word) > 1 and word not in STOPWORDS:
                out.append(word)
    return out


def index_text(title: str, text: str) -> str:
    return f"{title}\n{title}\n{title}\n{text}"


@dataclass(frozen=True)
class Hit:
    doc_id: str
    score: float


class SearchIndex:
    """A BM25 index of one corpus. ``backend`` picks the library; the default is bm25s."""

    def __init__(self, corpus: Corpus, backend: str = "bm25s") -> None:
        if backend not in BACKENDS:
            raise ValueError(f"unknown BM25 backend {backend!r}; choose one of {', '.join(BACKENDS)}")
        self.corpus = corpus
        self.backend = backend
        self.doc_ids = [d.doc_id for d in corpus]
        tokens = [tokenize(index_text(d.title, d.text)) for d in corpus]
        self._vocab = frozenset(t for doc in tokens for t in doc)
        self._engine: Any
        try:
            if backend == "bm25s":
                import bm25s

                self._engine = bm25s.BM25(k1=K1, b=B, method="lucene")
                self._engine.index(tokens, show_progress=False)
            else:
                from rank_bm25 import BM25Okapi

                self._engine = BM25Okapi(tokens, k1=K1, b=B)
        except ImportError as exc:
            raise ImportError(f"the {backend} BM25 backend is not installed: pip install 'envhub[retrieval]'") from exc

    def search(self, query: str, k: int = 5) -> list[Hit]:
        """The best ``k`` documents with a positive score, best first (ties by corpus order)."""
        terms = [t for t in tokenize(query) if t in self._vocab]
        if not terms or k <= 0:
            return []
        scores = np.asarray(self._engine.get_scores(terms))  # both libraries: one score per document
        return [Hit(self.doc_ids[i], float(scores[i])) for i in top_k(scores, k)]


def top_k(scores: np.ndarray, k: int) -> list[int]:
    """Indices of the ``k`` best positive scores, best first, ties broken by corpus order.

    Why not ``bm25s.BM25.retrieve``: its selection is ``numpy.argpartition`` over *every*
    document, which is pathologically slow when most scores are zero (a rare-term query: 1.5 to
    15 ms on this corpus) and leaves the order of ties unspecified. Only documents sharing a term
    with the query have a positive score, so selecting among those is both exact and fast.
    """
    candidates = np.flatnonzero(scores > 0)
    if candidates.size > 4 * k:  # narrow to the scores >= the k-th best before the exact sort
        values = scores[candidates]
        kth = np.partition(values, values.size - k)[values.size - k]
        candidates = candidates[values >= kth]
    order = np.argsort(-scores[candidates], kind="stable")
    return candidates[order][:k].tolist()


_lock = threading.Lock()
_indexes: dict[tuple[str, str], SearchIndex] = {}


def get_index(corpus: Corpus, backend: str = "bm25s") -> SearchIndex:
    """The process-wide index of ``corpus`` (built on first use: about a second for bm25s)."""
    key = (corpus.sha256, backend)
    with _lock:
        if key not in _indexes:
            _indexes[key] = SearchIndex(corpus, backend)
        return _indexes[key]


def available_backends() -> Sequence[str]:
    import importlib.util

    return [b for b in BACKENDS if importlib.util.find_spec(b) is not None]
