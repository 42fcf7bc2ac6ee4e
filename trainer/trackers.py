"""Experiment trackers of a training run (``loggers:`` in the trainer config; rank 0 only).

Each tracker records the same things: the config (once, at the start), every numeric entry of a
step's record (``train/...``, at the step), each eval's numbers (``eval/...``, at the step it ran
after) and the run directory's absolute path. Where each writes, unless its own environment
variables say otherwise:

* ``tensorboard``: event files in ``RUN/tensorboard`` (the config and the run dir as text);
* ``wandb``: a W&B run in project ``$WANDB_PROJECT`` (default ``envhub``), files under ``$WANDB_DIR``
  (default ``RUN``); online or offline as wandb is set up (``WANDB_MODE=offline`` logs without an
  account or network); the run dir in the notes and the config (``envhub_run_dir``);
* ``mlflow``: a run of experiment ``$MLFLOW_EXPERIMENT_NAME`` (default ``envhub``) at
  ``$MLFLOW_TRACKING_URI``, by default a local SQLite store ``RUN/mlflow.db`` (artifacts in
  ``RUN/mlflow-artifacts``); the config as params and as the artifact ``config.json``, the run dir as
  the tag ``envhub.run_dir``;
* ``trackio``: a run of project ``envhub`` in trackio's local store (``$TRACKIO_DIR``, by default
  trackio's own); the run dir in its config (``envhub_run_dir``).

Every process (a start, each resume) is one tracker run named after the run dir. A tracker that
raises while the run goes on costs one warning line naming it; it is skipped from then on.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import re
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, get_args

from envhub.trainer.config import LoggerName

if TYPE_CHECKING:
    from envhub.trainer.config import TrainConfig

#: the config key (wandb, trackio) and tag (mlflow) naming the absolute run directory
RUN_DIR_KEY = "envhub_run_dir"
MLFLOW_RUN_DIR_TAG = "envhub.run_dir"
PROJECT = "envhub"
NAMES: tuple[str, ...] = get_args(LoggerName)
#: the modules each tracker needs (mlflow's default store is SQLite, through sqlalchemy and alembic)
_MODULES = {"tensorboard": ("tensorboard",), "wandb": ("wandb",), "mlflow": ("mlflow", "sqlalchemy", "alembic"),
            "trackio": ("trackio",)}


class Tracker(Protocol):
    """One tracker: ``scalars`` are ``train/...`` or ``eval/...`` numbers; any method may raise
    (:class:`Trackers` reports it and drops the tracker)."""

    name: str

    def log_config(self, config: dict[str, Any]) -> None: ...

    def log_step(self, step: int, scalars: dict[str, float]) -> None: ...

    def log_eval(self, step: int, tag: str, scalars: dict[str, float]) -> None: ...

    def close(self) -> None: ...


def tracker_names(config: TrainConfig) -> list[str]:
    """The trackers ``config`` asks for, in order, once each: ``loggers``, plus tensorboard with
    ``tensorboard: true``."""
    return list(dict.fromkeys([*config.loggers, *(["tensorboard"] if config.tensorboard else [])]))


def missing_packages(names: Iterable[str]) -> list[str]:
    """One line per tracker of ``names`` whose package is not installed, naming its pip extra."""
    return [f"loggers: {name} needs the {name} package (pip install 'envhub[{name}]')" for name in names
            if any(importlib.util.find_spec(module) is None for module in _MODULES[name])]


class TensorBoardTracker:
    name = "tensorboard"

    def __init__(self, run_dir: Path) -> None:
        from torch.utils.tensorboard import SummaryWriter

        from envhub.run_dir import TrainingRun

        self.run_dir = run_dir
        self.writer = SummaryWriter(log_dir=str(TrainingRun(run_dir).tensorboard_dir))

    def log_config(self, config: dict[str, Any]) -> None:
        # the text plugin renders markdown: an indented block keeps the JSON as it is
        self.writer.add_text("config", "    " + json.dumps(config, indent=2).replace("\n", "\n    "))
        self.writer.add_text("run_dir", str(self.run_dir))
        self.writer.flush()

    def log_step(self, step: int, scalars: dict[str, float]) -> None:
        self._write(step, scalars)

    def log_eval(self, step: int, tag: str, scalars: dict[str, float]) -> None:
        self._write(step, scalars)

    def _write(self, step: int, scalars: dict[str, float]) -> None:
        for key, value in scalars.items():
            self.writer.add_scalar(key, value, global_step=step)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


class _RunLogTracker:
    """A tracker whose run object logs rows at a step and finishes (W&B's API; trackio mirrors it)."""

    run: Any

    def log_step(self, step: int, scalars: dict[str, float]) -> None:
        self.run.log(scalars, step=step)

    def log_eval(self, step: int, tag: str, scalars: dict[str, float]) -> None:
        self.run.log(scalars, step=step)

    def close(self) -> None:
        self.run.finish()


class WandbTracker(_RunLogTracker):
    name = "wandb"

    def __init__(self, run_dir: Path) -> None:
        import wandb

        self.run = wandb.init(project=os.environ.get("WANDB_PROJECT") or PROJECT, name=run_dir.name,
                              dir=os.environ.get("WANDB_DIR") or str(run_dir),
                              notes=f"envhub run dir: {run_dir}", config={RUN_DIR_KEY: str(run_dir)})

    def log_config(self, config: dict[str, Any]) -> None:
        self.run.config.update(config, allow_val_change=True)



class MLflowTracker:
    name = "mlflow"

    def __init__(self, run_dir: Path) -> None:
        from mlflow.tracking import MlflowClient

        uri, artifacts = os.environ.get("MLFLOW_TRACKING_URI"), None
        if not uri:
            uri, artifacts = f"sqlite:///{run_dir / 'mlflow.db'}", (run_dir / "mlflow-artifacts").as_uri()
        self.client = MlflowClient(tracking_uri=uri)
        name = os.environ.get("MLFLOW_EXPERIMENT_NAME") or PROJECT
        experiment = self.client.get_experiment_by_name(name)
        experiment_id = (experiment.experiment_id if experiment is not None
                         else self.client.create_experiment(name, artifact_location=artifacts))
        tags = {MLFLOW_RUN_DIR_TAG: str(run_dir), "mlflow.note.content": f"envhub run dir: {run_dir}"}
        self.run_id = self.client.create_run(experiment_id, run_name=run_dir.name, tags=tags).info.run_id

    def log_config(self, config: dict[str, Any]) -> None:
        from mlflow.entities import Param

        # MLflow's limits: names of letters, digits and _-. /; values of up to 6000 characters
        params = [Param(re.sub(r"[^\w\-. /]", "_", key)[:250], str(value)[:6000])
                  for key, value in _flatten(config).items()]
        for start in range(0, len(params), 100):  # MLflow's limit of params per batch
            self.client.log_batch(self.run_id, params=params[start:start + 100])
        self.client.log_dict(self.run_id, config, "config.json")

    def log_step(self, step: int, scalars: dict[str, float]) -> None:
        self._write(step, scalars)

    def log_eval(self, step: int, tag: str, scalars: dict[str, float]) -> None:
        self._write(step, scalars)

    def _write(self, step: int, scalars: dict[str, float]) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        metrics = [Metric(key, value, now, step) for key, value in scalars.items()]
        for start in range(0, len(metrics), 1000):  # MLflow's limit of metrics per batch
            self.client.log_batch(self.run_id, metrics=metrics[start:start + 1000])

    def close(self) -> None:
        self.client.set_terminated(self.run_id)


class TrackioTracker(_RunLogTracker):
    name = "trackio"

    def __init__(self, run_dir: Path) -> None:
        import trackio

        self.run = trackio.init(project=PROJECT, name=run_dir.name, config={RUN_DIR_KEY: str(run_dir)}, embed=False)

    def log_config(self, config: dict[str, Any]) -> None:
        self.run.config.update(config)  # sent with the first logged row



TRACKERS: dict[str, Callable[[Path], Tracker]] = {
    "tensorboard": TensorBoardTracker, "wandb": WandbTracker, "mlflow": MLflowTracker, "trackio": TrackioTracker}


class Trackers:
    """The run's trackers as one: each call goes to every tracker still working; a tracker that raises
    is reported once through ``log`` and dropped."""

    def __init__(self, trackers: Sequence[Tracker], log: Callable[[str], None]) -> None:
        self.trackers, self.log = list(trackers), log

    @classmethod
    def open(cls, names: Sequence[str], run_dir: Path, log: Callable[[str], None]) -> Trackers:
        """The trackers ``names`` writing about ``run_dir``. ValueError: a package is missing (the message
        names its extra) or a tracker cannot start (the ones started are closed again)."""
        unknown = [n for n in names if n not in TRACKERS]
        if unknown:
            raise ValueError(f"loggers: unknown tracker(s) {unknown}; valid: {', '.join(NAMES)}")
        missing = missing_packages(names)
        if missing:
            raise ValueError("; ".join(missing))
        run_dir, opened = Path(run_dir).resolve(), []
        for name in names:
            try:
                opened.append(TRACKERS[name](run_dir))
            except Exception as exc:
                cls(opened, log).close()
                raise ValueError(f"loggers: {name} could not start: {type(exc).__name__}: {exc}") from exc
        if opened:
            log(f"trackers: {', '.join(t.name for t in opened)}")
        return cls(opened, log)

    def log_config(self, config: dict[str, Any]) -> None:
        self._each("log_config", config)

    def log_step(self, step: int, scalars: dict[str, float]) -> None:
        self._each("log_step", step, scalars)

    def log_eval(self, step: int, tag: str, scalars: dict[str, float]) -> None:
        self._each("log_eval", step, tag, scalars)

    def close(self) -> None:
        self._each("close")
        self.trackers = []

    def _each(self, method: str, *args: Any) -> None:
        for tracker in list(self.trackers):
            try:
                getattr(tracker, method)(*args)
            except Exception as exc:
                self.trackers.remove(tracker)
                self.log(f"warning: the {tracker.name} tracker failed in {method} ({type(exc).__name__}: {exc}); "
                         "the run goes on without it")
                if method != "close":
                    with contextlib.suppress(Exception):  # already reported as failed
                        tracker.close()


def eval_scalars(result: dict[str, Any]) -> dict[str, float]:
    """An eval's line of ``evals.jsonl`` as ``eval/...`` numbers (strict success and its 95 % interval,
    reward mean, episodes, successes, seconds)."""
    out = {f"eval/{key}": float(result[key]) for key in ("strict_success", "reward_mean", "episodes", "successes",
                                                          "seconds")
           if isinstance(result.get(key), (int, float)) and not isinstance(result.get(key), bool)}
    interval = result.get("interval")
    if interval:
        out["eval/interval_low"], out["eval/interval_high"] = float(interval[0]), float(interval[1])
    return out


def _flatten(config: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in config.items():
        if isinstance(value, dict) and value:
            flat.update(_flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat
