"""The asynchronous loop's numbers of a step (``rollout.mode: async``) and where each is shown.

An async run's lines of ``RUN/steps.jsonl`` carry the keys of :data:`ASYNC_METRICS`; a sync run's
carry none, and then no sink shows any. The sinks:

* Prometheus (``metrics_port``): one gauge per key, named in :data:`ASYNC_METRICS` (label ``env``
  only), set from each step's record (:class:`AsyncGauges`); registered at the first record that
  carries one, so a sync run's ``/metrics`` has none of them;
* TensorBoard and the other trackers: ``train/<key>``, as every numeric entry of a step's record;
* the training report (:mod:`envhub.reports.training_plots`, :mod:`envhub.reports.training_html`).

A sample's version lag is the trainer's weight version when its step trained minus the
version of the sample's first turn (:func:`first_turn_version`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry, Gauge

    from envhub.types import TrajectoryRecord


@dataclass(frozen=True)
class AsyncMetric:
    key: str
    prometheus: str
    description: str


ASYNC_METRICS: tuple[AsyncMetric, ...] = (
    AsyncMetric("async_queue_groups", "envhub_train_async_queue_groups",
                "finished groups waiting in the buffer between the rollout workers and the trainer"),
    AsyncMetric("async_buffer_wait_s_mean", "envhub_train_async_buffer_wait_seconds_mean",
                "seconds the step's samples waited in the buffer, mean"),
    AsyncMetric("async_buffer_wait_s_max", "envhub_train_async_buffer_wait_seconds_max",
                "seconds the step's samples waited in the buffer, max"),
    AsyncMetric("async_version_lag_mean", "envhub_train_async_version_lag_mean",
                "trainer weight version minus each sample's first-turn version, mean over the step's samples"),
    AsyncMetric("async_version_lag_max", "envhub_train_async_version_lag_max",
                "trainer weight version minus each sample's first-turn version, max over the step's samples"),
    AsyncMetric("async_versions_spanned_mean", "envhub_train_async_versions_spanned_mean",
                "weight versions a sample's turns spanned while it was generated, mean"),
    AsyncMetric("async_trainer_idle_ratio", "envhub_train_async_trainer_idle_ratio",
                "share of the step the trainer waited for samples"),
    AsyncMetric("async_rollout_idle_ratio", "envhub_train_async_rollout_idle_ratio",
                "share of the step the rollout workers waited for admission or weights"),
    AsyncMetric("async_stale_dropped", "envhub_train_async_stale_dropped",
                "samples dropped at the step for exceeding the staleness bound"),
    AsyncMetric("async_stale_reweighted", "envhub_train_async_stale_reweighted",
                "samples over the staleness bound kept at the step for the importance-sampling correction"),
    AsyncMetric("async_resume_dropped_groups", "envhub_train_async_resume_dropped_groups",
                "buffered groups a resume dropped for exceeding the staleness bound at the resumed version"),
    AsyncMetric("sglang_requests_reissued", "envhub_train_async_sglang_requests_reissued",
                "SGLang requests a weight push's pause aborted and the trainer sent again"),
)
ASYNC_KEYS: tuple[str, ...] = tuple(m.key for m in ASYNC_METRICS)


def async_values(record: dict[str, Any]) -> dict[str, float]:
    """The async keys ``record`` carries with a finite number (empty for a sync run's record)."""
    out = {}
    for key in ASYNC_KEYS:
        value = record.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
            out[key] = float(value)
    return out


def is_async_run(config: dict[str, Any], steps: list[dict[str, Any]]) -> bool:
    """A run whose config says ``rollout.mode: async`` or whose steps recorded an async key."""
    rollout = config.get("rollout")
    return (isinstance(rollout, dict) and rollout.get("mode") == "async") or any(
        async_values(row) for row in steps)


def first_turn_version(record: TrajectoryRecord) -> int | None:
    """The weight version the record's first sampled turn was sampled with (None: not recorded)."""
    versions = record.versions.weight_versions or [t.weight_version for t in record.turns]
    first = next((v for v in versions if v is not None), None)
    try:
        return int(first) if first is not None else None
    except ValueError:
        return None


class AsyncGauges:
    """The Prometheus gauges of :data:`ASYNC_METRICS` in ``registry``, labelled ``env``."""

    def __init__(self, registry: CollectorRegistry, env: str) -> None:
        self.registry, self.env = registry, env
        self.gauges: dict[str, Gauge] = {}

    def update(self, record: dict[str, Any]) -> None:
        """Each async key of a step's ``record`` to its gauge (a sync record changes nothing)."""
        values = async_values(record)
        if values and not self.gauges:
            from prometheus_client import Gauge

            self.gauges = {m.key: Gauge(m.prometheus, m.description, ["env"], registry=self.registry)
                           for m in ASYNC_METRICS}
        for key, value in values.items():
            self.gauges[key].labels(self.env).set(value)
