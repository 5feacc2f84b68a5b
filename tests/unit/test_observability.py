"""The metrics, health state and failure causes of `tableflow run` (pure: no server;
the endpoint's WSGI app is called directly). The real endpoint, scraped by a real
Prometheus server: tests/integration/test_metrics_prometheus.py."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pyarrow as pa
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tableflow_core.cli.events import EventLog, emit_results
from tableflow_core.config.loader import load_project
from tableflow_core.maintenance.report import MaintenanceReport, OperationResult
from tableflow_core.observability.causes import CAUSES, failure_cause
from tableflow_core.observability.health import Health
from tableflow_core.observability.metrics import RunMetrics, TableCommit
from tableflow_core.observability.readers import CycleFacts, TableReader
from tableflow_core.observability.server import metrics_app
from tableflow_core.plan.world import Readers
from tableflow_core.runner.results import RunResults, TableResult
from tableflow_core.state.offsets import OFFSETS_KEY, encode_offsets
from tableflow_core.tasks.maintain import TableMaintenance
from tableflow_core.tasks.run import CycleReport
from tests.plan_project import write_project_files

TABLES: Any = (
    SimpleNamespace(name="orders", topic="shop.orders", refresh_interval_s=60.0),
    SimpleNamespace(name="users", topic="shop.users", refresh_interval_s=300.0),
)


def samples(metrics: RunMetrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of the exposition text, parsed back by prometheus_client's parser."""
    app = metrics_app(metrics.registry, Health(("orders",)))
    environ = {"PATH_INFO": "/metrics", "REQUEST_METHOD": "GET"}
    text = b"".join(app(environ, lambda *_a: None)).decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(metrics: RunMetrics, name: str, **labels: str) -> float:
    return samples(metrics)[(name, tuple(sorted(labels.items())))]


def result(table: str, **values: Any) -> TableResult:
    return TableResult(table=table, identifier=f"shop.{table}", **values)


def results(*tables: TableResult) -> RunResults:
    return RunResults(
        project="p", target="t", started_at="s", finished_at="f", duration_s=2.5,
        status="error" if any(t.status == "error" for t in tables) else "success",
        plan_summary="", tables=tables,
    )  # fmt: skip


ACCOUNTING = {
    "totals": {"read": 100, "written": 90, "filtered": 4, "skipped": 1,
               "dead_lettered": 3, "tombstones": 2},
}  # fmt: skip


def test_a_cycle_counts_records_commits_and_durations_per_table() -> None:
    metrics = RunMetrics(TABLES)
    orders = result(
        "orders", status="success", records_read=100, records_written=90,
        records_dead_lettered=3, records_skipped=1, accounting=ACCOUNTING,
        offsets_before={0: 0}, offsets_after={0: 100}, snapshot_id=7, duration_s=1.5,
        timings={"publish_commit": 0.2},
    )  # fmt: skip
    report = CycleReport(("orders", "users"), results=results(orders))
    causes, commits = metrics.observe_cycle(report, 3.0, now=1_800_000_000.0)
    assert causes == {"orders": None, "users": None}
    assert [(c.table, c.snapshot_id, dict(c.offsets_after)) for c in commits] == [
        ("orders", 7, {0: 100})
    ]
    labels = {"table": "orders", "topic": "shop.orders"}
    expected = {"read": 100, "written": 90, "filtered": 4, "skipped": 1,
                "dead_lettered": 3, "tombstones": 2}  # fmt: skip
    for outcome, count in expected.items():
        assert value(metrics, f"tableflow_records_{outcome}_total", **labels) == count
    assert value(metrics, "tableflow_commits_total", **labels) == 1
    assert value(metrics, "tableflow_commit_duration_seconds_count", **labels) == 1
    assert value(metrics, "tableflow_commit_duration_seconds_sum", **labels) == pytest.approx(0.2)
    assert value(metrics, "tableflow_cycle_duration_seconds_sum") == 3.0
    assert value(metrics, "tableflow_cycles_total") == 1
    assert value(metrics, "tableflow_last_cycle_timestamp_seconds") == 1_800_000_000.0
    assert value(metrics, "tableflow_refresh_interval_seconds", **labels) == 60
    assert value(metrics, "tableflow_table_ready", **labels) == 1
    # The other table's series exist from the start, at zero.
    assert value(metrics, "tableflow_records_written_total", table="users", topic="shop.users") == 0
    # A second cycle adds; a table with no changes commits nothing.
    again = result("orders", status="no_changes", offsets_before={0: 100}, offsets_after={0: 100})
    metrics.observe_cycle(CycleReport(("orders",), results=results(again)), 1.0, now=0.0)
    assert value(metrics, "tableflow_records_written_total", **labels) == 90
    assert value(metrics, "tableflow_commits_total", **labels) == 1


