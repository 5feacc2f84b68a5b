"""Pure parts of `tableflow status`: lag, suspension, last run, rendering."""

from __future__ import annotations

import io
import json
from pathlib import Path

from rich.console import Console

from tableflow_core.cli.commands.status import format_age, render_status
from tableflow_core.tasks.status import (
    DlqStatus,
    LastRun,
    ProjectStatus,
    TableStatus,
    last_runs,
    partition_lags,
    suspension,
    table_state,
)


def test_lag_counts_from_committed_or_where_a_new_table_starts() -> None:
    watermarks = {0: (0, 10), 1: (5, 8), 2: (0, 4)}
    lags = partition_lags({0: 7, 1: 2}, watermarks, "earliest")
    # partition 1's committed offset fell behind retention: the lag counts what is left.
    assert [(p.partition, p.committed, p.lag) for p in lags] == [(0, 7, 3), (1, 2, 3), (2, None, 4)]
    assert sum(p.lag for p in partition_lags(None, watermarks, "latest")) == 0
    timed = partition_lags(None, {0: (0, 10)}, 1_700_000_000_000, {0: 6})
    assert timed[0].lag == 4


def test_suspension_property() -> None:
    assert suspension({}) == (False, None)
    record = (
        '{"offset": 42, "partition": 0, "reason": "DecodingError: bad magic byte (decode)", '
        '"run_id": "r1", "suspended_at": "2026-11-22T08:00:00+00:00", "topic": "orders"}'
    )
    assert suspension({"tableflow.suspended": record}) == (
        True,
        "DecodingError: bad magic byte (decode) (topic orders, partition 0, offset 42, "
        "since 2026-11-22T08:00:00+00:00)",
    )
    assert suspension({"tableflow.suspended": "schema change at offset 42"}) == (
        True,
        "schema change at offset 42",
    )


def test_last_runs_tolerates_missing_and_broken_files(tmp_path: Path) -> None:
    path = tmp_path / "run_results.json"
    assert last_runs(path) == ({}, None)
    path.write_text("{not json")
    runs, problem = last_runs(path)
    assert runs == {} and problem is not None and "run_results.json" in problem
    path.write_text(
        json.dumps(
            {
                "finished_at": "2026-11-22T08:00:00Z",
                "tables": [{"table": "a", "status": "error", "error": "boom"}],
            }
        )
    )
    runs, problem = last_runs(path)
    assert problem is None and runs["a"].status == "error" and runs["a"].error == "boom"


def test_state_precedence() -> None:
    base = TableStatus("a", "ns.a", "t", "ok", exists=True, lag=0)
    assert table_state(base) == "ok"
    assert table_state(TableStatus("a", "ns.a", "t", "ok", exists=True, lag=5)) == "lagging"
    assert table_state(TableStatus("a", "ns.a", "t", "ok", exists=False)) == "not_created"
    suspended = TableStatus("a", "ns.a", "t", "ok", exists=True, lag=5, suspended=True)
    assert table_state(suspended) == "suspended"


def test_age_format() -> None:
    assert [format_age(s) for s in (None, 5, 125, 7300, 90000)] == [
        "-",
        "5s ago",
        "2m 5s ago",
        "2h 1m ago",
        "1d 1h ago",
    ]


def test_human_output_is_never_truncated_on_a_wide_console() -> None:
    long_error = "x" * 300
    status = ProjectStatus(
        project="shop",
        target="dev",
        generated_at="2026-11-22T08:00:00+00:00",
        tables=(
            TableStatus(
                "orders",
                "shop.orders",
                "orders",
                "error",
                exists=True,
                lag=1234,
                rows=10,
                data_files=1,
                snapshot_id=42,
                last_run=LastRun("error", None, 0, 0, None, long_error),
                dlq=DlqStatus("iceberg", "shop.dlq", True, 3, {"decode": 3}),
            ),
        ),
    )
    out = io.StringIO()
    render_status(status, Console(file=out, width=10_000, no_color=True))
    text = out.getvalue()
    assert long_error in text and "1,234" in text and "shop.dlq: 3 (decode 3)" in text
