"""Checks run on real Spark batches: outcomes, counts, samples, splits; their counts held
to great-expectations' native expectations (the independent model of each check)."""

from __future__ import annotations

import hashlib
import json
import re
import uuid
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pytest
from pydantic import TypeAdapter

from tableflow_core.checks import ChecksFailedError, compile_checks
from tableflow_core.config.models.checks import Check
from tableflow_core.config.models.transforms import Transform
from tableflow_core.config.project import SourceLocation
from tableflow_core.engine.spark_session import register_catalog
from tableflow_core.ingest.bad_records import REJECTED_ROW_SCHEMA, ROW_JSON_COLUMN
from tableflow_core.pipeline.checks.run import run_checks
from tableflow_core.pipeline.runners.check import appended_bytes, read_appended
from tableflow_core.pipeline.transforms.spark import apply_transforms
from tableflow_core.transforms import compile_transforms
from tests.fixtures.catalog import CatalogServer, unique_namespace
from tests.transform_batches import frame, sample_rows, sample_schema, with_position

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

pytestmark = pytest.mark.slow

CHECKS = TypeAdapter(list[Check])
TRANSFORMS = TypeAdapter(list[Transform])
SALT = "checks-salt-91b2"


def here(key: str) -> SourceLocation:
    return SourceLocation(Path("tables/orders.yml"), 1)


ORDERS = sample_schema("orders")


def checks_for(checks: list[dict[str, Any]], schema: pa.Schema = ORDERS, **options: Any) -> Any:
    """`checks` compiled for a table of `schema` (the sample orders unless told)."""
    return compile_checks(CHECKS.validate_python(checks), schema, here, **options)


def position(index: int, partitions: int = 4) -> tuple[int, int]:
    return index % partitions, index // partitions


@pytest.fixture(scope="module")
def orders() -> list[dict[str, Any]]:
    rows = sample_rows("orders", 400, seed=7)
    rows[11]["order_id"] = rows[10]["order_id"]  # one duplicated key: 2 failing rows
    rows[20]["quantity"] = 0
    rows[21]["quantity"] = 99
    rows[30]["amount"] = Decimal("-5.00")
    return rows


def batch(spark: SparkSession, rows: list[dict[str, Any]]) -> DataFrame:
    return frame(spark, with_position([dict(r) for r in rows], ORDERS)).cache()


# Warn-only checks of four kinds over the sample orders: both keys, a status, a quantity.
WARN_ON_KEYS_VALUES_AND_RANGE: list[dict[str, Any]] = [
    {"type": "unique", "columns": ["order_id"], "severity": "warn"},
    {"type": "unique", "columns": ["customer_id", "currency"], "severity": "warn"},
    {
        "type": "accepted_values",
        "column": "status",
        "severity": "warn",
        "values": ["PLACED", "PAID", "SHIPPED", "DELIVERED"],
    },
    {"type": "range", "column": "quantity", "min": 1, "max": 10, "severity": "warn"},
]