def test_failed_cycles_are_counted_by_the_component_they_name() -> None:
    metrics = RunMetrics(TABLES)
    down = CycleReport(
        ("orders", "users"),
        error="WorldReadError: kafka at 127.0.0.1:9 is not reachable or failed: timed out",
    )
    causes, _ = metrics.observe_cycle(down, 0.5, now=0.0)
    assert causes == {"orders": "kafka", "users": "kafka"}
    for table, topic in (("orders", "shop.orders"), ("users", "shop.users")):
        labels = {"table": table, "topic": topic}
        assert value(metrics, "tableflow_cycle_failures_total", cause="kafka", **labels) == 1
        assert value(metrics, "tableflow_table_ready", **labels) == 0
    # A table suspended on a bad record reached its components: a data failure, ready.
    bad = result(
        "orders", status="error",
        error="IngestError: bad record at offset 3; table suspended since 2026-11-29",
    )  # fmt: skip
    report = CycleReport(("orders",), results=results(bad), suspended={"orders": "bad record"})
    causes, _ = metrics.observe_cycle(report, 0.5, now=0.0)
    labels = {"table": "orders", "topic": "shop.orders"}
    assert causes == {"orders": None}
    assert value(metrics, "tableflow_cycle_failures_total", cause="data", **labels) == 1
    assert value(metrics, "tableflow_table_suspended", **labels) == 1
    assert value(metrics, "tableflow_table_ready", **labels) == 1


def test_maintenance_runs_and_durations() -> None:
    metrics = RunMetrics(TABLES)
    done = TableMaintenance(
        "orders",
        report=MaintenanceReport(
            "cat.shop.orders",
            (
                OperationResult("compact", "success", 4.0),
                OperationResult("expire_snapshots", "error", 1.0, error="boom"),
            ),
            None,
            None,
        ),
    )
    metrics.observe_cycle(CycleReport(("orders",), maintenance=(done,)), 6.0, now=0.0)
    labels = {"table": "orders", "topic": "shop.orders"}
    runs = "tableflow_maintenance_runs_total"
    assert value(metrics, runs, operation="compact", status="success", **labels) == 1
    assert value(metrics, runs, operation="expire_snapshots", status="error", **labels) == 1
    duration = "tableflow_maintenance_duration_seconds_sum"
    assert value(metrics, duration, operation="compact", **labels) == 4.0


def test_process_metrics_come_from_the_standard_collector() -> None:
    names = {name for name, _ in samples(RunMetrics(TABLES))}
    assert {"process_resident_memory_bytes", "process_cpu_seconds_total"} <= names
    assert all(n.startswith(("tableflow_", "process_", "python_")) for n in names), sorted(names)


