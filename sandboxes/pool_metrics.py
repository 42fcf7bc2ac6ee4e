"""Prometheus series of the process's warm sandbox pools (:func:`envhub.sandboxes.pool.shared_pool`).

Summed per backend -- a pool's spec is not a bounded label. ``replaced`` counts sandboxes found dead
or broken and replaced: the pool's failures. Served beside the rollout series of :mod:`envhub.rollout.metrics`.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from envhub.sandboxes import pool


class PoolCollector(Collector):
    def collect(self) -> Iterator[Metric]:
        pools = pool.open_pools()
        count = GaugeMetricFamily("envhub_sandbox_pools", "pools (one per backend and sandbox spec)",
                                  labels=["backend"])
        size = GaugeMetricFamily("envhub_sandbox_pool_size", "idle sandboxes a pool keeps warm", labels=["backend"])
        idle = GaugeMetricFamily("envhub_sandbox_pool_idle", "idle sandboxes now", labels=["backend"])
        counters = {
            name: CounterMetricFamily(f"envhub_sandbox_pool_{name}", text, labels=["backend"])
            for name, text in (("created", "sandboxes started by pools"), ("reused", "leases served warm"),
                               ("replaced", "pooled sandboxes found dead or broken and replaced"))
        }
        per_backend: dict[str, list[int]] = {}
        for p in pools:
            row = per_backend.setdefault(p.backend, [0, 0, 0, 0, 0, 0])
            for i, value in enumerate((1, p.size, p.idle, p.stats.created, p.stats.reused, p.stats.replaced)):
                row[i] += value
        for backend, (n_pools, n_size, n_idle, created, reused, replaced) in sorted(per_backend.items()):
            count.add_metric([backend], n_pools)
            size.add_metric([backend], n_size)
            idle.add_metric([backend], n_idle)
            for name, value in (("created", created), ("reused", reused), ("replaced", replaced)):
                counters[name].add_metric([backend], value)
        yield count
        yield size
        yield idle
        yield from counters.values()
