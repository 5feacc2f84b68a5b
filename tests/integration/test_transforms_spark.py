"""Transforms on real Spark DataFrames, written through Iceberg and read back independently."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pydantic import TypeAdapter

from tableflow_core.config.models.transforms import Transform
from tableflow_core.config.project import SourceLocation
from tableflow_core.engine.spark_session import register_catalog
from tableflow_core.ingest.bad_records import (
    REJECTED_ROW_SCHEMA,
    ROW_JSON_COLUMN,
    SOURCE_OFFSET_COLUMN,
    SOURCE_PARTITION_COLUMN,
)
from tableflow_core.pipeline.transforms.spark import apply_transforms, dedup_against_table
from tableflow_core.transforms import compile_transforms
from tests.fixtures.catalog import CatalogServer, unique_namespace
from tests.transform_batches import frame, sample_rows, sample_schema, with_position

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

pytestmark = pytest.mark.slow

SALT = "pepper-7f3a9c1e-do-not-print"
TRANSFORMS = TypeAdapter(list[Transform])


def here(key: str) -> SourceLocation:
    return SourceLocation(Path("tables/t.yml"), 1)


def compiled(schema: pa.Schema, transforms: list[dict[str, Any]]) -> Any:
    return compile_transforms(TRANSFORMS.validate_python(transforms), schema, here)


def rows_of(df: DataFrame) -> list[dict[str, Any]]:
    return [r.asDict(recursive=True) for r in df.collect()]


def salted(value: str) -> str:
    return hashlib.sha256((SALT + value).encode()).hexdigest()


def test_masks_hash_redact_and_partial(spark: SparkSession) -> None:
    schema = pa.schema(
        [("id", pa.int64()), ("email", pa.string()), ("card", pa.string()), ("note", pa.string())]
    )
    rows = [
        {"id": 1, "email": "ann@example.com", "card": "4111111111111111", "note": "vip"},
        {"id": 2, "email": None, "card": "123", "note": None},
        {"id": 3, "email": "bob@example.com", "card": None, "note": "call back"},
    ]
    steps = compiled(
        schema,
        [
            {"type": "mask", "columns": ["email", "id"], "method": "hash", "salt": SALT},
            {"type": "mask", "columns": ["card"], "method": "partial", "keep_last": 4},
            {"type": "mask", "columns": ["note"], "method": "redact", "replacement": "[x]"},
        ],
    )
    assert steps.output_schema.field("id").type == pa.string()
    result = apply_transforms(frame(spark, with_position(rows, schema)), steps, spark=spark)
    out = sorted(
        rows_of(result.df), key=lambda r: r[SOURCE_OFFSET_COLUMN] * 4 + r[SOURCE_PARTITION_COLUMN]
    )
    assert [r["email"] for r in out] == [salted("ann@example.com"), None, salted("bob@example.com")]
    assert [r["id"] for r in out] == [salted("1"), salted("2"), salted("3")]
    # A value no longer than what would be kept is starred entirely.
    assert [r["card"] for r in out] == ["************1111", "***", None]
    assert [r["note"] for r in out] == ["[x]", None, "[x]"]
    assert result.counts().as_dict() == {
        "rows_in": 3, "rows_out": 3, "filtered": 0, "duplicates": 0, "rejected": 0
    }  # fmt: skip


def test_partial_keeps_first_and_last(spark: SparkSession) -> None:
    schema = pa.schema([("phone", pa.string())])
    rows = [{"phone": "+41791234567"}, {"phone": "12345"}, {"phone": "1234567"}]
    steps = compiled(
        schema,
        [
            {
                "type": "mask",
                "columns": ["phone"],
                "method": "partial",
                "keep_first": 3,
                "keep_last": 2,
            }
        ],
    )
    result = apply_transforms(frame(spark, with_position(rows, schema)), steps, spark=spark)
    assert sorted(r["phone"] for r in rows_of(result.df)) == sorted(
        ["+41*******67", "*****", "123**67"]
    )


def test_the_salt_never_appears_in_query_plans(
    spark: SparkSession, capsys: pytest.CaptureFixture[str]
) -> None:
    schema = pa.schema([("email", pa.string())])
    steps = compiled(
        schema, [{"type": "mask", "columns": ["email"], "method": "hash", "salt": SALT}]
    )
    result = apply_transforms(
        frame(spark, with_position([{"email": "a@b.c"}], schema)), steps, spark=spark
    )
    for df in (result.df, result.rejected_df):
        assert SALT not in df._jdf.queryExecution().toString()
        df.explain(mode="extended")
        df.explain(mode="formatted")
    # Also once executed (the final adaptive plan, the evaluated salt subquery).
    assert [r["email"] for r in result.df.collect()] == [salted("a@b.c")]
    assert SALT not in result.df._jdf.queryExecution().toString()
    result.df.explain(mode="extended")
    result.df.explain(mode="formatted")
    printed = capsys.readouterr().out
    assert "sha2" in printed and SALT not in printed
    # The salt's relation does not outlive the transforms in the session's catalog.
    assert not [t.name for t in spark.catalog.listTables() if t.name.startswith("__tf_")]
    assert SALT not in repr(steps) and SALT not in " ".join(steps.describe())


def test_dedup_keeps_first_or_last_by_partition_and_offset(spark: SparkSession) -> None:
    schema = pa.schema([("k", pa.string()), ("v", pa.int32())])
    # Round-robin over 2 partitions: (p0,o0) a1, (p1,o0) b2, (p0,o1) a3, (p1,o1) a4,
    # (p0,o2) None5, (p1,o2) None6. Order is (partition, offset): "a" at p1 comes last.
    rows = [
        {"k": "a", "v": 1}, {"k": "b", "v": 2}, {"k": "a", "v": 3},
        {"k": "a", "v": 4}, {"k": None, "v": 5}, {"k": None, "v": 6},
    ]  # fmt: skip
    batch = with_position(rows, schema, partitions=2)
    for keep, expected in (
        ("first", {("a", 1), ("b", 2), (None, 5)}),
        ("last", {("a", 4), ("b", 2), (None, 6)}),
    ):
        steps = compiled(schema, [{"type": "dedup", "keys": ["k"], "keep": keep}])
        result = apply_transforms(frame(spark, batch), steps, spark=spark)
        out = rows_of(result.df)
        assert {(r["k"], r["v"]) for r in out} == expected
        assert all(SOURCE_PARTITION_COLUMN in r and SOURCE_OFFSET_COLUMN in r for r in out)
        assert result.counts().duplicates == 3 and result.counts().rows_out == 3


def test_masks_configured_before_a_dedup_run_after_it_with_the_same_result(
    spark: SparkSession,
) -> None:
    schema = pa.schema([("k", pa.string()), ("email", pa.string()), ("v", pa.int32())])
    rows = [
        {"k": "a", "email": "a1@x.io", "v": 1}, {"k": "b", "email": "b2@x.io", "v": 2},
        {"k": "a", "email": "a3@x.io", "v": 3}, {"k": "a", "email": "a4@x.io", "v": 4},
    ]  # fmt: skip
    batch = with_position(rows, schema, partitions=2)
    steps = compiled(
        schema,
        [
            {"type": "mask", "columns": ["email"], "method": "hash", "salt": SALT},
            {"type": "mask", "columns": ["v"], "method": "redact", "replacement": "#"},
            {"type": "dedup", "keys": ["k"], "keep": "last"},
        ],
    )
    result = apply_transforms(frame(spark, batch), steps, spark=spark)
    # Last by (partition, offset): "a" at (p1, o1) is row 4.
    assert {(r["k"], r["email"], r["v"]) for r in rows_of(result.df)} == {
        ("a", salted("a4@x.io"), "#"), ("b", salted("b2@x.io"), "#"),
    }  # fmt: skip
    assert result.counts().duplicates == 2 and result.counts().rows_out == 2
    # The hash is computed above the dedup's window: on the rows kept, after the shuffle.
    plan = result.df._jdf.queryExecution().optimizedPlan().toString()
    assert 0 <= plan.find("sha2(") < plan.find("Window [")
    # A mask of a dedup key runs first: rows group by the masked key as configured.
    on_key = compiled(
        schema,
        [
            {"type": "mask", "columns": ["k"], "method": "redact", "replacement": "#"},
            {"type": "dedup", "keys": ["k"], "keep": "first"},
        ],
    )
    kept = rows_of(apply_transforms(frame(spark, batch), on_key, spark=spark).df)
    assert [(r["k"], r["v"]) for r in kept] == [("#", 1)]


def test_filter_derive_rename_drop(spark: SparkSession) -> None:
    schema = sample_schema("orders")
    rows = sample_rows("orders", 200, seed=3)
    steps = compiled(
        schema,
        [
            {"type": "filter", "where": "status <> 'CANCELLED' AND coupon IS NULL OR quantity > 1"},
            {"type": "derive", "column": "city", "expression": "upper(shipping_address.city)"},
            {
                "type": "derive",
                "column": "units",
                "expression": "CAST(quantity AS BIGINT) * 100000",
            },
            {"type": "rename", "columns": {"order_id": "id"}},
            {"type": "drop", "columns": ["tags", "shipping_address"]},
        ],
    )
    result = apply_transforms(frame(spark, with_position(rows, schema)), steps, spark=spark)
    kept_source = [
        r for r in rows
        if (r["status"] != "CANCELLED" and r["coupon"] is None) or r["quantity"] > 1
    ]  # fmt: skip
    assert 0 < len(kept_source) < len(rows)
    by_id = {r["id"]: r for r in rows_of(result.df)}
    assert result.counts().as_dict() == {
        "rows_in": len(rows), "rows_out": len(kept_source),
        "filtered": len(rows) - len(kept_source), "duplicates": 0, "rejected": 0,
    }  # fmt: skip
    assert list(result.df.columns) == [
        *steps.output_schema.names,
        SOURCE_PARTITION_COLUMN,
        SOURCE_OFFSET_COLUMN,
    ]
    assert set(by_id) == {r["order_id"] for r in kept_source}
    for source in kept_source:
        row = by_id[source["order_id"]]
        assert row["city"] == source["shipping_address"]["city"].upper()
        assert row["units"] == source["quantity"] * 100000


def test_a_derived_value_that_does_not_fit_its_planned_type_is_rejected(
    spark: SparkSession,
) -> None:
    schema = sample_schema("orders")
    rows = sample_rows("orders", 20, seed=5)
    for row in rows:
        row["coupon"] = None
    rows[6]["quantity"] = 40_000  # amount * quantity > 99,999,999.99
    rows[9]["coupon"] = "2026-13-45"  # not a date
    rows[10]["coupon"] = "2026-02-03"
    steps = compiled(
        schema,
        [
            # sqlglot plans DECIMAL(10, 2); Spark computes DECIMAL(21, 2): a product that does
            # not fit the planned column is rejected, never written wrapped or as NULL.
            {"type": "derive", "column": "total", "expression": "amount * quantity"},
            {"type": "derive", "column": "promo_day", "expression": "CAST(coupon AS DATE)"},
        ],
    )
    assert steps.output_schema.field("total").type == pa.decimal128(10, 2)
    assert steps.output_schema.field("promo_day").type == pa.date32()
    result = apply_transforms(frame(spark, with_position(rows, schema)), steps, spark=spark)
    with pytest.raises(RuntimeError, match="counts never arrived"):
        result.counts(timeout_s=0.5)  # no action has read the result yet
    rejected = sorted(
        rows_of(result.rejected_df), key=lambda r: r["source_offset"] * 4 + r["source_partition"]
    )
    assert result.counts().rejected == 2 and result.counts().rows_out == 18
    assert [(r["source_partition"], r["source_offset"]) for r in rejected] == [(2, 1), (1, 2)]
    assert {r["stage"] for r in rejected} == {"transform"}
    assert {r["error_class"] for r in rejected} == {"TransformValueError"}
    assert (
        "derive total" in rejected[0]["error_message"]
        and "DECIMAL(10, 2)" in rejected[0]["error_message"]
    )
    assert (
        "promo_day" in rejected[1]["error_message"] and "2026-13-45" in rejected[1]["error_message"]
    )
    assert result.rejected_df.schema.simpleString() == (
        "struct<source_partition:int,source_offset:bigint,stage:string,"
        "error_class:string,error_message:string,row_json:string>"
    )  # row_json: the row for a dead-letter target that keeps no raw payload (masked)
    assert [*REJECTED_ROW_SCHEMA.names, ROW_JSON_COLUMN] == result.rejected_df.columns
    days = {r["order_id"]: r["promo_day"] for r in rows_of(result.df)}
    assert str(days[rows[10]["order_id"]]) == "2026-02-03"


def test_a_nested_cast_that_fails_rejects_the_row_a_guarded_one_does_not(
    spark: SparkSession,
) -> None:
    """Spark's (non-ANSI) CAST gives NULL on a value it cannot convert; nested in a larger
    expression that NULL used to land. Now the row is rejected, unless the CAST was in a
    branch Spark did not take, or its input was NULL."""
    schema = sample_schema("orders")
    rows = sample_rows("orders", 8, seed=11)
    coupons = [None, "41", "abc", "99999999999", "7", None, "x1", "12"]
    for row, coupon in zip(rows, coupons, strict=True):
        row["coupon"] = coupon
    steps = compiled(
        schema,
        [
            {"type": "derive", "column": "code",
             "expression": "concat('#', CAST(CAST(coupon AS INT) + 1 AS STRING))"},
            # replaces coupon: the check reads the coupon before the replacement
            {"type": "derive", "column": "coupon",
             "expression": "CASE WHEN coupon RLIKE '^[0-9]+$' THEN CAST(coupon AS INT) ELSE -1 END"},
        ],
    )  # fmt: skip
    assert steps.output_schema.field("code").type == pa.string()
    assert steps.output_schema.field("coupon").type == pa.int32()
    result = apply_transforms(frame(spark, with_position(rows, schema)), steps, spark=spark)
    kept = {r["order_id"]: (r["code"], r["coupon"]) for r in rows_of(result.df)}
    rejected = {
        (r["source_partition"], r["source_offset"]): r["error_message"]
        for r in rows_of(result.rejected_df)
    }
    assert result.counts().rejected == 3 and result.counts().rows_out == 5
    # offsets: row i is partition i % 4, offset i // 4
    assert set(rejected) == {(2, 0), (3, 0), (2, 1)}
    assert rejected[(2, 0)] == (
        "transforms[0] derive code: CAST(coupon AS INT) failed on value abc "
        "(a failing CAST gives NULL; write TRY_CAST to accept that)"
    )
    assert "CAST(coupon AS INT) failed on value 99999999999" in rejected[(3, 0)]
    assert "failed on value x1" in rejected[(2, 1)]
    ids = [r["order_id"] for r in rows]
    assert kept == {
        ids[0]: (None, -1),  # NULL in, NULL out: not a failure
        ids[1]: ("#42", 41),
        ids[4]: ("#8", 7),
        ids[5]: (None, -1),
        ids[7]: ("#13", 12),
    }


def test_a_cast_that_fails_in_a_filter_rejects_the_row_instead_of_filtering_it(
    spark: SparkSession,
) -> None:
    schema = sample_schema("orders")
    rows = sample_rows("orders", 4, seed=12)
    for row, coupon in zip(rows, ["5", "50", "n/a", None], strict=True):
        row["coupon"] = coupon
    steps = compiled(schema, [{"type": "filter", "where": "CAST(coupon AS INT) > 10"}])
    result = apply_transforms(frame(spark, with_position(rows, schema)), steps, spark=spark)
    assert [r["coupon"] for r in rows_of(result.df)] == ["50"]
    (rejected,) = rows_of(result.rejected_df)
    assert (rejected["source_partition"], rejected["source_offset"]) == (2, 0)
    assert rejected["error_message"].startswith(
        "transforms[0] filter: CAST(coupon AS INT) failed on value n/a"
    )
    # "5" is filtered (false), NULL is filtered (NULL predicate): counted, not rejected
    assert result.counts().as_dict() == {
        "rows_in": 4, "rows_out": 1, "filtered": 2, "duplicates": 0, "rejected": 1
    }  # fmt: skip


def test_masked_values_never_reach_a_data_file_in_clear(
    spark: SparkSession, catalog_server: CatalogServer
) -> None:
    catalog = f"rest_{uuid.uuid4().hex[:8]}"
    register_catalog(spark, catalog, catalog_server.spark_properties())
    namespace = unique_namespace("masks")
    schema = sample_schema("customers")
    rows = sample_rows("customers", 300, seed=11)
    steps = compiled(
        schema,
        [
            {"type": "mask", "columns": ["email"], "method": "hash", "salt": SALT},
            {
                "type": "mask",
                "columns": ["name"],
                "method": "partial",
                "keep_first": 2,
                "keep_last": 0,
            },
            {"type": "derive", "column": "street", "expression": "address.street"},
            {"type": "mask", "columns": ["street"], "method": "redact"},
            {"type": "drop", "columns": ["address"]},
        ],
    )
    result = apply_transforms(frame(spark, with_position(rows, schema)), steps, spark=spark)
    identifier = f"{catalog}.{namespace}.customers"
    spark.sql(f"CREATE NAMESPACE {catalog}.{namespace}")
    columns = ", ".join(
        f"`{f.name}` {f.dataType.simpleString()}"
        for f in result.df.schema.fields
        if not f.name.startswith("__tf_")
    )
    spark.sql(f"CREATE TABLE {identifier} ({columns}) USING iceberg")
    result.df.drop(SOURCE_PARTITION_COLUMN, SOURCE_OFFSET_COLUMN).writeTo(identifier).append()

    files = [r.file_path for r in spark.sql(f"SELECT file_path FROM {identifier}.files").collect()]
    assert files
    clear = (
        {r["email"] for r in rows}
        | {r["name"] for r in rows}
        | {r["address"]["street"] for r in rows}
    )
    written = 0
    for uri in files:
        path = Path(uri.removeprefix("file:"))
        raw = path.read_bytes()
        table = pq.read_table(path)
        written += table.num_rows
        values = {v for column in table.columns for v in column.to_pylist() if isinstance(v, str)}
        assert not values & clear
        # Not even inside column statistics, dictionaries or page headers.
        assert not any(value.encode() in raw for value in clear)
        assert SALT.encode() not in raw
    assert written == len(rows)
    emails = {r["email"] for r in spark.table(identifier).collect()}
    assert emails == {salted(r["email"]) for r in rows}


def dedup_table_runner(
    spark: SparkSession,
    catalog_server: CatalogServer,
    columns: str,
    schema: pa.Schema,
    dedup: dict[str, Any],
) -> tuple[str, Callable[[list[dict[str, Any]]], int]]:
    """A new table of `columns` (DDL) and a function that runs a batch of rows through the
    `dedup` transform and `dedup_against_table`, appends what is new and counts it."""
    catalog = f"rest_{uuid.uuid4().hex[:8]}"
    register_catalog(spark, catalog, catalog_server.spark_properties())
    namespace = unique_namespace("dedup")
    identifier = f"{catalog}.{namespace}.events"
    spark.sql(f"CREATE NAMESPACE {catalog}.{namespace}")
    spark.sql(f"CREATE TABLE {identifier} ({columns}) USING iceberg")
    steps = compiled(schema, [{"type": "dedup", **dedup}])

    def run(rows: list[dict[str, Any]]) -> int:
        result = apply_transforms(frame(spark, with_position(rows, schema)), steps, spark=spark)
        fresh = dedup_against_table(result.df, spark, identifier, tuple(dedup["keys"]))
        fresh = fresh.drop(SOURCE_PARTITION_COLUMN, SOURCE_OFFSET_COLUMN)
        count = fresh.count()
        fresh.writeTo(identifier).append()
        return count

    return identifier, run


def test_dedup_against_the_table_is_insert_if_absent_and_idempotent(
    spark: SparkSession, catalog_server: CatalogServer
) -> None:
    schema = pa.schema([("k", pa.string()), ("region", pa.string()), ("v", pa.int32())])
    identifier, run = dedup_table_runner(
        spark, catalog_server, "k STRING, region STRING, v INT", schema,
        {"keys": ["k", "region"], "keep": "first"},
    )  # fmt: skip
    first = [{"k": "a", "region": "eu", "v": 1}, {"k": "a", "region": "us", "v": 2},
             {"k": None, "region": "eu", "v": 3}, {"k": "a", "region": "eu", "v": 4}]  # fmt: skip
    assert run(first) == 3
    assert run(first) == 0  # a replayed batch writes nothing
    second = [{"k": "a", "region": "eu", "v": 9}, {"k": None, "region": "eu", "v": 9},
              {"k": "b", "region": "eu", "v": 5}]  # fmt: skip
    assert run(second) == 1
    table = {(r.k, r.region, r.v) for r in spark.table(identifier).collect()}
    assert table == {("a", "eu", 1), ("a", "us", 2), (None, "eu", 3), ("b", "eu", 5)}


def test_dedup_against_the_table_on_one_key_is_null_safe(
    spark: SparkSession, catalog_server: CatalogServer
) -> None:
    # One key takes another path (plain equality, NULL keys apart): same semantics.
    schema = pa.schema([("k", pa.int64()), ("v", pa.int32())])
    identifier, run = dedup_table_runner(
        spark, catalog_server, "k BIGINT, v INT", schema, {"keys": ["k"], "keep": "last"}
    )
    assert run([{"k": 1, "v": 1}, {"k": 2, "v": 2}]) == 2
    # The table holds no NULL key yet: the batch's one is new.
    assert run([{"k": None, "v": 3}, {"k": 2, "v": 9}, {"k": 3, "v": 4}]) == 2
    replay = [{"k": None, "v": 9}, {"k": 1, "v": 9}, {"k": 4, "v": 5}, {"k": 3, "v": 9}]
    assert run(replay) == 1
    assert run(replay) == 0
    table = {(r.k, r.v) for r in spark.table(identifier).collect()}
    assert table == {(1, 1), (2, 2), (None, 3), (3, 4), (4, 5)}


# case -> (a query, the table's columns in Spark DDL, the query's rows aligned to the table)
ALIGNMENTS = {
    "kept columns and struct fields": (
        "SELECT 1 AS id, named_struct('street', 'Main St', 'geo', named_struct('lat', 1.5)) "
        "AS address UNION ALL SELECT 2, CAST(NULL AS STRUCT<street: STRING, geo: "
        "STRUCT<lat: DOUBLE>>)",
        "id INT, address STRUCT<street: STRING, old_zip: STRING, geo: STRUCT<lat: DOUBLE, "
        "lon: DOUBLE>>, notes STRING",
        [
            {"id": 1, "notes": None,
             "address": {"street": "Main St", "old_zip": None, "geo": {"lat": 1.5, "lon": None}}},
            {"id": 2, "notes": None, "address": None},  # a NULL struct stays NULL
        ],
    ),
    "struct fields inside arrays and maps": (
        "SELECT 1 AS id, array(named_struct('sku', 'a'), named_struct('sku', 'b')) AS lines, "
        "map('home', named_struct('city', 'Oslo')) AS places "
        "UNION ALL SELECT 2, CAST(NULL AS ARRAY<STRUCT<sku: STRING>>), "
        "CAST(map() AS MAP<STRING, STRUCT<city: STRING>>)",
        "id INT, lines ARRAY<STRUCT<sku: STRING, qty: INT>>, "
        "places MAP<STRING, STRUCT<city: STRING, zip: STRING>>",
        [
            {"id": 1, "lines": [{"sku": "a", "qty": None}, {"sku": "b", "qty": None}],
             "places": {"home": {"city": "Oslo", "zip": None}}},
            {"id": 2, "lines": None, "places": {}},
        ],
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", ALIGNMENTS)
def test_align_to_table_fills_what_the_table_has_and_the_frame_lacks_with_nulls(
    spark: SparkSession, case: str
) -> None:
    from tableflow_core.pipeline.transforms.spark import align_to_table

    query, table_ddl, expected = ALIGNMENTS[case]
    table = spark.createDataFrame([], table_ddl).schema
    aligned = align_to_table(spark.sql(query), table)
    assert aligned.schema.simpleString() == table.simpleString()
    assert sorted(rows_of(aligned), key=lambda r: r["id"]) == expected
    assert align_to_table(aligned, table) is aligned  # nothing to add: the same frame
