"""Prometheus metrics of a rollout, through ``prometheus-client``, served while the run lasts.

Labels are bounded: ``env`` (one per run), ``outcome`` and ``outcome_class`` (the fixed taxonomy)
and, for sandbox pools, ``backend``. Never an episode id, a task id or any text of a prompt.

``envhub rollout --metrics-port PORT`` builds a :class:`RolloutMetrics`, wraps the policy (an
episode is *in flight* from the policy's ``start`` until its record is kept) and passes
:meth:`RolloutMetrics.on_episode` as the runner's ``on_episode`` callback. The sandbox pools' series
come from :class:`envhub.sandboxes.pool_metrics.PoolCollector`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    start_http_server,
)

from envhub.sandboxes.pool_metrics import PoolCollector
from envhub.types import Outcome, OutcomeClass

# ``*_created`` series double every counter's series and no envhub dashboard reads them.
disable_created_metrics()

EPISODE_SECONDS_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)


class RolloutMetrics:
    """A rollout's series in their own registry (two runs in one process never share them)."""

    def __init__(self, env_id: str, *, planned: int = 0, registry: CollectorRegistry | None = None) -> None:
        self.env = env_id
        self.registry = registry or CollectorRegistry(auto_describe=True)
        r = self.registry
        self.episodes = Counter("envhub_rollout_episodes", "finished episodes by outcome and outcome class",
                                ["env", "outcome", "outcome_class"], registry=r)
        for o in Outcome:  # every series exists from the start: an infra outcome at 0 is visible as 0
            self.episodes.labels(env_id, o.value, o.outcome_class.value)
        self.strict = Gauge("envhub_rollout_strict_success_ratio", "successes / finished episodes (infra included)",
                            ["env"], registry=r)
        self.excl_infra = Gauge("envhub_rollout_success_ratio_excluding_infra",
                                "successes / finished episodes that are not infra failures", ["env"], registry=r)
        self.tokens = Counter("envhub_rollout_sampled_tokens", "tokens the policy sampled", ["env"], registry=r)
        self.tokens_per_s = Gauge("envhub_rollout_tokens_per_second",
                                  "sampled tokens per second since the run started", ["env"], registry=r)
        self.tool_calls = Counter("envhub_rollout_tool_calls", "tool calls made by the policy", ["env"], registry=r)
        self.in_flight = Gauge("envhub_rollout_episodes_in_flight", "episodes started and not yet recorded",
                               ["env"], registry=r)
        self.planned = Gauge("envhub_rollout_episodes_planned", "episodes the run was asked for", ["env"], registry=r)
        self.seconds = Histogram("envhub_rollout_episode_seconds", "episode wall time by outcome class",
                                 ["env", "outcome_class"], buckets=EPISODE_SECONDS_BUCKETS, registry=r)
        for c in OutcomeClass:
            self.seconds.labels(env_id, c.value)
        for g in (self.strict, self.excl_infra, self.tokens, self.tokens_per_s, self.tool_calls, self.in_flight):
            g.labels(env_id)
        self.planned.labels(env_id).set(planned)
        self._lock = threading.Lock()
        self._t0 = time.monotonic()
        self._started = self._finished = self._successes = self._infra = self._sampled = 0
        r.register(PoolCollector())

    def policy(self, policy: Any) -> Any:
        """``policy`` with episode starts counted; its name and describe() are the same."""
        return _CountingPolicy(policy, self._start)

    def _start(self) -> None:
        with self._lock:
            self._started += 1
            self.in_flight.labels(self.env).set(max(0, self._started - self._finished))

    def on_episode(self, record: Any) -> None:
        """The runner's ``on_episode`` callback: count one finished episode (a TrajectoryRecord)."""
        outcome = Outcome(record.outcome)
        m = record.metrics
        with self._lock:
            self._finished += 1
            self._successes += outcome is Outcome.SUCCESS
            self._infra += outcome.is_infra
            self._sampled += int(m.sampled_tokens)
            self.episodes.labels(self.env, outcome.value, outcome.outcome_class.value).inc()
            self.tokens.labels(self.env).inc(int(m.sampled_tokens))
            self.tool_calls.labels(self.env).inc(int(m.tool_calls))
            self.seconds.labels(self.env, outcome.outcome_class.value).observe(float(m.wall_seconds))
            self.strict.labels(self.env).set(self._successes / self._finished)
            scored = self._finished - self._infra
            self.excl_infra.labels(self.env).set(self._successes / scored if scored else 0.0)
            elapsed = time.monotonic() - self._t0
            self.tokens_per_s.labels(self.env).set(self._sampled / elapsed if elapsed > 0 else 0.0)
            self.in_flight.labels(self.env).set(max(0, self._started - self._finished))

    def serve(self, address: str) -> tuple[str, int, Callable[[], None]]:
        """Serve ``/metrics`` at ``address`` (``PORT`` on 127.0.0.1, or ``HOST:PORT``; port 0 picks one).
        Returns (host, port, stop)."""
        host, port = parse_address(address)
        server, thread = start_http_server(port, addr=host, registry=self.registry)

        def stop() -> None:
            server.shutdown()
            server.server_close()
            thread.join(timeout=5)

        return host, server.server_address[1], stop


class _CountingPolicy:
    def __init__(self, inner: Any, on_start: Callable[[], None]) -> None:
        self._inner = inner
        self._on_start = on_start
        self.name = inner.name

    def start(self, env: Any, observation: Any, *, seed: int) -> Any:
        agent = self._inner.start(env, observation, seed=seed)
        self._on_start()
        return agent

    def describe(self) -> dict[str, Any]:
        return self._inner.describe()


def parse_address(address: str) -> tuple[str, int]:
    """``"9100"`` -> ("127.0.0.1", 9100); ``"0.0.0.0:9100"`` -> ("0.0.0.0", 9100); ValueError otherwise."""
    host, sep, port = str(address).rpartition(":")
    host = host.strip("[]") if sep else "127.0.0.1"
    if not port.isdigit() or not 0 <= int(port) <= 65535 or (sep and not host):
        raise ValueError(f"a metrics address is PORT or HOST:PORT (port 0-65535), not {address!r}")
    return host, int(port)


def serve_rollout(env_id: str, policy: Any, address: str, *, planned: int,
                  echo: Callable[[str], object] = print) -> tuple[Any, Callable[[Any], None], Callable[[], None]]:
    """For ``envhub rollout --metrics-port``: start serving, and return (the counting policy, the
    ``on_episode`` callback, stop). ValueError for a bad address, OSError when the port is taken."""
    metrics = RolloutMetrics(env_id, planned=planned)
    host, port, stop = metrics.serve(address)
    echo(f"metrics: http://{host}:{port}/metrics")
    return metrics.policy(policy), metrics.on_episode, stop