def test_every_check_kind_counts_like_the_data(
    spark: SparkSession, orders: list[dict[str, Any]]
) -> None:
    compiled = checks_for(
        [
            {"type": "not_null", "columns": ["coupon", "order_id"], "severity": "warn"},
            *WARN_ON_KEYS_VALUES_AND_RANGE,
            {"type": "expression", "name": "positive_amount", "severity": "warn",
             "expression": "amount > 0 AND currency <> 'CHF'"},
            {"type": "row_count", "min": 1, "max": 100, "severity": "warn"},
        ],
    )  # fmt: skip
    df = batch(spark, orders)
    run = run_checks(df, compiled, spark, table="shop.orders")
    results = {r.name: r for r in run.report.results}

    def failing(predicate: Any) -> int:
        return sum(1 for r in orders if predicate(r))

    pairs: dict[tuple[int, str], int] = {}
    for r in orders:
        pairs[(r["customer_id"], r["currency"])] = (
            pairs.get((r["customer_id"], r["currency"]), 0) + 1
        )
    expected = {
        "not_null(coupon)": failing(lambda r: r["coupon"] is None),
        "not_null(order_id)": 0,
        "unique(order_id)": 2,
        "unique(customer_id, currency)": sum(n for n in pairs.values() if n > 1),
        "accepted_values(status)": failing(lambda r: r["status"] == "CANCELLED"),
        "range(quantity)": 2,
        "positive_amount": failing(lambda r: not (r["amount"] > 0 and r["currency"] != "CHF")),
    }
    assert {name: results[name].failing for name in expected} == expected
    assert all(results[n].rows_evaluated == len(orders) for n in expected)
    for name, count in expected.items():
        assert results[name].outcome == ("warn" if count else "pass"), name
        assert len(results[name].samples) == min(count, 3)
    assert results["row_count"].failing is None and results["row_count"].observed == len(orders)
    assert results["row_count"].outcome == "warn"
    assert {s["quantity"] for s in results["range(quantity)"].samples} == {0, 99}
    assert {
        (s["kafka_partition"], s["kafka_offset"]) for s in results["range(quantity)"].samples
    } == {position(20), position(21)}
    # warn never blocks: every row is published.
    assert not run.report.blocks_publish and run.passing_df.count() == len(orders)
    assert run.rejected_count == 0 and run.skipped_count == 0
    document = json.loads(json.dumps(run.report.as_dict()))
    assert document["outcome"] == "warn" and len(document["checks"]) == 8
    summary = run.report.summary_properties()
    passed = sum(1 for count in expected.values() if count == 0)
    assert summary["tableflow.checks"] == f"warn: {passed} passed, {8 - passed} warned, 0 failed"
    assert "range(quantity)=2" in summary["tableflow.checks.failing"]
    df.unpersist()


def test_an_error_check_blocks_publishing_and_names_table_check_count_and_samples(
    spark: SparkSession, orders: list[dict[str, Any]]
) -> None:
    # Masks run before checks: sample rows show masked values only.
    transforms = compile_transforms(
        TRANSFORMS.validate_python(
            [{"type": "mask", "columns": ["order_id"], "method": "hash", "salt": SALT}]
        ),
        ORDERS,
        here,
    )
    compiled = checks_for(
        [
            {"type": "range", "column": "quantity", "min": 1, "max": 10},
            {"type": "not_null", "columns": ["currency"]},
        ],
        transforms.output_schema,
    )
    source = batch(spark, orders)
    transformed = apply_transforms(source, transforms, spark=spark)
    run = run_checks(transformed.df, compiled, spark, table="shop.orders")
    assert run.report.blocks_publish and run.report.outcome == "fail"
    with pytest.raises(ChecksFailedError) as raised:
        run.report.raise_for_failures()
    message = str(raised.value)
    assert "shop.orders" in message and "range(quantity)" in message
    assert "2 of 400 rows failing" in message and "not_null(currency)" not in message
    for index in (20, 21):
        clear = orders[index]["order_id"]
        assert clear not in message
        assert hashlib.sha256((SALT + clear).encode()).hexdigest() in message
    source.unpersist()


# A range check dead-lettering and an expression check skipping: quantity 99 fails both.
RANGE_TO_DLQ = {"type": "range", "column": "quantity", "min": 1, "max": 10, "on_failure": "dlq"}
SMALL_QUANTITY_SKIPPED = {
    "type": "expression",
    "name": "small_quantity",
    "expression": "quantity < 50",
    "on_failure": "skip",
}


def splitting_checks(third: dict[str, Any]) -> Any:
    """RANGE_TO_DLQ, SMALL_QUANTITY_SKIPPED and `third`, compiled with a dead-letter target."""
    return checks_for([RANGE_TO_DLQ, SMALL_QUANTITY_SKIPPED, third], dead_letter_configured=True)


