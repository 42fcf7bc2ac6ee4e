"""``envhub bench search``: BM25 search latency over the whole retrieval corpus.

The measured path is what an agent's ``search`` call costs: tokenizing the query and ranking all
documents (the tool's text formatting is excluded; it is microseconds). Two workloads, half each:
*name* queries (the gold policy's, e.g. ``urllib.parse.urlsplit``: one to four rare tokens) and
*question* queries (a question's text, ~20 tokens with common words -- what a model that pastes
the question would send, and the expensive case). The baseline is the
other maintained BM25 library (rank-bm25) on the same corpus, tokens and queries, measured in the
same run, and the figures are reported as a ratio. The target is p50 <= 5 ms for the chosen
backend (bm25s). Figures are printed, never asserted.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

from envhub.rollout.bench import percentile

from .corpus import load_corpus, load_questions
from .search import SearchIndex, available_backends

TARGET_P50_MS = 5.0


def _spread(pool: list[str], n: int) -> list[str]:
    """``n`` items evenly spaced over the whole (sorted) pool, so every question type is in."""
    step = max(1, len(pool) // max(1, n))
    return pool[::step][:n]


def _queries(n: int) -> list[tuple[str, str]]:
    """``n`` (workload, query) pairs, alternating name and question queries."""
    records = load_questions()
    names = _spread([q for rec in records for q in rec["search_queries"]], n - n // 2)
    questions = _spread([rec["prompt"].split(" Answer with")[0] for rec in records], n // 2)
    mixed = [("name", q) for q in names] + [("question", q) for q in questions]
    mixed[::2], mixed[1::2] = mixed[: (len(mixed) + 1) // 2], mixed[(len(mixed) + 1) // 2:]
    return mixed


def _time_backend(index: SearchIndex, queries: list[tuple[str, str]], k: int) -> dict[str, list[float]]:
    for _, q in queries[:20]:  # warm caches and any lazy initialisation
        index.search(q, k)
    times: dict[str, list[float]] = {"name": [], "question": []}
    for workload, q in queries:
        t0 = time.perf_counter()
        index.search(q, k)
        times[workload].append(time.perf_counter() - t0)
    return times


def run_bench(out: Callable[[Any], None] = print, *, queries: int = 1000, baseline_queries: int = 200,
              k: int = 5) -> dict[str, Any]:
    """Build both indexes, time ``queries`` searches on bm25s and ``baseline_queries`` on rank-bm25."""
    corpus = load_corpus()
    result: dict[str, Any] = {"documents": len(corpus), "corpus_version": corpus.version, "k": k}
    backends = available_backends()
    if "bm25s" not in backends:
        raise ImportError("bm25s is not installed (pip install 'envhub[retrieval]')")
    qs = _queries(queries)
    out(f"search benchmark: {len(corpus)} documents ({corpus.version}), top-{k}")
    for backend, n in (("bm25s", len(qs)), ("rank_bm25", baseline_queries)):
        if backend not in backends:
            out(f"  {backend}: not installed, skipped")
            continue
        t0 = time.perf_counter()
        index = SearchIndex(corpus, backend)
        build_s = time.perf_counter() - t0
        by_workload = _time_backend(index, qs[:n], k)  # a prefix keeps the half-and-half mix
        times = [t for ts in by_workload.values() for t in ts]
        row: dict[str, Any] = {
            "index_build_s": build_s,
            "queries": len(times),
            "p50_ms": statistics.median(times) * 1e3,
            "p99_ms": percentile(times, 99) * 1e3,
            "mean_ms": statistics.fmean(times) * 1e3,
        }
        for workload, ts in by_workload.items():
            if ts:
                row[f"{workload}_p50_ms"] = statistics.median(ts) * 1e3
                row[f"{workload}_p99_ms"] = percentile(ts, 99) * 1e3
        result[backend] = row
        out(f"  {backend:<9} index build {build_s:6.2f} s   search p50 {row['p50_ms']:7.3f} ms   "
            f"p99 {row['p99_ms']:7.3f} ms   ({row['queries']} queries)")
        out(" " * 12 + "   ".join(f"{w} queries p50 {row[f'{w}_p50_ms']:.3f} ms p99 {row[f'{w}_p99_ms']:.3f} ms"
                                   for w in by_workload if f"{w}_p50_ms" in row))
    result["p50_ms"] = result["bm25s"]["p50_ms"]
    result["p99_ms"] = result["bm25s"]["p99_ms"]
    result["meets_target"] = result["p50_ms"] <= TARGET_P50_MS
    out(f"  target p50 <= {TARGET_P50_MS:g} ms: {'met' if result['meets_target'] else 'MISSED'}")
    if "rank_bm25" in result:
        result["speedup_vs_rank_bm25"] = result["rank_bm25"]["p50_ms"] / result["bm25s"]["p50_ms"]
        out(f"  bm25s is {result['speedup_vs_rank_bm25']:.1f}x faster than rank-bm25 at p50 (baseline, same run)")
    return result
