"""Exporters: a run's trajectories in the formats external trainers read.

``export_run(DIR, format, out)`` reads ``DIR/trajectories.jsonl``, drops infra-failure
episodes unless asked not to (they are not the model's doing), and writes the format's files
plus ``manifest.json`` into ``out``. Every format has a reader that maps its files back to
envhub's token view, which is what the round-trip tests compare. Formats and their files:

=========  ==========================================================================
verl       ``agent_loop_outputs.jsonl`` (AgentLoopOutput), ``tasks.parquet``, ``agent_loop.yaml``
slime      ``samples.jsonl`` (``Sample.to_dict()`` form)
miles      ``samples.jsonl`` (Miles keeps slime's ``Sample``)
trl        ``trl.parquet`` (``prompt_ids``, ``completion_ids``, ``logprobs``, ``env_mask``)
skyrl      ``generator_output.json`` (GeneratorOutput), ``trajectories_meta.jsonl``, ``dataset.parquet``
parquet    ``trajectories.parquet`` (every field; docs/trajectory-schema.md)
=========  ==========================================================================
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from envhub.store import write_json_atomic
from envhub.types import TrajectoryRecord

from .cli import export_command
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


#: format -> (writer, reader, needs a token view)
FORMATS: dict[str, tuple[Writer, Reader, bool]] = {
    "verl": (export_verl, read_verl, True),
    "slime": (export_samples, read_samples, True),
    "miles": (export_samples, read_samples, True),
    "trl": (export_trl, read_trl, True),
    "skyrl": (export_skyrl, read_skyrl, True),
    "parquet": (_export_parquet, _read_parquet, False),
}


def export_run(run_dir: str | Path, format: str, out: str | Path | None = None, *,
               include_infra: bool = False) -> ExportResult:
    """Export the run in ``run_dir`` as ``format`` into the folder ``out``.

    ``out`` defaults to ``run_dir/export-<format>``. Token formats skip episodes recorded
    without tokens (scripted policies) and say how many; ``parquet`` keeps every episode.
    """
    if format not in FORMATS:
        raise ValueError(f"unknown export format {format!r}; choose one of {', '.join(FORMATS)}")
    writer, _, needs_tokens = FORMATS[format]
    records = load_records(run_dir)
    selection = select(records, include_infra=include_infra, require_tokens=needs_tokens)
    base = Path(run_dir) if Path(run_dir).is_dir() else Path(run_dir).parent
    target = Path(out) if out is not None else base / f"export-{format}"
    target.mkdir(parents=True, exist_ok=True)
    files = writer(selection.records, target)
    result = ExportResult(format=format, out=target, files=files, exported=len(selection.records),
                          excluded_infra=selection.excluded_infra,
                          skipped_no_tokens=selection.skipped_no_tokens)
    write_json_atomic(target / "manifest.json", {**result.manifest(), "include_infra": include_infra,
                                                 "source": str(run_dir)})
    result.files.append(target / "manifest.json")
    return result


def read_export(out: str | Path, format: str) -> list[dict[str, Any]]:
    """An export read back as envhub token views (``ROUND_TRIP_FIELDS``), in export order."""
    return FORMATS[format][1](Path(out))


__all__ = ["FORMATS", "ROUND_TRIP_FIELDS", "ExportResult", "export_command", "export_run", "load_records",
           "read_export", "select"]

