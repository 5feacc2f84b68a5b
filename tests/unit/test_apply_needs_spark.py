"""Which plans `tableflow apply` starts the JVM for (tasks/apply.py `needs_spark`)."""

from __future__ import annotations

import pyarrow as pa

from tableflow_core.ingest.spec import IngestSpec
from tableflow_core.pipeline.shared_run import DRIVER_READ_MAX_RECORDS
from tableflow_core.plan.actions import (
    Action,
    CreateTable,
    Ingest,
    MaintenanceDue,
    OffsetSpan,
    PartitionLag,
    UndeclaredTable,
)
from tableflow_core.plan.plan import Plan
from tableflow_core.schemas.formats import FormatSpec
from tableflow_core.tasks.apply import needs_spark
from tests.unit.test_cli_output import long_plan

SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string())])


def ingest(table: str, records: int, mode: str = "upsert") -> Ingest:
    keys = ("id",) if mode == "upsert" else ()
    return Ingest(
        id=f"ingest:{table}",
        table=table,
        identifier=f"shop.{table}",
        topic=table,
        partitions=(PartitionLag(partition=0, committed=0, low_watermark=0,
                                 high_watermark=records, start=0, read_to=records),),
        ranges=(OffsetSpan(partition=0, start=0, end=records),),
        records=records,
        pending=records,
        spec=IngestSpec(table_name=table, namespace=("shop",), table=table, topic=table,
                        value=FormatSpec(format="avro"), decoded_schema=SCHEMA,
                        mode=mode, key_columns=keys),
    )  # fmt: skip


def plan(*actions: Action) -> Plan:
    tables = tuple(sorted({a.table for a in actions if a.table is not None}))
    return long_plan().model_copy(update={"tables": tables, "actions": actions})


def test_small_batches_of_upsert_tables_need_no_spark() -> None:
    half = DRIVER_READ_MAX_RECORDS // 2
    assert not needs_spark(plan(ingest("a", half), ingest("b", DRIVER_READ_MAX_RECORDS - half)))


def test_an_append_table_more_records_or_a_created_table_need_spark() -> None:
    assert needs_spark(plan(ingest("a", 10), ingest("b", 10, mode="append")))
    assert needs_spark(plan(ingest("a", DRIVER_READ_MAX_RECORDS), ingest("b", 1)))
    created = CreateTable(id="create_table:a", table="a", identifier="shop.a", columns=(),
                          table_schema=SCHEMA)  # fmt: skip
    assert needs_spark(plan(created, ingest("a", 10)))


def test_reports_beside_small_upsert_batches_need_no_spark() -> None:
    # An upsert table's delete files make maintenance due after a few batches: the plan
    # reports it, apply does not run it (`tableflow run` and `maintain` do).
    due = MaintenanceDue(id="maintenance_due:a", table="a", identifier="shop.a",
                         operations=("rewrite_deletes: 3 delete files",))  # fmt: skip
    undeclared = UndeclaredTable(id="undeclared_table:old", table="old", identifier="shop.old")
    assert not needs_spark(plan(ingest("a", 10), due, undeclared))
    assert needs_spark(plan(ingest("a", 10, mode="append"), due))
