"""Run directories: a rollout's (:class:`Run`) and a training run's (:class:`TrainingRun`).

A :class:`Run` holds episodes (``trajectories.jsonl``), their report and their identity
(``run.json``): ``envhub rollout --out DIR`` writes one; export, audit and report read one; a
training run keeps one per training step's rollouts and one per validation eval. :class:`Run` is the
one place that knows those file names, how a directory is claimed for one run's episodes, and how
its files are read and written (every write atomic; see :mod:`envhub.store`). :class:`TrainingRun`
is the one place that knows the layout of a training run directory (``envhub train``), for the
trainer that writes it and the report that reads it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from envhub.store import (
    CorruptRecordError,
    JsonlStore,
    jsonl_lines,
    parse_record,
    read_jsonl,
    write_json_atomic,
    write_text_atomic,
)
from envhub.types import TrajectoryRecord

TRAJECTORIES = "trajectories.jsonl"
REPORT = "report.json"
IDENTITY = "run.json"


class RunFileError(ValueError):
    """A run directory, or a file in it, cannot be read as what it should be; says which and why."""


def read_json_object(path: Path) -> dict[str, Any]:
    """The JSON object in the file at ``path``; RunFileError when it is unreadable or not an object."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise RunFileError(f"{path} is unreadable ({exc})") from None
    if not isinstance(data, dict):
        raise RunFileError(f"{path} is not a JSON object")
    return data


def _record(path: Path, n: int, raw: bytes) -> TrajectoryRecord:
    """Line ``n`` of ``path`` through Python's JSON parser, which reads a few lines pydantic's refuses
    (an escaped lone surrogate): the record, or CorruptRecordError saying what is wrong with the line."""
    try:
        return TrajectoryRecord.model_validate(parse_record(path, n, raw))
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "record"
        more = f", and {exc.error_count() - 1} more" if exc.error_count() > 1 else ""
        raise CorruptRecordError(path, n, f"not a trajectory record ({where}: {first['msg']}{more})") from None


