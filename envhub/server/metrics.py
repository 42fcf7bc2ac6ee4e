"""The server's Prometheus metrics, through ``prometheus-client``, with bounded label sets.

Labels are only ever ``env`` (one value per server), ``route`` (a fixed vocabulary: route
templates and WebSocket message types, everything else is ``other``) and ``outcome`` (a status
class, ``ok``/``error``, or an episode outcome from the taxonomy). A client cannot mint new series
by sending odd paths or message types, so the scrape size stays bounded whatever traffic comes.

Each :class:`Metrics` has its own registry (two servers in one process never share series);
prometheus-client's metrics are thread-safe, so the event loop and worker threads may update them.
"""

from __future__ import annotations

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
)

from envhub.sandboxes.pool_metrics import PoolCollector
from envhub.types import Outcome

disable_created_metrics()  # ``*_created`` series would double every counter's series

#: Every value the ``route`` label can take.
ROUTES = frozenset({
    "reset", "step", "state", "health", "metadata", "schema", "metrics", "mcp", "ws", "docs", "openapi",
    "info", "tasks", "sessions", "abort", "gold", "other",
    # WebSocket messages, by type
    "ws_reset", "ws_step", "ws_state", "ws_close", "ws_abort", "ws_gold", "ws_mcp",
})
#: Every value the ``outcome`` label can take.
OUTCOMES = frozenset({"2xx", "3xx", "4xx", "5xx", "ok", "error", "capacity", "idle_expired", "attached_idle", "closed",
                      "superseded", "disconnected", *(o.value for o in Outcome)})

_SECONDS_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


def route_label(name: str) -> str:
    return name if name in ROUTES else "other"


def outcome_label(name: str) -> str:
    return name if name in OUTCOMES else "other"


def status_class(status: int) -> str:
    return f"{min(max(status // 100, 2), 5)}xx"


class Metrics:
    """The server's counters, gauges and histograms; :meth:`render` is the text exposition."""

    def __init__(self, env_id: str) -> None:
        self.env = env_id
        self.registry = r = CollectorRegistry(auto_describe=True)
        self._requests = Counter("envhub_requests", "HTTP requests and WebSocket messages",
                                 ["env", "route", "outcome"], registry=r)
        self._seconds = Histogram("envhub_request_seconds", "time to answer a request or message",
                                  ["env", "route"], buckets=_SECONDS_BUCKETS, registry=r)
        self._episodes = Counter("envhub_episodes", "finished episodes by outcome", ["env", "outcome"], registry=r)
        self._closed = Counter("envhub_sessions_closed", "sessions ended, by why", ["env", "outcome"], registry=r)
        self._rejected = Counter("envhub_capacity_rejections", "sessions refused at capacity", ["env", "route"],
                                 registry=r)
        self._active = Gauge("envhub_sessions_active", "sessions holding a slot", ["env"], registry=r)
        self._attached = Gauge("envhub_sessions_attached", "sessions with a live WebSocket", ["env"], registry=r)
        self._max = Gauge("envhub_sessions_max", "session capacity", ["env"], registry=r)
        for gauge in (self._active, self._attached, self._max):
            gauge.labels(env_id)
        r.register(PoolCollector())  # the warm sandbox pools, labelled by backend only

    # ---- updates ------------------------------------------------------------------------------

    def request(self, route: str, outcome: str, seconds: float | None = None) -> None:
        r = route_label(route)
        self._requests.labels(self.env, r, outcome_label(outcome)).inc()
        if seconds is not None:
            self._seconds.labels(self.env, r).observe(seconds)

    def episode(self, outcome: str) -> None:
        self._episodes.labels(self.env, outcome_label(outcome)).inc()

    def session_closed(self, why: str) -> None:
        self._closed.labels(self.env, outcome_label(why)).inc()

    def capacity_rejected(self, route: str) -> None:
        self._rejected.labels(self.env, route_label(route)).inc()

    def set_sessions(self, active: int, attached: int, capacity: int) -> None:
        self._active.labels(self.env).set(active)
        self._attached.labels(self.env).set(attached)
        self._max.labels(self.env).set(capacity)

    # ---- exposition ---------------------------------------------------------------------------

    def render(self) -> str:
        """The Prometheus text exposition (format 0.0.4) of every series."""
        return generate_latest(self.registry).decode("utf-8")
