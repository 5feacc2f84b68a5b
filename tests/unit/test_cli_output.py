"""Output off a terminal (CI logs, pipes) is never wrapped or cut; plans speak Iceberg."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from tableflow_core.ingest.spec import IngestSpec
from tableflow_core.plan.actions import Column, CreateTable, Ingest, OffsetSpan, PartitionLag
from tableflow_core.plan.plan import Plan
from tableflow_core.plan.type_names import iceberg_type_name
from tableflow_core.readers.duckdb_reader import TEXT_FORMATS
from tableflow_core.schemas.formats import FormatSpec


def long_plan() -> Plan:
    nested = pa.struct([(f"field_number_{i}", pa.list_(pa.decimal128(38, 9))) for i in range(8)])
    schema = pa.schema(
        [
            ("amount", pa.decimal128(10, 2)),
            ("created_at", pa.timestamp("us", "UTC")),
            ("tags", pa.list_(pa.string())),
            ("details", nested),
        ]
    )
    return Plan(
        tableflow_version="0",
        created_at="2026-01-01T00:00:00Z",
        project="shop",
        target="dev",
        config_hash="0" * 64,
        tables=("orders",),
        actions=(
            CreateTable(
                id="create_table:orders",
                table="orders",
                identifier="shop.orders",
                columns=(
                    Column(name="amount", type=iceberg_type_name(pa.decimal128(10, 2))),
                    Column(name="created_at", type=iceberg_type_name(pa.timestamp("us", "UTC"))),
                    Column(name="tags", type=iceberg_type_name(pa.list_(pa.string()))),
                    Column(name="details", type=iceberg_type_name(nested)),
                ),
                table_schema=schema,
            ),
            Ingest(
                id="ingest:orders",
                table="orders",
                identifier="shop.orders",
                topic="orders",
                partitions=(
                    PartitionLag(
                        partition=0,
                        committed=None,
                        low_watermark=0,
                        high_watermark=1,
                        start=0,
                        read_to=1,
                    ),
                ),
                ranges=(OffsetSpan(partition=0, start=0, end=1),),
                records=1,
                pending=1,
                spec=IngestSpec(
                    table_name="orders",
                    namespace=("shop",),
                    table="orders",
                    topic="orders",
                    value=FormatSpec(format="avro"),
                    decoded_schema=schema,
                ),
            ),
        ),
    )


def test_compact_summary_lists_each_table_once() -> None:
    from rich.console import Console

    console = Console(width=200, record=True, color_system=None)
    from tableflow_core.plan.render_human import render_compact

    render_compact(long_plan(), console)
    text = console.export_text()
    assert "orders: create table, ingest 1 record" in text
    assert "details:" not in text  # the full diff is not repeated


@pytest.mark.parametrize(
    ("arrow_type", "name"),
    [
        (pa.decimal128(10, 2), "decimal(10, 2)"),
        (pa.timestamp("us", tz="UTC"), "timestamptz"),
        (pa.timestamp("us"), "timestamp"),
        (pa.timestamp("ns", tz="UTC"), "timestamptz_ns"),
        (pa.list_(pa.string()), "list<string>"),
        (pa.map_(pa.string(), pa.int64()), "map<string, long>"),
        (pa.struct([("a", pa.int32())]), "struct<a: int>"),
        (pa.date32(), "date"),
        (pa.time64("us"), "time"),
        (pa.binary(16), "fixed[16]"),
        (pa.large_binary(), "binary"),
        (pa.bool_(), "boolean"),
        (pa.float32(), "float"),
        (pa.float64(), "double"),
        (pa.uuid(), "uuid"),
    ],
)
def test_iceberg_type_names(arrow_type: pa.DataType, name: str) -> None:
    assert iceberg_type_name(arrow_type) == name


def test_query_text_formats() -> None:
    import datetime
    from decimal import Decimal

    columns = ["id", "amount", "at", "note"]
    rows = [
        (1, Decimal("10.50"), datetime.datetime(2026, 1, 2, 3, 4, 5), "a|b"),
        (2, None, None, "x" * 300),
    ]
    csv_text = TEXT_FORMATS["csv"](columns, rows)
    assert csv_text.splitlines()[0] == "id,amount,at,note"
    assert csv_text.splitlines()[1] == "1,10.50,2026-01-02 03:04:05,a|b"
    assert "x" * 300 in csv_text
    records = json.loads(TEXT_FORMATS["json"](columns, rows))
    assert records[0] == {"id": 1, "amount": "10.50", "at": "2026-01-02T03:04:05", "note": "a|b"}
    assert records[1]["amount"] is None
    markdown = TEXT_FORMATS["markdown"](columns, rows).splitlines()
    assert markdown[0] == "| id | amount | at | note |"
    assert markdown[2] == "| 1 | 10.50 | 2026-01-02 03:04:05 | a\\|b |"
    assert markdown[3].startswith("| 2 | NULL | NULL | xxx")
