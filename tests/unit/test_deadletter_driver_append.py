"""The driver's idempotent append of a small dead-letter batch (deadletter/sinks/
iceberg_driver_append.py) against a real pyiceberg SQL catalog and file warehouse: each
key lands once, after a repeat and when another writer commits between scan and commit."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.exceptions import ValidationException

from tableflow_core.deadletter.errors import DeadLetterTableError
from tableflow_core.deadletter.sinks import iceberg_driver_append as driver
from tableflow_core.ingest.bad_records import BAD_RECORD_SCHEMA, dlq_properties
from tableflow_core.pipeline.data_files import file_io_properties, write_data_files

NOW = datetime(2026, 11, 29, tzinfo=UTC)


def bad_rows(topic: str, keys: list[tuple[int, int]], run_id: str = "r1") -> pa.Table:
    return pa.Table.from_pylist(
        [
            {
                "source_topic": topic,
                "source_partition": p,
                "source_offset": o,
                "source_timestamp": NOW,
                "key": f"k{p}-{o}".encode(),
                "value": b"\x00poison",
                "headers": [{"key": "h", "value": b"v"}],
                "stage": "decode",
                "error_class": "DecodeError",
                "error_message": "bad magic byte",
                "run_id": run_id,
                "failed_at": NOW,
            }
            for p, o in keys
        ],
        schema=BAD_RECORD_SCHEMA,
    )


def write_files(table: Any, rows: pa.Table) -> list[Any]:
    return write_data_files(table.metadata, file_io_properties(table.io.properties), rows)


@pytest.fixture
def dlq(catalog: Any) -> Any:
    fast_retries = {"commit.retry.min-wait-ms": "1", "commit.retry.max-wait-ms": "5"}
    properties = {**dlq_properties(["t"]), **fast_retries}
    catalog.create_table("ns.dlq", BAD_RECORD_SCHEMA, properties=properties)
    return lambda: catalog.load_table("ns.dlq")


def keys_in(table: Any) -> Counter[tuple[str, int, int, str]]:
    rows = table.scan().to_arrow().to_pylist()
    return Counter(
        (r["source_topic"], r["source_partition"], r["source_offset"], r["stage"]) for r in rows
    )


def test_a_repeated_batch_adds_only_its_new_rows(dlq: Any) -> None:
    first = driver.append_new_rows(dlq, write_files, bad_rows("orders", [(0, 1), (0, 5), (1, 2)]))
    again = bad_rows("orders", [(0, 1), (0, 3), (0, 5), (1, 2)], run_id="r2")
    second = driver.append_new_rows(dlq, write_files, again)
    assert (first.added, second.added) == (3, 1)
    counted = keys_in(dlq())
    assert set(counted.values()) == {1} and len(counted) == 4
    runs = {r["source_offset"]: r["run_id"] for r in dlq().scan().to_arrow().to_pylist()}
    assert runs == {1: "r1", 5: "r1", 2: "r1", 3: "r2"}  # first writer's rows kept
    snapshot = dlq().current_snapshot()
    assert snapshot.summary[driver.WRITER_PROPERTY] == driver.DRIVER_WRITER
    assert driver.append_new_rows(dlq, write_files, again).added == 0


def test_a_concurrent_writer_of_the_same_keys_makes_it_scan_again(dlq: Any) -> None:
    rows = bad_rows("orders", [(0, o) for o in range(10)])
    calls = []

    def other_writer() -> None:  # a run of the same offsets, committed first
        if not calls:
            dlq().append(bad_rows("orders", [(0, 2), (0, 7)], run_id="other"))
        calls.append(1)

    done = driver.append_new_rows(dlq, write_files, rows, before_commit=other_writer)
    assert done == driver.DriverAppend(added=8, attempts=2)
    counted = keys_in(dlq())
    assert len(counted) == 10 and set(counted.values()) == {1}
    # The refused attempt's data files were deleted: every data file left is referenced.
    referenced = {t.file.file_path for t in dlq().scan().plan_files()}
    data = Path(dlq().metadata.location.removeprefix("file://")) / "data"
    assert {f"file://{p}" for p in data.rglob("*.parquet")} == referenced


def test_a_concurrent_writer_of_other_records_costs_no_new_scan(dlq: Any) -> None:
    def other_topic() -> None:
        dlq().append(bad_rows("payments", [(0, 1)], run_id="other"))

    rows = bad_rows("orders", [(0, 1), (0, 2)])
    done = driver.append_new_rows(dlq, write_files, rows, before_commit=other_topic)
    assert done == driver.DriverAppend(added=2, attempts=1)  # pyiceberg's retry, validated
    assert sorted(k[:3] for k in keys_in(dlq())) == [
        ("orders", 0, 1),
        ("orders", 0, 2),
        ("payments", 0, 1),
    ]


def test_a_writer_that_keeps_winning_fails_the_append(dlq: Any) -> None:
    offsets = iter(range(100, 200))

    def always_first() -> None:
        dlq().append(bad_rows("orders", [(0, next(offsets))], run_id="other"))

    rows = bad_rows("orders", [(0, 0), (0, 500)])
    with pytest.raises(ValidationException):
        driver.append_new_rows(dlq, write_files, rows, before_commit=always_first)
    assert not any(k[2] in (0, 500) for k in keys_in(dlq()))


def test_the_row_budget_comes_from_the_environment() -> None:
    assert driver.driver_max_rows({}) == driver.DRIVER_MAX_ROWS
    assert driver.driver_max_rows({driver.DRIVER_MAX_ROWS_ENV: "0"}) == 0
    assert driver.driver_max_rows({driver.DRIVER_MAX_ROWS_ENV: " 1000 "}) == 1000
    for wrong in ("-1", "many"):
        with pytest.raises(DeadLetterTableError, match=driver.DRIVER_MAX_ROWS_ENV):
            driver.driver_max_rows({driver.DRIVER_MAX_ROWS_ENV: wrong})