class Run:
    """The run directory at ``path``. ``trajectories`` reads the records from another JSONL file
    instead (:meth:`at` takes either a directory or such a file)."""

    def __init__(self, path: str | Path, *, trajectories: str | Path | None = None) -> None:
        self.path = Path(path)
        self._trajectories = Path(trajectories) if trajectories is not None else None

    @classmethod
    def at(cls, path: str | Path) -> Run:
        """A run directory, or a trajectories JSONL file (then its directory is the run)."""
        path = Path(path)
        if path.is_dir():
            return cls(path)
        return cls(path.parent, trajectories=path)

    def __repr__(self) -> str:
        return f"Run({str(self.path)!r})"

    # ---- paths ------------------------------------------------------------------------------

    @property
    def trajectories_path(self) -> Path:
        return self._trajectories or self.path / TRAJECTORIES

    @property
    def report_path(self) -> Path:
        return self.path / REPORT

    @property
    def identity_path(self) -> Path:
        return self.path / IDENTITY

    def sub(self, *parts: str) -> Run:
        """The run directory ``path/parts...`` (e.g. ``run.sub("part-1")``)."""
        return Run(self.path.joinpath(*parts))

    def exists(self) -> bool:
        """Whether the run has a trajectories file."""
        return self.trajectories_path.is_file()

    def require(self) -> Run:
        """This run, or FileNotFoundError naming where its trajectories were looked for."""
        if not self.exists():
            raise FileNotFoundError(f"no trajectories found at {self.trajectories_path} (expected a run directory "
                                    "from `envhub rollout` or a trajectories.jsonl file)")
        return self

    # ---- writing ----------------------------------------------------------------------------

    def ensure_writable(self) -> None:
        """Make the directory (and its parents); PermissionError that names it when nothing can
        be written there."""
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            probe = self.path / ".envhub-write-test"
            probe.write_text("")
            probe.unlink()
        except OSError as exc:
            raise PermissionError(f"cannot write to output directory {self.path}: {exc.strerror or exc}") from None

    def claim(self, identity: dict[str, Any]) -> None:
        """Claim the directory for the run ``identity`` names (what its episodes are: env, split,
        policy, sampling, group size, ...): written to ``run.json`` the first time; later, a
        different identity is a ValueError naming what differs, since resuming with another
        policy, model, env or split would mix two runs under one report. (A ``run.json`` from
        before group sizes were recorded takes this run's.) OSError when it cannot be written."""
        identity = json.loads(json.dumps(identity, sort_keys=True, default=str))
        path = self.identity_path
        if path.exists():
            try:
                before = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError) as exc:
                raise ValueError(f"{path} is unreadable ({exc}); use another --out") from None
            if isinstance(before, dict) and "group_size" not in before:
                before["group_size"] = identity.get("group_size")
            if before != identity:
                before = before if isinstance(before, dict) else {}
                differ = sorted(k for k in {*before, *identity} if before.get(k) != identity.get(k))
                raise ValueError(f"{self.path} holds episodes of another run (different {', '.join(differ)}: "
                                 f"{before.get(differ[0])!r} there, {identity.get(differ[0])!r} now); "
                                 "resume with the same settings or use another --out")
            return
        write_json_atomic(path, identity)

    def store(self) -> JsonlStore:
        """The append-only store of the run's records, keyed by ``episode_id`` (open it with ``with``)."""
        return JsonlStore(self.trajectories_path)

    def write_report(self, report: dict[str, Any]) -> None:
        """Write ``report.json`` atomically (OSError when it cannot be written)."""
        write_json_atomic(self.report_path, report)

    # ---- reading ----------------------------------------------------------------------------

    def rows(self) -> Iterator[dict[str, Any]]:
        """Every complete record as a plain dict, in file order (a torn last line is left out;
        :class:`~envhub.store.CorruptRecordError` names a broken middle line). For raw JSON only:
        what reads episodes reads :meth:`records`."""
        return read_jsonl(self.trajectories_path)

    def records(self) -> Iterator[TrajectoryRecord]:
        """Every complete record as a :class:`TrajectoryRecord`, in file order (a torn last line is
        left out); :class:`~envhub.store.CorruptRecordError` names the file and line of one that is
        not JSON or not a trajectory record, and what is wrong with it, on one line."""
        path = self.trajectories_path
        for n, raw in jsonl_lines(path):
            try:
                yield TrajectoryRecord.model_validate_json(raw)
            except ValidationError:
                yield _record(path, n, raw)

    def read_json(self, name: str) -> dict[str, Any] | None:
        """The JSON object in ``path/name``; None when the file does not exist, RunFileError when
        it is unreadable or not an object."""
        path = self.path / name
        return read_json_object(path) if path.exists() else None

    def report(self) -> dict[str, Any] | None:
        """``report.json`` (see :meth:`read_json`)."""
        return self.read_json(REPORT)

    def identity(self) -> dict[str, Any] | None:
        """``run.json`` (see :meth:`read_json`)."""
        return self.read_json(IDENTITY)

    def group_size(self) -> int | None:
        """The group size the run recorded, from ``report.json`` or ``run.json`` (None without,
        or when neither can be read)."""
        for read in (self.report, self.identity):
            try:
                size = (read() or {}).get("group_size")
            except RunFileError:
                continue
            if isinstance(size, int) and not isinstance(size, bool) and size > 0:
                return size
        return None


