"""docs/grafana/envhub.json queries only series that envhub exposes, by labels those series carry."""

import json
import re
from pathlib import Path

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from envhub.rollout.metrics import RolloutMetrics
from envhub.server.metrics import Metrics
from envhub.trainer.async_metrics import ASYNC_KEYS, ASYNC_METRICS

DASHBOARD = Path(__file__).resolve().parents[2] / "docs" / "grafana" / "envhub.json"


def _trainer_exposition() -> str:
    """The trainer's series (served by ``metrics_port``), as its telemetry exposes them after a step of
    an async run (whose records add the async series)."""
    import tempfile

    from envhub.trainer.telemetry import Telemetry

    with tempfile.TemporaryDirectory() as tmp:
        telemetry = Telemetry(env_id="envhub/Computation-v0", run_dir=Path(tmp), total_steps=1, metrics_port=0,
                              tensorboard=False, enabled=True, log=lambda line: None)
        try:
            telemetry.on_step({"step": 1, "reward_mean": 0.5, "strict_success": 0.5, "tokens_per_second": 10.0,
                               "time": {"rollout_s": 1.0}, **dict.fromkeys(ASYNC_KEYS, 1.0)})
            return generate_latest(telemetry.rollout.registry).decode()
        finally:
            telemetry.close()


def _exposed() -> dict[str, set[str]]:
    """Every sample name envhub exposes -> its label names (one of each kind of update made)."""
    server = Metrics("envhub/Computation-v0")
    server.request("step", "2xx", 0.01)
    server.episode("success")
    server.session_closed("idle_expired")
    server.capacity_rejected("reset")
    server.set_sessions(1, 1, 4)
    texts = [server.render(), generate_latest(RolloutMetrics("envhub/Computation-v0").registry).decode(),
             _trainer_exposition()]
    out: dict[str, set[str]] = {}
    for text in texts:
        for family in text_string_to_metric_families(text):
            out.setdefault(family.name, set())
            for sample in family.samples:
                out.setdefault(sample.name, set()).update(sample.labels)
    # The pool collector's families have no sample until a pool exists; their one label is ``backend``.
    for line in texts[1].splitlines():
        if line.startswith("# TYPE envhub_sandbox_"):
            name, kind = line.split()[2:4]
            out[name + ("_total" if kind == "counter" and not name.endswith("_total") else "")] = {"backend"}
    return out


def test_dashboard_queries_exposed_series_and_labels():
    dash = json.loads(DASHBOARD.read_text())
    exposed = _exposed()
    exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
    assert len(exprs) >= 15
    used = set()
    for expr in exprs:
        for name, selector in re.findall(r"(envhub_[a-z_]+)(\{[^}]*\})?", expr):
            assert name in exposed, f"{name} in {expr!r} is not exposed"
            used.add(name)
            for label in re.findall(r"([a-z_]+)\s*=~?", selector or ""):
                assert label in exposed[name] or exposed[name] == set(), (name, label)
        for group in re.findall(r"by \(([^)]*)\)", expr):
            assert {g.strip() for g in group.split(",")} <= {"env", "outcome", "outcome_class", "route", "backend",
                                                             "le", "phase"}, expr
    for required in ("envhub_rollout_episodes_total", "envhub_rollout_strict_success_ratio",
                     "envhub_rollout_tokens_per_second", "envhub_rollout_episodes_in_flight",
                     "envhub_sandbox_pool_size", "envhub_sandbox_pool_replaced_total", "envhub_requests_total",
                     "envhub_train_reward_mean", "envhub_train_step_seconds", "envhub_train_sample_staleness",
                     *(m.prometheus for m in ASYNC_METRICS)):
        assert required in used, required