def test_skip_and_dlq_take_failing_rows_out_dlq_first(
    spark: SparkSession, orders: list[dict[str, Any]]
) -> None:
    compiled = splitting_checks({"type": "unique", "columns": ["order_id"], "on_failure": "skip"})
    df = batch(spark, orders)
    run = run_checks(df, compiled, spark, table="shop.orders")
    assert not run.report.blocks_publish
    # quantity 99 fails both range (dlq) and small_quantity (skip): dead-lettering wins.
    assert run.rejected_count == 2 and run.skipped_count == 2
    rejected = run.rejected_df.collect()
    assert {(r.source_partition, r.source_offset) for r in rejected} == {position(20), position(21)}
    assert {r.stage for r in rejected} == {"check"} and {r.error_class for r in rejected} == {
        "CheckFailed"
    }
    assert {r.error_message for r in rejected} == {"check range(quantity) failed"}
    # and each row as JSON, for a dead-letter target that keeps no raw payload (masked)
    assert [*REJECTED_ROW_SCHEMA.names, ROW_JSON_COLUMN] == run.rejected_df.columns
    passing = run.passing_df
    assert passing.columns == df.columns
    assert passing.count() == len(orders) - 4
    duplicated = orders[10]["order_id"]
    assert passing.filter(passing.order_id == duplicated).count() == 0
    actions = {r.name: r.action for r in run.report.results}
    assert actions == {
        "range(quantity)": "dead_lettered",
        "small_quantity": "skipped",
        "unique(order_id)": "skipped",
    }
    assert run.report.rows_dead_lettered == 2 and run.report.rows_skipped == 2
    df.unpersist()


def test_an_empty_batch_passes_row_checks_and_row_count_judges_it(spark: SparkSession) -> None:
    compiled = checks_for(
        [
            {"type": "not_null", "columns": ["order_id"]},
            {"type": "expression", "name": "positive_amount", "expression": "amount > 0"},
            {"type": "row_count", "min": 1},
        ],
    )
    df = batch(spark, sample_rows("orders", 1)).limit(0).cache()
    run = run_checks(df, compiled, spark, table="shop.orders")
    outcomes = {r.name: (r.outcome, r.failing, r.observed) for r in run.report.results}
    assert outcomes == {
        "not_null(order_id)": ("pass", 0, None),
        "positive_amount": ("pass", 0, None),
        "row_count": ("fail", None, 0),
    }
    assert "observed 0 rows (expected at least 1)" in run.report.failure_message()
    # row_count alone: no failing-row flags, the aggregate still counts the batch.
    alone = checks_for([{"type": "row_count", "max": 2}])
    three = batch(spark, sample_rows("orders", 3))
    for frame_, expected in ((df, ("pass", 0)), (three, ("fail", 3))):
        results = run_checks(frame_, alone, spark, table="t").report.results
        assert [(r.outcome, r.observed) for r in results] == [expected]
    three.unpersist()
    df.unpersist()


def native_counts(df: DataFrame, checks: Any) -> dict[str, int]:
    """Failing counts from great-expectations' own expectations, as an independent judge
    of the compiled predicates (`run_checks` sums them in one Spark aggregate)."""
    import great_expectations as gx
    import great_expectations.expectations as gxe

    builders: dict[str, Any] = {
        "not_null": lambda c: gxe.ExpectColumnValuesToNotBeNull(column=c.columns[0]),
        "unique": lambda c: (
            gxe.ExpectColumnValuesToBeUnique(column=c.columns[0])
            if len(c.columns) == 1
            else gxe.ExpectCompoundColumnsToBeUnique(column_list=list(c.columns))
        ),
        "accepted_values": lambda c: gxe.ExpectColumnValuesToBeInSet(
            column=c.columns[0], value_set=list(c.values)
        ),
        "range": lambda c: gxe.ExpectColumnValuesToBeBetween(
            column=c.columns[0], min_value=c.min, max_value=c.max
        ),
        "expression": lambda c: gxe.UnexpectedRowsExpectation(
            unexpected_rows_query=f"SELECT * FROM {{batch}} WHERE NOT coalesce(({c.expression}), false)"
        ),
    }
    context = gx.get_context(mode="ephemeral")
    definition = (
        context.data_sources.add_spark(name="native")
        .add_dataframe_asset(name="batch")
        .add_batch_definition_whole_dataframe("whole")
    )
    batch = definition.get_batch(batch_parameters={"dataframe": df})
    counts = {}
    for check in checks.checks:
        if check.kind in builders:
            result = batch.validate(builders[check.kind](check))
            counts[check.name] = int(
                result.result.get("unexpected_count", result.result.get("observed_value"))
            )
    return counts


