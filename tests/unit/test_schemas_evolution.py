"""diff_schemas / iceberg_schema_for: safe changes, widening and incompatible changes."""

from __future__ import annotations

import pyarrow as pa
from pyiceberg.schema import Schema
from pyiceberg.types import IntegerType, NestedField, StringType, StructType

from tableflow_core.schemas.evolution import SchemaChange, diff_schemas, iceberg_schema_for

BASE = pa.schema(
    [
        ("id", pa.int32()),
        ("price", pa.float32()),
        ("amount", pa.decimal128(10, 2)),
        ("name", pa.string()),
        ("address", pa.struct([("city", pa.string())])),
        ("items", pa.list_(pa.struct([("sku", pa.string())]))),
    ]
)


def test_identical_schema_has_no_changes() -> None:
    assert diff_schemas(iceberg_schema_for(BASE), BASE).is_empty


def test_fresh_ids_and_optional_columns() -> None:
    schema = iceberg_schema_for(BASE)
    assert [f.field_id for f in schema.fields] == [1, 2, 3, 4, 5, 6]
    assert all(not f.required for f in schema.fields)


def test_safe_changes_are_classified() -> None:
    desired = pa.schema(
        [
            ("id", pa.int64()),
            ("price", pa.float64()),
            ("amount", pa.decimal128(12, 2)),
            # "name" is gone from the new schema: kept in the table (shown once)
            ("address", pa.struct([("city", pa.string()), ("zip", pa.string())])),
            ("items", pa.list_(pa.struct([("sku", pa.string()), ("qty", pa.int32())]))),
            ("note", pa.string()),
        ]
    )
    diff = diff_schemas(iceberg_schema_for(BASE), desired)
    assert diff.incompatible == ()
    assert set(diff.changes) == {
        SchemaChange(kind="widen_type", path="id", detail="int -> long"),
        SchemaChange(kind="widen_type", path="price", detail="float -> double"),
        SchemaChange(kind="widen_type", path="amount", detail="decimal(10, 2) -> decimal(12, 2)"),
        SchemaChange(kind="add_column", path="address.zip", detail="string"),
        SchemaChange(kind="add_column", path="items.element.qty", detail="int"),
        SchemaChange(kind="add_column", path="note", detail="string"),
        SchemaChange(
            kind="keep_column",
            path="name",
            detail="not in the topic's schema any more: kept (optional); new rows get null",
        ),
    }


def test_required_to_optional_and_narrower_desired() -> None:
    current = Schema(
        NestedField(1, "id", IntegerType(), required=True),
        NestedField(
            2, "s", StructType(NestedField(3, "x", StringType(), required=True)), required=False
        ),
    )
    desired = pa.schema([("id", pa.int32()), ("s", pa.struct([("x", pa.string())]))])
    assert set(diff_schemas(current, desired).changes) == {
        SchemaChange(kind="make_optional", path="id", detail="required -> optional"),
        SchemaChange(kind="make_optional", path="s.x", detail="required -> optional"),
    }
    wide = iceberg_schema_for(pa.schema([("n", pa.int64())]))
    assert diff_schemas(wide, pa.schema([("n", pa.int32())])).is_empty


def test_incompatible_changes_have_reasons() -> None:
    desired = pa.schema(
        [
            ("id", pa.string()),
            ("price", pa.float64()),
            ("amount", pa.decimal128(12, 4)),
            ("address", pa.string()),
        ]
    )
    diff = diff_schemas(iceberg_schema_for(BASE), desired)
    assert [c for c in diff.changes if c.kind != "keep_column"] == [
        SchemaChange(kind="widen_type", path="price", detail="float -> double")
    ]
    assert {c.path for c in diff.changes if c.kind == "keep_column"} == {"name", "items"}
    assert len(diff.incompatible) == 3
    assert diff.incompatible[0].startswith("column id: type int cannot change to string")
    assert "decimal(10, 2) cannot change to decimal(12, 4)" in diff.incompatible[1]
    assert diff.incompatible[2].startswith("column address:")