class TrainingRun:
    """The training run directory at ``path`` (``envhub train``; :mod:`envhub.trainer`)::

        config.json             the trainer config; it names the run
        steps.jsonl             one line per GRPO step
        evals.jsonl             one line per validation eval (keyed by its tag)
        summary.json            the summary of a finished run
        sft.json                the SFT stage: examples, seconds, each step's loss and token entropy
        rollouts/step-000001/   each step's training episodes, a :class:`Run` (one
                                ``trajectories.rankR.jsonl`` per process when distributed)
        eval/TAG/               each validation eval's episodes, a :class:`Run`
        checkpoints/            checkpoints (``step-000004/``; see :mod:`envhub.trainer.checkpoint`)
        final/                  the final weights, a transformers model directory
        weights/                weights staged for the engine (:mod:`envhub.trainer.weight_sync`)
        tensorboard/            TensorBoard event files (``tensorboard: true``)
    """

    CONFIG, STEPS, EVALS, SUMMARY, SFT = "config.json", "steps.jsonl", "evals.jsonl", "summary.json", "sft.json"

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def __repr__(self) -> str:
        return f"TrainingRun({str(self.path)!r})"

    @staticmethod
    def step_name(step: int) -> str:
        """``step-000004``: the folder name of a step's rollouts and of its checkpoint."""
        return f"step-{step:06d}"

    @property
    def config_path(self) -> Path:
        return self.path / self.CONFIG

    @property
    def steps_path(self) -> Path:
        return self.path / self.STEPS

    @property
    def evals_path(self) -> Path:
        return self.path / self.EVALS

    @property
    def summary_path(self) -> Path:
        return self.path / self.SUMMARY

    @property
    def sft_path(self) -> Path:
        return self.path / self.SFT

    def sft(self) -> dict[str, Any] | None:
        """The SFT stage's record (``sft.json``: examples, seconds, the loss and entropy curve), if any
        (RunFileError when it is unreadable)."""
        return read_json_object(self.sft_path) if self.sft_path.exists() else None

    @property
    def rollouts_dir(self) -> Path:
        return self.path / "rollouts"

    @property
    def eval_dir(self) -> Path:
        return self.path / "eval"

    @property
    def checkpoints_dir(self) -> Path:
        return self.path / "checkpoints"

    @property
    def final_dir(self) -> Path:
        return self.path / "final"

    @property
    def best_dir(self) -> Path:
        """The weights of the best validation eval so far, as a model dir (once they are not the initial ones)."""
        return self.path / "best"

    @property
    def best_path(self) -> Path:
        """``best.json``: which eval ``best/`` is, and where its weights are."""
        return self.path / "best.json"

    def best(self) -> dict[str, Any] | None:
        """``best.json``, if any (RunFileError when it is unreadable)."""
        return read_json_object(self.best_path) if self.best_path.exists() else None

    @property
    def weights_dir(self) -> Path:
        return self.path / "weights"

    @property
    def tensorboard_dir(self) -> Path:
        return self.path / "tensorboard"

    def exists(self) -> bool:
        """Whether this is a training run directory (it has ``steps.jsonl`` and ``config.json``)."""
        return self.steps_path.is_file() and self.config_path.is_file()

    def step_dir(self, step: int) -> Path:
        """``rollouts/step-N/``: the training episodes of ``step``."""
        return self.rollouts_dir / self.step_name(step)

    def step_rollouts(self, step: int, *, rank: int | None = None) -> Run:
        """The episodes of ``step`` as a :class:`Run`; with ``rank``, that process's own file of them."""
        folder = self.step_dir(step)
        return Run(folder) if rank is None else Run(folder, trajectories=folder / f"trajectories.rank{rank}.jsonl")

    def eval_run(self, tag: str) -> Run:
        """``eval/TAG/``: the episodes of the validation eval ``tag``."""
        return Run(self.eval_dir / tag)

    def checkpoint_dir(self, step: int) -> Path:
        """``checkpoints/step-N/``: the checkpoint of ``step``."""
        return self.checkpoints_dir / self.step_name(step)

    def evals(self) -> list[dict[str, Any]]:
        """The rows of ``evals.jsonl`` (none when there is no such file)."""
        return list(read_jsonl(self.evals_path)) if self.evals_path.exists() else []

    def steps(self) -> list[dict[str, Any]]:
        """The rows of ``steps.jsonl`` (none when there is no such file)."""
        return list(read_jsonl(self.steps_path)) if self.steps_path.exists() else []

    def keep_steps_upto(self, step: int) -> list[dict[str, Any]]:
        """Drop the lines of ``steps.jsonl`` after ``step`` (a resumed run trains them again); returns them."""
        rows = self.steps()
        write_text_atomic(self.steps_path, "".join(json.dumps(r) + "\n" for r in rows if r["step"] <= step))
        return [r for r in rows if r["step"] > step]


__all__ = ["IDENTITY", "REPORT", "TRAJECTORIES", "Run", "RunFileError", "TrainingRun", "read_json_object"]