def test_predicates_count_like_great_expectations_native_expectations(
    spark: SparkSession, orders: list[dict[str, Any]]
) -> None:
    rows = [dict(r) for r in orders]
    rows[40]["order_id"] = None  # NULL keys: not judged by unique, failing for not_null
    rows[41]["order_id"] = None
    rows[50]["status"] = None  # NULL is not judged by accepted_values nor range
    rows[51]["quantity"] = None
    rows[61]["customer_id"], rows[61]["currency"] = rows[60]["customer_id"], rows[60]["currency"]
    compiled = checks_for(
        [
            {"type": "not_null", "columns": ["coupon", "order_id", "status"], "severity": "warn"},
            *WARN_ON_KEYS_VALUES_AND_RANGE,
            {"type": "expression", "name": "cheap", "severity": "warn",
             "expression": "quantity * 2 < 15 OR status = 'PAID'"},
        ],
    )  # fmt: skip
    df = batch(spark, rows)
    run = run_checks(df, compiled, spark, table="shop.orders")
    native = native_counts(df, compiled)
    assert len(native) == 8 and all(native.values())  # every check finds failing rows
    assert {r.name: r.failing for r in run.report.results} == native
    df.unpersist()


def counted_reads(spark: SparkSession, rows: list[dict[str, Any]]) -> tuple[DataFrame, Any]:
    """`rows` as a frame that is not cached (every pass reads it again), and the Spark
    accumulator of the rows its passes read."""
    scanned = spark.sparkContext.accumulator(0)
    source = frame(spark, with_position([dict(r) for r in rows], ORDERS))

    def counting(batches: Any) -> Any:
        for arrow_batch in batches:
            scanned.add(arrow_batch.num_rows)
            yield arrow_batch

    return source.mapInArrow(counting, source.schema), scanned


def test_the_checks_read_the_batch_once_whatever_the_checks(spark: SparkSession) -> None:
    """Five checks, one aggregate, one pass over the batch: the row count (the rows
    evaluated, no count of the batch apart) is computed with the flags' sums, and nothing
    is cached."""
    rows = sample_rows("orders", 300, seed=3)
    assert len({r["order_id"] for r in rows}) == len(rows)
    compiled = checks_for(
        [
            {"type": "not_null", "columns": ["order_id"]},
            {"type": "unique", "columns": ["order_id"]},
            {"type": "range", "column": "quantity", "min": -1000000, "max": 1000000},
            {"type": "expression", "name": "anything", "expression": "order_id = order_id"},
            {"type": "row_count", "min": 1},
        ],
    )
    df, scanned = counted_reads(spark, rows)
    run = run_checks(df, compiled, spark, table="shop.orders")
    assert [r.outcome for r in run.report.results] == ["pass"] * 5
    assert run.report.rows_evaluated == len(rows)
    assert run.report.results[-1].observed == len(rows)
    assert scanned.value == len(rows)
    # Every check passed: the batch is passed on as it is (no window planned for samples).
    assert run.passing_df is df and run.rejected_count == 0


def test_failing_checks_read_the_batch_twice_to_judge_count_and_sample(
    spark: SparkSession, orders: list[dict[str, Any]]
) -> None:
    """With checks failing and rows taken out, `run_checks` reads its input twice: once
    for the verdicts and the rows each policy takes out (one aggregate), once for every
    failing check's samples (few failing rows: collected together)."""
    compiled = splitting_checks({"type": "not_null", "columns": ["coupon"], "severity": "warn"})
    df, scanned = counted_reads(spark, orders)
    run = run_checks(df, compiled, spark, table="shop.orders")
    assert scanned.value == 2 * len(orders)
    results = {r.name: r for r in run.report.results}
    coupons = sum(1 for r in orders if r["coupon"] is None)
    assert results["not_null(coupon)"].failing == coupons > 3
    assert len(results["not_null(coupon)"].samples) == 3
    assert all(s["coupon"] is None for s in results["not_null(coupon)"].samples)
    (sample,) = results["small_quantity"].samples
    assert sample["quantity"] >= 50 and (sample["kafka_partition"], sample["kafka_offset"]) in {
        position(i)
        for i, r in enumerate(orders)
        if r["quantity"] is not None and r["quantity"] >= 50
    }
    assert run.rejected_count == 2 and run.skipped_count == 0  # 99 is dead-lettered


