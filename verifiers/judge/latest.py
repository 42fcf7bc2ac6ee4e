"""An env's latest judge calibration, kept where ``envhub list`` finds it without loading anything
heavy: ``$ENVHUB_CACHE/judge-calibrations/<env id>.json`` (``/`` in the id as ``__``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from envhub.package_envs import cache_root
from envhub.store import write_json_atomic


def calibration_path(env_id: str) -> Path:
    """Where the latest calibration of ``env_id``'s judge is kept: ``$ENVHUB_CACHE/judge-calibrations/``."""
    return cache_root() / "judge-calibrations" / (env_id.replace("/", "__") + ".json")


def store_calibration(env_id: str, report: dict[str, Any]) -> Path:
    """Keep ``report`` as ``env_id``'s latest calibration (atomically); returns the path."""
    path = calibration_path(env_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(path, {"env_id": env_id, **report})
    return path


def latest_calibration(env_id: str) -> dict[str, Any] | None:
    """The stored calibration of ``env_id``'s judge, or None (none, or unreadable)."""
    path = calibration_path(env_id)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def summary(report: dict[str, Any]) -> str:
    """One line of a stored calibration: kappa with its interval, cases, date and judge."""
    kappa = report.get("kappa") or {}
    value = kappa.get("kappa")
    shown = "undefined" if value is None else f"{value:+.3f}"
    if value is not None and kappa.get("low") is not None:
        shown += f" [{kappa['low']:+.3f}, {kappa['high']:+.3f}]"
    pin = report.get("judge") or {}
    weights = f" (weights {str(pin['weights_sha256'])[:12]})" if pin.get("weights_sha256") else ""
    return (f"judge kappa {shown} on {report.get('cases', '?')} cases, {str(report.get('date', '?'))[:10]}, "
            f"{pin.get('model', '?')}{weights}")


__all__ = ["calibration_path", "latest_calibration", "store_calibration", "summary"]
