"""table_write_schema: the union of the resolved schema and the table's columns, and the
removed-column change (`keep_column`) that plan shows once and then converges."""

from __future__ import annotations

import pyarrow as pa
from pyiceberg.schema import Schema
from pyiceberg.types import (
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    ListType,
    LongType,
    MapType,
    NestedField,
    StringType,
    StructType,
    TimestampType,
)

from tableflow_core.schemas.evolution import SchemaChange, diff_schemas
from tableflow_core.schemas.write_schema import (
    KEPT_COLUMN_DOC,
    table_arrow_schema,
    table_write_schema,
)

# The case: Avro v1 {id int, price float, legacy string (required), name string}
V1_TABLE = Schema(
    NestedField(1, "id", IntegerType(), required=False),
    NestedField(2, "price", FloatType(), required=False),
    NestedField(3, "legacy", StringType(), required=True),
    NestedField(4, "name", StringType(), required=False),
)
V2 = pa.schema(
    [("id", pa.int64()), ("price", pa.float64()), ("name", pa.string()), ("extra", pa.string())],
    metadata={b"k": b"v"},
)


def test_removed_field_stays_optional_in_the_write_schema() -> None:
    write = table_write_schema(V2, V1_TABLE)
    assert write.names == ["id", "price", "name", "extra", "legacy"]
    assert write.field("legacy").type == pa.string() and write.field("legacy").nullable
    assert write.field("id").type == pa.int64() and write.field("price").type == pa.float64()
    assert write.metadata == {b"k": b"v"}  # e.g. the Protobuf message name travels on


def test_no_table_means_the_resolved_schema() -> None:
    assert table_write_schema(V2, None) is V2


def test_plan_shows_the_removed_field_once_then_converges() -> None:
    diff = diff_schemas(V1_TABLE, V2)
    assert diff.incompatible == ()
    assert set(diff.changes) == {
        SchemaChange(kind="widen_type", path="id", detail="int -> long"),
        SchemaChange(kind="widen_type", path="price", detail="float -> double"),
        SchemaChange(kind="add_column", path="extra", detail="string"),
        SchemaChange(
            kind="keep_column",
            path="legacy",
            detail="not in the topic's schema any more: kept, now optional; new rows get null",
        ),
    }
    after_apply = Schema(
        NestedField(1, "id", LongType(), required=False),
        NestedField(2, "price", DoubleType(), required=False),
        NestedField(3, "legacy", StringType(), required=False, doc=KEPT_COLUMN_DOC),
        NestedField(4, "name", StringType(), required=False),
        NestedField(5, "extra", StringType(), required=False),
    )
    assert diff_schemas(after_apply, V2).is_empty
    # `legacy` comes back: plan clears the mark once (so a later removal shows again)
    back = pa.schema([*V2, pa.field("legacy", pa.string())])
    assert diff_schemas(after_apply, back).changes == (
        SchemaChange(kind="restore_column", path="legacy", detail="back in the topic's schema"),
    )
    restored = Schema(
        *[f for f in after_apply.fields if f.name != "legacy"],
        NestedField(3, "legacy", StringType(), required=False, doc=""),
    )
    assert diff_schemas(restored, back).is_empty
    assert table_write_schema(V2, after_apply) == pa.schema(
        [*V2, pa.field("legacy", pa.string())], metadata=V2.metadata
    )


def test_nested_removed_fields_and_wider_table_types() -> None:
    table = Schema(
        NestedField(
            1,
            "s",
            StructType(
                NestedField(2, "a", LongType(), required=False),
                NestedField(3, "gone", StringType(), required=False),
            ),
            required=False,
        ),
        NestedField(
            4,
            "items",
            ListType(
                5,
                StructType(
                    NestedField(6, "sku", StringType(), required=False),
                    NestedField(7, "old", DecimalType(12, 2), required=False),
                ),
                element_required=False,
            ),
            required=False,
        ),
        NestedField(
            8, "m", MapType(9, StringType(), 10, TimestampType(), value_required=False), False
        ),
    )
    desired = pa.schema(
        [
            ("s", pa.struct([("a", pa.int32()), ("b", pa.string())])),
            ("items", pa.list_(pa.field("element", pa.struct([("sku", pa.string())])))),
        ]
    )
    write = table_write_schema(desired, table)
    # the table's long column is wider than the writer's int: it stays long
    assert write.field("s").type == pa.struct(
        [("a", pa.int64()), ("b", pa.string()), ("gone", pa.string())]
    )
    assert write.field("items").type == pa.list_(
        pa.field("element", pa.struct([("sku", pa.string()), ("old", pa.decimal128(12, 2))]))
    )
    assert write.field("m").type == pa.map_(
        pa.field("key", pa.string(), nullable=False), pa.field("value", pa.timestamp("us"))
    )
    kept = {c.path for c in diff_schemas(table, desired).changes if c.kind == "keep_column"}
    assert kept == {"s.gone", "items.element.old", "m"}


def test_table_arrow_schema_uses_the_decoders_types() -> None:
    schema = table_arrow_schema(
        Schema(
            NestedField(1, "t", StringType(), required=False),
            NestedField(2, "l", ListType(3, StringType(), element_required=False), False),
        )
    )
    assert schema == pa.schema(
        [("t", pa.string()), ("l", pa.list_(pa.field("element", pa.string())))]
    )