def test_a_check_whose_expression_raises_fails_alone_and_names_the_error(
    spark: SparkSession, orders: list[dict[str, Any]]
) -> None:
    """An expression that raises on some row fails its own check ("could not run", with
    Spark's message); the other checks are still judged on the whole batch."""
    rows = [dict(r) for r in orders]
    rows[5]["quantity"] = 0
    compiled = checks_for(
        [
            {"type": "range", "column": "quantity", "min": 1},
            {"type": "expression", "name": "raises", "severity": "warn",
             "expression": "assert_true(quantity < 1000000000, 'quantity check') IS NULL"},
            {"type": "expression", "name": "boom", "severity": "warn",
             "expression": "CASE WHEN quantity = 0 THEN raise_error('zero quantity') ELSE true END"},
            {"type": "row_count", "min": 1},
        ],
    )  # fmt: skip
    df = batch(spark, rows)
    run = run_checks(df, compiled, spark, table="shop.orders")
    results = {r.name: r for r in run.report.results}
    below = sum(1 for r in rows if r["quantity"] is not None and r["quantity"] < 1)
    assert below >= 1
    assert (results["range(quantity)"].outcome, results["range(quantity)"].failing) == (
        "fail",
        below,
    )
    assert (results["raises"].outcome, results["raises"].failing) == ("pass", 0)
    boom = results["boom"]
    assert boom.outcome == "warn" and boom.detail is not None
    assert boom.detail.startswith("the check could not run: ") and "zero quantity" in boom.detail
    assert "\n" not in boom.detail  # the first line, not the JVM's stack trace
    assert results["row_count"].observed == len(rows) == run.report.rows_evaluated
    df.unpersist()


def test_flags_packed_across_int_columns_before_the_window_count_each_check(
    spark: SparkSession, orders: list[dict[str, Any]]
) -> None:
    """With a unique check, the other flags travel through its shuffle as bits of int
    columns (31 per column): 40 checks span two masks, each still counts its own rows,
    and the window's shuffle carries the key and the masks only."""
    from pyspark.sql import functions as F

    from tableflow_core.pipeline.checks.run import _flag_frame

    quantities = sorted({r["quantity"] for r in orders})
    expressions = [
        {"type": "expression", "name": f"q{k}", "expression": f"quantity <> {k}",
         "severity": "warn"}
        for k in range(40)
    ]  # fmt: skip
    compiled = checks_for(
        [*expressions[:20], {"type": "unique", "columns": ["order_id"], "severity": "warn"},
         *expressions[20:]],
    )  # fmt: skip
    df = batch(spark, orders)
    run = run_checks(df, compiled, spark, table="shop.orders")
    expected = {f"q{k}": sum(1 for r in orders if r["quantity"] == k) for k in range(40)}
    assert sum(1 for k in quantities if k < 40) > 2  # several bits of each mask are set
    assert {r.name: r.failing for r in run.report.results} == {**expected, "unique(order_id)": 2}
    flags = _flag_frame(df, compiled.checks)
    assert flags.agg(*[F.sum(c) for c in flags.columns]).first() == tuple(
        [*[expected[f"q{k}"] for k in range(20)], 2, *[expected[f"q{k}"] for k in range(20, 40)]]
    )
    plan = flags._jdf.queryExecution().executedPlan().toString()
    shuffled = plan.split("Exchange hashpartitioning(order_id")[1].splitlines()[1].strip()
    assert shuffled.startswith("+- Project [order_id#")
    assert re.findall(r" AS (\w+)#\d+", shuffled) == ["__tf_mask_0", "__tf_mask_1"]
    df.unpersist()


