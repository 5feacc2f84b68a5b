"""Pure helpers of the maintenance package: identifiers, SQL literals, orphan scan scope."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from tableflow_core.maintenance import MaintenanceError, MaintenanceReport, OperationResult
from tableflow_core.maintenance.operations import (
    OPERATIONS,
    orphan_scan_locations,
    sql_string,
    timestamp_literal,
)
from tableflow_core.maintenance.schedule import RUN_ORDER
from tableflow_core.maintenance.target import SparkTable


def test_identifiers() -> None:
    table = SparkTable.parse("cat.sales.eu.orders")
    assert (table.catalog, table.namespace, table.table) == ("cat", ("sales", "eu"), "orders")
    assert table.sql == "`cat`.`sales`.`eu`.`orders`"
    assert table.procedure("expire_snapshots") == "`cat`.system.expire_snapshots"
    assert SparkTable.parse("`cat`.`we.ird`.`t`").namespace == ("we.ird",)
    with pytest.raises(ValueError, match="catalog-qualified"):
        SparkTable.parse("sales.orders")


def test_sql_literals() -> None:
    assert sql_string("it's") == "'it\\'s'"
    moment = datetime(2026, 11, 22, 13, 30, tzinfo=timezone(timedelta(hours=1)))
    assert timestamp_literal(moment) == "TIMESTAMP '2026-11-22 12:30:00.000Z'"


def test_orphan_removal_only_scans_data_and_metadata() -> None:
    assert orphan_scan_locations("file:/wh/ns/t", {}) == [
        "file:/wh/ns/t/data",
        "file:/wh/ns/t/metadata",
    ]
    custom = {"write.data.path": "s3://b/data", "write.metadata.path": "s3://b/meta"}
    assert orphan_scan_locations("s3://b/t", custom) == ["s3://b/data", "s3://b/meta"]
    with pytest.raises(MaintenanceError, match="_delta_log"):
        orphan_scan_locations("file:/wh/t", {"write.data.path": "file:/wh/t/_delta_log"})


def test_every_operation_has_a_runner() -> None:
    assert set(OPERATIONS) == set(RUN_ORDER)


def test_report_lines() -> None:
    report = MaintenanceReport(
        "cat.ns.t",
        (
            OperationResult("compact", "success", 1.25, {"rewritten_data_files_count": 40}),
            OperationResult("expire_snapshots", "error", 0.1, error="boom"),
        ),
        {0: 1},
        {0: 1},
    )
    assert not report.ok
    assert report.summary_line() == (
        "cat.ns.t: compact: ok in 1.2s (rewritten_data_files_count=40); "
        "expire_snapshots: failed: boom"
    )
    assert MaintenanceReport("x", (), None, None).summary_line() == "x: nothing due"


def test_maintain_refuses_unknown_operations() -> None:
    from click.testing import CliRunner

    from tableflow_core.cli.main import cli

    result = CliRunner().invoke(cli, ["maintain", "--only", "compact,vacuum"])
    assert result.exit_code == 2
    assert "unknown operation(s) vacuum" in result.output
