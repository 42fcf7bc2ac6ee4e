"""Exporters: a run's trajectories in the formats external trainers read.

``export_run(DIR, format, out)`` reads ``DIR/trajectories.jsonl``, drops infra-failure
episodes unless asked not to (they are not the model's doing), and writes the format's files
plus ``manifest.json`` into ``out``. Every format writes groups whole and contiguous, each in
sample order (the file holds episodes in completion order, resumed ones at the end); the groups
of an unfinished run that are not complete yet are left out and counted. slime and Miles keep
infra failures in place (see :mod:`.slime`). Every format has a reader that maps its files back to
envhub's token view, which is what the round-trip tests compare. Formats and their files:

=========  ==========================================================================
verl       ``agent_loop_outputs.jsonl`` (AgentLoopOutput), ``tasks.parquet``, ``agent_loop.yaml``
slime      ``samples.jsonl`` (``Sample.to_dict()`` form)
miles      ``samples.jsonl`` (Miles keeps slime's ``Sample``)
trl        ``trl.parquet`` (``prompt_ids``, ``completion_ids``, ``logprobs``, ``env_mask``)
skyrl      ``generator_output.json`` (GeneratorOutput), ``trajectories_meta.jsonl``, ``dataset.parquet``
parquet    ``trajectories.parquet`` (every field; docs/trajectory-schema.md)
atif       ``<episode_id>.json`` per episode: ATIF v1.8, Harbor's trajectory format (:mod:`.atif`)
=========  ==========================================================================
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from envhub.run_dir import Run
from envhub.store import write_json_atomic
from envhub.types import TrajectoryRecord

from .atif import export_atif, read_atif
from .common import ROUND_TRIP_FIELDS, ExportResult, load_records, select
from .parquet import read_parquet, write_parquet
from .skyrl import export_skyrl, read_skyrl
from .slime import export_samples, read_samples
from .trl import export_trl, read_trl
from .verl import export_verl, read_verl

Writer = Callable[[Sequence[TrajectoryRecord], Path], list[Path]]
Reader = Callable[[Path], list[dict[str, Any]]]


def _export_parquet(records: Sequence[TrajectoryRecord], out: Path) -> list[Path]:
    return [write_parquet(records, out / "trajectories.parquet")]


def _read_parquet(out: Path) -> list[dict[str, Any]]:
    return [r.model_dump(mode="json", include=set(ROUND_TRIP_FIELDS))
            for r in read_parquet(out / "trajectories.parquet")]


class Format(NamedTuple):
    writer: Writer
    reader: Reader
    needs_tokens: bool
    #: infra failures stay in their groups (masked out of the loss) whatever --include-infra says:
    #: the trainer finds a group by position, so dropping one would shift every later group
    infra_in_place: bool = False


FORMATS: dict[str, Format] = {
    "verl": Format(export_verl, read_verl, True),
    "slime": Format(export_samples, read_samples, True, infra_in_place=True),
    "miles": Format(export_samples, read_samples, True, infra_in_place=True),
    "trl": Format(export_trl, read_trl, True),
    "skyrl": Format(export_skyrl, read_skyrl, True),
    "parquet": Format(_export_parquet, _read_parquet, False),
    "atif": Format(export_atif, read_atif, False),
}


def export_run(run_dir: str | Path, format: str, out: str | Path | None = None, *,
               include_infra: bool = False, group_size: int | None = None) -> ExportResult:
    """Export the run in ``run_dir`` as ``format`` into the folder ``out``.

    ``out`` defaults to ``run_dir/export-<format>``. Token formats skip episodes recorded
    without tokens (scripted policies) and say how many. ``group_size`` (default: the run's, from
    its ``report.json`` or ``run.json``, else the largest group seen) decides which groups are
    whole; a run interrupted before its first report needs it to tell a group of one from an
    unfinished one.
    """
    if format not in FORMATS:
        raise ValueError(f"unknown export format {format!r}; choose one of {', '.join(FORMATS)}")
    fmt = FORMATS[format]
    run = Run.at(run_dir)
    records = load_records(run_dir)
    selection = select(records, include_infra=include_infra, require_tokens=fmt.needs_tokens,
                       infra_in_place=fmt.infra_in_place, group_size=group_size or run.group_size())
    target = Path(out) if out is not None else run.path / f"export-{format}"
    target.mkdir(parents=True, exist_ok=True)
    files = fmt.writer(selection.records, target)
    result = ExportResult(format=format, out=target, files=files, exported=len(selection.records),
                          excluded_infra=selection.excluded_infra,
                          skipped_no_tokens=selection.skipped_no_tokens,
                          incomplete_groups=selection.incomplete_groups, group_size=selection.group_size)
    write_json_atomic(target / "manifest.json", {**result.manifest(), "include_infra": include_infra,
                                                 "source": str(run_dir)})
    result.files.append(target / "manifest.json")
    return result


def read_export(out: str | Path, format: str) -> list[dict[str, Any]]:
    """An export read back as envhub token views (``ROUND_TRIP_FIELDS``), in export order."""
    return FORMATS[format][1](Path(out))


__all__ = ["FORMATS", "ROUND_TRIP_FIELDS", "ExportResult", "Format", "export_run", "load_records",
           "read_export", "select"]