@pytest.mark.parametrize(
    ("error", "cause"),
    [
        ("WorldReadError: kafka at 127.0.0.1:9092 is not reachable or failed: x", "kafka"),
        ("KafkaReadError: topic 'o' partition 0 range [0, 20): _TRANSPORT", "kafka"),
        ("RegistryUnreachableError: schema registry at http://r is not reachable: x", "registry"),
        ("WorldReadError: catalog at http://c is not reachable or failed: 503", "catalog"),
        ("CatalogUnavailableError: the catalog cannot be opened", "catalog"),
        ("OSError: When reading s3://bucket/x: NoSuchBucket", "storage"),
        ("Py4JJavaError: An error occurred while calling o42.sql", "spark"),
        ("IngestError: 2 bad records; table suspended since 2026-11-29", "data"),
        ("AccountingError: records do not add up", "data"),
        ("maintenance: ValueError: nothing", "maintenance"),
        ("maintenance: WorldReadError: catalog at http://c is not reachable", "catalog"),
        ("ZeroDivisionError: division by zero", "other"),
    ],
)
def test_failure_causes(error: str, cause: str) -> None:
    assert failure_cause(error) == cause and cause in CAUSES


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_healthz_while_the_scheduler_ticks_and_when_it_is_late() -> None:
    clock = Clock()
    health = Health(("orders",), stall_after_s=100, slack_s=10, clock=clock)
    assert health.healthz()[0]  # starting: as long as a cycle may take
    health.cycle_started(("orders",))
    clock.now += 99
    assert health.healthz()[0]
    clock.now += 2  # a cycle running longer than stall_after_s: hung
    ok, body = health.healthz()
    assert not ok and body["in_cycle"] and body["late_s"] == 1.0
    health.cycle_finished({"orders": None})
    health.waiting(600)  # a long refresh_interval: asleep, and healthy
    clock.now += 605
    assert health.healthz()[0]
    clock.now += 6  # past its wake-up plus the slack: the scheduler stopped ticking
    assert not health.healthz()[0]


def test_readyz_wants_every_table_to_have_reached_its_components() -> None:
    health = Health(("orders", "users"))
    assert health.readyz() == (False, {"ready": False, "not_ready": {
        "orders": "no cycle yet", "users": "no cycle yet"}})  # fmt: skip
    health.cycle_finished({"orders": None})
    assert health.readyz()[1]["not_ready"] == {"users": "no cycle yet"}
    health.cycle_finished({"users": None})
    assert health.readyz() == (True, {"ready": True, "not_ready": {}})
    health.cycle_finished({"orders": "kafka"})
    assert health.readyz() == (False, {"ready": False, "not_ready": {"orders": "kafka"}})


def test_endpoints_answer_json_with_their_status() -> None:
    health = Health(("orders",))
    app = metrics_app(RunMetrics(TABLES).registry, health)
    statuses: list[str] = []

    def call(path: str) -> Any:
        body = b"".join(app({"PATH_INFO": path}, lambda status, _h: statuses.append(status)))
        return json.loads(body) if path != "/nope" else body

    assert call("/readyz")["not_ready"] == {"orders": "no cycle yet"}
    assert statuses[-1].startswith("503")
    assert call("/healthz")["healthy"] is True and statuses[-1].startswith("200")
    call("/nope")
    assert statuses[-1].startswith("404")


def test_json_log_lines_carry_the_consoles_figures_redacted(capsys: Any) -> None:
    import io

    stream = io.StringIO()
    log = EventLog("apply", stream, redact=lambda text: text.replace("hunter2", "***"))
    orders = result(
        "orders", status="success", records_read=100, records_written=90,
        records_dead_lettered=3, records_skipped=1, accounting=ACCOUNTING,
        offsets_before={0: 0}, offsets_after={0: 100}, snapshot_id=7, duration_s=1.5,
        warnings=("password hunter2 in a warning",),
    )  # fmt: skip
    done = results(orders)
    emit_results(log, done)
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert [(x["event"], x["level"], x["table"]) for x in lines] == [
        ("table_result", "info", "orders"),
        ("warning", "warning", "orders"),
        ("apply_finished", "info", None),
    ]
    first = lines[0]
    assert set(first) >= {"time", "level", "table", "event", "command"}
    assert first["time"].endswith("Z") and first["command"] == "apply"
    assert (first["records_written"], first["records_filtered"], first["records_tombstones"]) == (
        90, 4, 2,
    )  # fmt: skip
    assert first["offsets_after"] == {"0": 100}
    assert lines[1]["message"] == "password *** in a warning"
    summary = lines[2]
    assert summary["summary"] == done.summary_line()
    assert (summary["tables_ok"], summary["records_written"]) == (1, 90)
    assert "hunter2" not in stream.getvalue()