def test_the_branch_audit_reads_a_runs_files_on_every_core(
    spark: SparkSession, catalog_server: CatalogServer
) -> None:
    """One run's few small files fit one Iceberg read task (128 MB): the audit splits them
    so each core reads, and reads only the files the run appended."""
    name = f"audit_{uuid.uuid4().hex[:8]}"
    register_catalog(spark, name, catalog_server.spark_properties())
    namespace = unique_namespace()
    identifier = f"{name}.{namespace}.events"
    spark.sql(f"CREATE NAMESPACE {name}.{namespace}")
    spark.sql(f"CREATE TABLE {identifier} (id BIGINT, label STRING) USING iceberg")
    spark.createDataFrame([(0, "before the run")], "id BIGINT, label STRING").writeTo(
        identifier
    ).append()
    spark.range(1, 40_001).selectExpr("id", "concat('row-', id) AS label").repartition(4).writeTo(
        identifier
    ).append()
    table = catalog_server.pyiceberg_catalog().load_table((namespace, "events"))
    head = table.current_snapshot()
    assert head is not None and head.parent_snapshot_id is not None
    base = head.parent_snapshot_id
    added = spark.sql(
        f"SELECT data_file.file_size_in_bytes AS size FROM {identifier}.entries "
        f"WHERE snapshot_id = {head.snapshot_id} AND status = 1"
    ).collect()
    assert len(added) == 4
    assert appended_bytes(table, head.snapshot_id, base) == sum(r.size for r in added)
    whole = (
        spark.read.format("iceberg")
        .option("start-snapshot-id", str(base))
        .option("end-snapshot-id", str(head.snapshot_id))
        .load(identifier)
    )
    assert whole.rdd.getNumPartitions() == 1  # Iceberg's default split: one core reads
    audited = read_appended(spark, identifier, table, base, head.snapshot_id)
    assert audited.rdd.getNumPartitions() == 4
    assert sorted(r.id for r in audited.select("id").collect()) == list(range(1, 40_001))


def test_an_upsert_batchs_samples_show_the_records_kafka_position(spark: SparkSession) -> None:
    """Issue 41: on an upsert table a failed check's sample showed `_kafka_offset`,
    `_kafka_partition` and `_kafka_timestamp` as null beside the record's real position
    (the batch leaves them to the write, which fills them from the source columns)."""
    from datetime import UTC, datetime

    from tableflow_core.ingest.bad_records import SOURCE_OFFSET_COLUMN, SOURCE_PARTITION_COLUMN
    from tableflow_core.ingest.columns import SOURCE_TIMESTAMP_COLUMN
    from tableflow_core.schemas.formats import UTC_MICROS

    schema = pa.schema(
        [
            pa.field("id", pa.int64()),
            pa.field("quantity", pa.int64()),
            pa.field("_kafka_timestamp", UTC_MICROS),
            pa.field("_kafka_partition", pa.int32()),
            pa.field("_kafka_offset", pa.int64()),
        ]
    )
    hidden = pa.schema(
        [
            pa.field(SOURCE_PARTITION_COLUMN, pa.int32()),
            pa.field(SOURCE_OFFSET_COLUMN, pa.int64()),
            pa.field(SOURCE_TIMESTAMP_COLUMN, pa.int64()),
        ]
    )
    millis = 1_767_225_600_000  # 2026-01-01T00:00:00Z
    rows = [
        {"id": i, "quantity": 0 if i == 5 else 1, "_kafka_timestamp": None,
         "_kafka_partition": None, "_kafka_offset": None, SOURCE_PARTITION_COLUMN: i % 2,
         SOURCE_OFFSET_COLUMN: 100 + i, SOURCE_TIMESTAMP_COLUMN: millis + i}
        for i in range(10)
    ]  # fmt: skip
    table = pa.Table.from_pylist(rows, schema=pa.schema([*schema, *hidden]))
    compiled = checks_for(
        [{"type": "range", "column": "quantity", "min": 1, "severity": "warn"}], schema
    )
    run = run_checks(frame(spark, table), compiled, spark, table="orders")
    (result,) = run.report.results
    (sample,) = result.samples
    assert sample["id"] == 5 and sample["quantity"] == 0
    assert sample["_kafka_offset"] == 105 == sample["kafka_offset"]
    assert sample["_kafka_partition"] == 1 == sample["kafka_partition"]
    shown = sample["_kafka_timestamp"]  # Spark gives naive datetimes in its time zone (UTC)
    assert shown.replace(tzinfo=UTC) == datetime.fromtimestamp((millis + 5) / 1000, UTC)
