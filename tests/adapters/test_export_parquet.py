"""The Parquet export: the documented schema, loaded by Hugging Face ``datasets`` and rebuilt exactly."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from token_runs import shared_token_run

from envhub.adapters.export import export_run, load_records
from envhub.adapters.export.parquet import PARQUET_SCHEMA_NAME, arrow_schema, read_parquet

DOC = Path(__file__).resolve().parents[2] / "docs" / "trajectory-schema.md"


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    run = shared_token_run(tmp_path_factory.getbasetemp())
    out = tmp_path_factory.mktemp("parquet")
    export_run(run, "parquet", out, include_infra=True)
    return run, out / "trajectories.parquet"


def test_datasets_loads_it(exported: tuple[Path, Path]) -> None:
    datasets = pytest.importorskip("datasets")
    run, path = exported
    ds = datasets.load_dataset("parquet", data_files=str(path), split="train")
    records = load_records(run)
    assert ds.num_rows == len(records)
    assert set(ds.column_names) == set(arrow_schema().names)
    assert str(ds.features["response_ids"].feature.dtype) == "int64"
    assert str(ds.features["response_logprobs"].feature.dtype) == "float64"
    by_id = {r.episode_id: r for r in records}
    for row in ds:
        rec = by_id[row["episode_id"]]
        assert row["episode_id"] == rec.episode_id and row["outcome"] == rec.outcome.value
        assert row["prompt_ids"] == rec.prompt_ids and row["response_ids"] == rec.response_ids
        assert row["response_mask"] == rec.response_mask
        assert row["response_logprobs"] == rec.response_logprobs
        assert row["reward"] == rec.reward
        assert json.loads(row["messages_json"])[0]["role"] == "system"


def test_records_rebuild_exactly(exported: tuple[Path, Path]) -> None:
    run, path = exported
    def by_id(records: list) -> list:
        return sorted(records, key=lambda r: r.episode_id)

    assert by_id(read_parquet(path)) == by_id(load_records(run))  # the order is grouped, not the file's


def test_schema_is_tagged_and_documented(exported: tuple[Path, Path]) -> None:
    import pyarrow.parquet as pq

    _, path = exported
    schema = pq.read_schema(path)
    assert schema.metadata[b"envhub.schema"] == PARQUET_SCHEMA_NAME.encode()
    doc = DOC.read_text()
    for name in schema.names:  # every column is documented
        assert f"`{name}`" in doc, name


def test_foreign_parquet_is_rejected(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"a": [1]}), tmp_path / "x.parquet")
    with pytest.raises(ValueError, match="not an envhub"):
        read_parquet(tmp_path / "x.parquet")