def test_the_targets_metrics_endpoint_binds_loopback_by_default() -> None:
    from pydantic import ValidationError

    from tableflow_core.config.models.targets import Target

    target = Target.model_validate(
        {"kafka": {"bootstrap_servers": "k:9092"}, "metrics": {"port": 9464}}
    )
    assert target.metrics is not None
    assert (target.metrics.port, target.metrics.host) == (9464, "127.0.0.1")
    assert Target.model_validate({"kafka": {"bootstrap_servers": "k:9092"}}).metrics is None
    with pytest.raises(ValidationError):
        Target.model_validate({"kafka": {"bootstrap_servers": "k"}, "metrics": {"port": 70000}})
    with pytest.raises(ValidationError, match="prot"):  # unknown keys are refused
        Target.model_validate({"kafka": {"bootstrap_servers": "k"}, "metrics": {"prot": 1}})


# ------------------------------------------------------------------ the readings


def reader_project(root: Path) -> Any:
    write_project_files(
        root,
        name="shop",
        target=("t", {"kafka": {"bootstrap_servers": "127.0.0.1:9"},
                      "catalog": {"type": "embedded", "warehouse": str(root / "wh")}}),
        defaults={"namespace": "ns"},
        tables=[{"name": "orders", "topic": "shop.orders", "value": {"format": "json"}}],
    )  # fmt: skip
    return load_project(root)


class CountingCatalog:
    """A real pyiceberg catalog that counts the reader's loads."""

    def __init__(self, catalog: Any) -> None:
        self.catalog = catalog
        self.loads = 0

    def load_table(self, identifier: Any) -> Any:
        self.loads += 1
        return self.catalog.load_table(identifier)


def test_a_table_the_cycle_told_about_is_read_without_loading_it(
    tmp_path: Path, catalog: Any
) -> None:
    """The first reading loads the table (its last commit as the catalog has it); later
    ones take the committed offsets and the commit time from the cycle's result; a table
    the cycle did not tell about (it failed) is loaded again."""
    table = catalog.create_table("ns.orders", pa.schema([("id", pa.int64())]))
    table.append(
        pa.table({"id": [1, 2]}),
        snapshot_properties={OFFSETS_KEY: encode_offsets("shop.orders", {0: 2, 1: 0})},
    )
    project = reader_project(tmp_path / "project")
    io = Readers(
        resolve_schema=None,  # type: ignore[arg-type]
        get_watermarks=lambda _conf, _topic, _timeout: {0: (0, 10), 1: (0, 4)},
        offsets_for_timestamp=lambda *_a: {},
    )
    reader = TableReader(project, io, newest_timestamp_ms=lambda _topic, _ranges: 1_000_000)
    counting = CountingCatalog(catalog)
    orders = project.tables

    first = reader.read(counting, orders, {})[0]
    committed_ms = table.current_snapshot().timestamp_ms
    assert (counting.loads, first.lag, first.last_commit_s) == (1, 12, committed_ms / 1000)

    commit = TableCommit("orders", 7, {0: 2, 1: 0}, {0: 9, 1: 4}, committed_at_ms=1_002_500)
    told = CycleFacts(commit, {0: 9, 1: 4})
    second = reader.read(counting, orders, {"orders": told})[0]
    assert counting.loads == 1
    assert (second.lag, second.last_commit_s, second.freshness_s) == (1, 1_002.5, 2.5)

    nothing_new = reader.read(counting, orders, {"orders": CycleFacts(None, {0: 10, 1: 4})})[0]
    assert (counting.loads, nothing_new.lag, nothing_new.last_commit_s) == (1, 0, None)

    failed = reader.read(counting, orders, {"orders": CycleFacts()})[0]
    assert (counting.loads, failed.lag) == (2, 12)


def test_a_commit_not_yet_read_is_kept_until_a_newer_one() -> None:
    older = TableCommit("orders", 1, {0: 0}, {0: 5}, committed_at_ms=1)
    newer = TableCommit("orders", 2, {0: 5}, {0: 8}, committed_at_ms=2)
    assert CycleFacts(None, {0: 5}).newer(CycleFacts(older, {0: 5})) == CycleFacts(older, {0: 5})
    assert CycleFacts(newer, {0: 8}).newer(CycleFacts(older, {0: 5})).commit == newer
    assert CycleFacts(None, {0: 9}).newer(CycleFacts(older, {0: 5})).offsets == {0: 9}
