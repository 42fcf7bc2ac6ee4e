"""Prometheus metrics with bounded label sets, in the text exposition format (version 0.0.4).

Labels are only ever ``env`` (one value per server), ``route`` (a fixed vocabulary: route
templates and WebSocket message types, everything else is ``other``) and ``outcome`` (a status
class, ``ok``/``error``, or an episode outcome from the taxonomy). A client cannot mint new series
by sending odd paths or message types, so the scrape size stays bounded whatever traffic comes.

No dependency: the format is a few lines of text, and all updates happen on the event loop thread
(a lock still guards them, so a worker thread may update too).
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Iterable

from envhub.types import Outcome

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


class _Histogram:
    __slots__ = ("buckets", "count", "sum")

    def __init__(self) -> None:
        self.buckets = [0] * (len(_SECONDS_BUCKETS) + 1)
        self.count = 0
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.buckets[bisect.bisect_left(_SECONDS_BUCKETS, value)] += 1
        self.count += 1
        self.sum += value


class Metrics:
    """The server's counters, gauges and histograms."""

    def __init__(self, env_id: str) -> None:
        self.env = env_id
        self._lock = threading.Lock()
        self._counters: dict[str, dict[tuple[str, ...], float]] = {}
        self._hists: dict[str, dict[tuple[str, ...], _Histogram]] = {}
        self._gauges: dict[str, float] = {}
        self._help: dict[str, tuple[str, str, tuple[str, ...]]] = {}
        self._declare("envhub_requests_total", "counter", "HTTP requests and WebSocket messages",
                      ("env", "route", "outcome"))
        self._declare("envhub_request_seconds", "histogram", "time to answer a request or message",
                      ("env", "route"))
        self._declare("envhub_episodes_total", "counter", "finished episodes by outcome", ("env", "outcome"))
        self._declare("envhub_sessions_closed_total", "counter", "sessions ended, by why", ("env", "outcome"))
        self._declare("envhub_capacity_rejections_total", "counter", "sessions refused at capacity",
                      ("env", "route"))
        self._declare("envhub_sessions_active", "gauge", "sessions holding a slot", ("env",))
        self._declare("envhub_sessions_attached", "gauge", "sessions with a live WebSocket", ("env",))
        self._declare("envhub_sessions_max", "gauge", "session capacity", ("env",))

    def _declare(self, name: str, kind: str, help_text: str, labels: tuple[str, ...]) -> None:
        self._help[name] = (kind, help_text, labels)
        if kind == "histogram":
            self._hists[name] = {}
        elif kind == "counter":
            self._counters[name] = {}

    # ---- updates ------------------------------------------------------------------------------

    def request(self, route: str, outcome: str, seconds: float | None = None) -> None:
        r = route_label(route)
        with self._lock:
            key = (self.env, r, outcome_label(outcome))
            series = self._counters["envhub_requests_total"]
            series[key] = series.get(key, 0) + 1
            if seconds is not None:
                hists = self._hists["envhub_request_seconds"]
                hist = hists.get((self.env, r))
                if hist is None:
                    hist = hists[(self.env, r)] = _Histogram()
                hist.observe(seconds)

    def episode(self, outcome: str) -> None:
        self._inc("envhub_episodes_total", (self.env, outcome_label(outcome)))

    def session_closed(self, why: str) -> None:
        self._inc("envhub_sessions_closed_total", (self.env, outcome_label(why)))

    def capacity_rejected(self, route: str) -> None:
        self._inc("envhub_capacity_rejections_total", (self.env, route_label(route)))

    def set_sessions(self, active: int, attached: int, capacity: int) -> None:
        with self._lock:
            self._gauges["envhub_sessions_active"] = active
            self._gauges["envhub_sessions_attached"] = attached
            self._gauges["envhub_sessions_max"] = capacity

    def _inc(self, name: str, key: tuple[str, ...]) -> None:
        with self._lock:
            series = self._counters[name]
            series[key] = series.get(key, 0) + 1

    # ---- exposition ---------------------------------------------------------------------------

    def render(self) -> str:
        lines: list[str] = []
        with self._lock:
            for name, (kind, help_text, labels) in self._help.items():
                lines.append(f"# HELP {name} {help_text}")
                lines.append(f"# TYPE {name} {kind}")
                if kind == "counter":
                    for key, value in sorted(self._counters[name].items()):
                        lines.append(f"{name}{_labels(labels, key)} {_fmt(value)}")
                elif kind == "gauge":
                    lines.append(f"{name}{_labels(labels, (self.env,))} {_fmt(self._gauges.get(name, 0))}")
                else:
                    for key, hist in sorted(self._hists[name].items()):
                        cumulative = 0
                        for bound, n in zip((*_SECONDS_BUCKETS, float("inf")), hist.buckets, strict=True):
                            cumulative += n
                            le = "+Inf" if bound == float("inf") else repr(bound)
                            lines.append(f"{name}_bucket{_labels((*labels, 'le'), (*key, le))} {cumulative}")
                        lines.append(f"{name}_sum{_labels(labels, key)} {_fmt(hist.sum)}")
                        lines.append(f"{name}_count{_labels(labels, key)} {hist.count}")
        return "\n".join(lines) + "\n"


def _labels(names: Iterable[str], values: Iterable[str]) -> str:
    pairs = ",".join(f'{n}="{_escape(v)}"' for n, v in zip(names, values, strict=True))
    return "{" + pairs + "}"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _fmt(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))
