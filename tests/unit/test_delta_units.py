"""Pure parts of the Delta log writer: config, refusals, paths, schema rules."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
from deltalake import Schema as DeltaSchema
from pyiceberg.schema import Schema
from pyiceberg.types import IntegerType, LongType, NestedField, StringType, TimeType

from tableflow_core.config.errors import ConfigError
from tableflow_core.config.loader import load_project
from tableflow_core.delta import DeltaSyncError, delta_refusal
from tableflow_core.delta.files import relative_path
from tableflow_core.delta.schema import (
    added_fields,
    delta_schema,
    history_problems,
    unsupported_columns,
)
from tests.plan_project import write_project


def _project(tmp_path: Path, tables: list[dict[str, object]]) -> Path:
    return write_project(
        tmp_path,
        bootstrap="127.0.0.1:1",
        registry_url="http://127.0.0.1:1",
        catalog_uri="http://127.0.0.1:1",
        credential="a:b",
        namespace="shop",
        tables=tables,
    )


def test_formats_default_to_iceberg_and_accept_delta(tmp_path: Path) -> None:
    root = _project(
        tmp_path,
        [
            {"name": "a", "topic": "a"},
            {"name": "b", "topic": "b", "formats": ["iceberg", "delta"]},
        ],
    )
    project = load_project(root, None, {})
    assert project.table("a").formats == ("iceberg",)
    assert project.table("b").formats == ("iceberg", "delta")


def test_formats_without_iceberg_are_rejected_with_the_line(tmp_path: Path) -> None:
    root = _project(tmp_path, [{"name": "a", "topic": "a", "formats": ["delta"]}])
    with pytest.raises(ConfigError) as info:
        load_project(root, None, {})
    text = info.value.render()
    assert "formats must include iceberg" in text and "tables.yml:" in text


def test_upsert_tables_are_refused_delta_with_a_reason() -> None:
    assert delta_refusal(SimpleNamespace(name="orders", mode="append")) is None
    reason = delta_refusal(SimpleNamespace(name="orders", mode="upsert"))
    assert reason is not None and "'orders'" in reason and "deletion vectors" in reason


@pytest.mark.parametrize(
    ("location", "path", "expected"),
    [
        ("file:///w/ns/t", "file:/w/ns/t/data/a.parquet", "data/a.parquet"),
        ("/w/ns/t", "file:///w/ns/t/data/x=1/b.parquet", "data/x=1/b.parquet"),
        ("s3://bucket/ns/t/", "s3://bucket/ns/t/data/c.parquet", "data/c.parquet"),
    ],
)
def test_relative_paths(location: str, path: str, expected: str) -> None:
    assert relative_path(location, path) == expected


def test_files_outside_the_location_are_refused() -> None:
    with pytest.raises(DeltaSyncError, match="outside the table location"):
        relative_path("file:///w/ns/t", "file:///elsewhere/a.parquet")
    with pytest.raises(DeltaSyncError):
        relative_path("file:///w/ns/t", "file:///w/ns/t2/a.parquet")


def test_history_rules() -> None:
    v1 = Schema(NestedField(1, "id", IntegerType()), NestedField(2, "name", StringType()))
    added = Schema(*v1.fields, NestedField(3, "note", StringType()))
    assert history_problems([v1], added) == []
    renamed = Schema(NestedField(1, "id", IntegerType()), NestedField(2, "label", StringType()))
    assert history_problems([v1], renamed) == ["column 'label' was renamed from 'name'"]
    reused = Schema(NestedField(1, "id", IntegerType()), NestedField(3, "name", StringType()))
    assert history_problems([v1], reused) == ["column 'name' was dropped and added again"]
    widened = Schema(NestedField(1, "id", LongType()), NestedField(2, "name", StringType()))
    assert history_problems([v1], widened) == ["column 'id' changed type from int to long"]
    assert unsupported_columns(Schema(NestedField(1, "t", TimeType()))) == [
        "t: time (Delta has no time type)"
    ]


def test_only_new_nullable_columns_are_followed() -> None:
    v1 = delta_schema(Schema(NestedField(1, "id", LongType()), NestedField(2, "s", StringType())))
    v2 = delta_schema(
        Schema(
            NestedField(1, "id", LongType()),
            NestedField(2, "s", StringType()),
            NestedField(3, "n", LongType()),
        )
    )
    assert [f.name for f in added_fields(v1, v2)] == ["n"]
    assert added_fields(v2, v2) == []
    dropped = delta_schema(Schema(NestedField(1, "id", LongType())))
    with pytest.raises(DeltaSyncError, match="'s' was dropped"):
        added_fields(v1, dropped)
    required = delta_schema(
        Schema(
            *[NestedField(1, "id", LongType()), NestedField(2, "s", StringType(), required=True)]
        )
    )
    with pytest.raises(DeltaSyncError, match="'s' changed"):
        added_fields(v1, required)
    assert isinstance(v1, DeltaSchema)


def test_stats_carry_exact_bounds_from_iceberg_metrics() -> None:
    import json

    from pyiceberg.conversions import to_bytes
    from pyiceberg.types import DateType

    from tableflow_core.delta.files import file_stats

    schema = Schema(
        NestedField(1, "id", LongType()),
        NestedField(2, "name", StringType()),
        NestedField(3, "day", DateType()),
    )
    data_file = SimpleNamespace(
        record_count=3,
        null_value_counts={1: 0, 2: 1},
        lower_bounds={1: to_bytes(LongType(), 5), 2: b"a", 3: to_bytes(DateType(), 19723)},
        upper_bounds={1: to_bytes(LongType(), 9), 2: b"z", 3: to_bytes(DateType(), 19724)},
    )
    assert json.loads(file_stats(data_file, schema)) == {
        "numRecords": 3,
        "nullCount": {"id": 0, "name": 1},
        # strings may be truncated bounds in Iceberg: not written
        "minValues": {"id": 5, "day": "2024-01-01"},
        "maxValues": {"id": 9, "day": "2024-01-02"},
    }
