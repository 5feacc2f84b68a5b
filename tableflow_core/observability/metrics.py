"""The Prometheus metrics of `tableflow run`, on a registry of their own.

Every metric and its labels is documented in docs/observability.md. Labels are the
table's name and its topic (and a cause or maintenance operation from a fixed set): never
a secret, an address or a record's value. Counters count from the process's start, as
Prometheus expects (`rate()`, `increase()` handle restarts).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    disable_created_metrics,
)

from tableflow_core.config.project import Table
from tableflow_core.observability.causes import failure_cause, is_component
from tableflow_core.runner.results import TableResult
from tableflow_core.tasks.maintain import TableMaintenance
from tableflow_core.tasks.run import CycleReport

NAMESPACE = "tableflow"
LABELS = ("table", "topic")
# Seconds: a cycle of a few small tables takes 1-3 s warm, a large backfill minutes.
DURATION_BUCKETS = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600)
# Per table, fewer buckets: a scrape renders each bucket of each table (1,000 tables with
# the 14 buckets above in two per-table histograms: 4.4 MB and ~1 s of CPU a scrape).
COMMIT_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
MAINTENANCE_BUCKETS = (1, 5, 15, 60, 300, 900, 3600)
# Counted per table from the apply's accounting (`deadletter/accounting.py`).
RECORD_OUTCOMES = ("read", "written", "filtered", "skipped", "dead_lettered", "tombstones")


@dataclass(frozen=True)
class TableCommit:
    """A table's commit in a cycle: what the freshness reader needs."""

    table: str
    snapshot_id: int
    offsets_before: Mapping[int, int]
    offsets_after: Mapping[int, int]
    committed_at_ms: int | None = None  # the snapshot's commit time, when the run said it


@dataclass(frozen=True)
class _Declare:
    """Declares the metrics on `registry`, in the `tableflow` namespace, by default with
    the table's labels."""

    registry: CollectorRegistry

    def counter(self, name: str, doc: str, labels: tuple[str, ...] = LABELS) -> Counter:
        return Counter(name, doc, labels, namespace=NAMESPACE, registry=self.registry)

    def gauge(self, name: str, doc: str, labels: tuple[str, ...] = LABELS) -> Gauge:
        return Gauge(name, doc, labels, namespace=NAMESPACE, registry=self.registry)

    def histogram(
        self, name: str, doc: str, buckets: tuple[float, ...], labels: tuple[str, ...] = LABELS
    ) -> Histogram:
        return Histogram(
            name, doc, labels, namespace=NAMESPACE, registry=self.registry, buckets=buckets
        )


class RunMetrics:
    """The metrics, and how a cycle's report moves them."""

    def __init__(self, tables: Iterable[Table], registry: CollectorRegistry | None = None):
        # No `_created` series (a second line per counter and histogram of every table):
        # Prometheus' text format does not need them. The switch is the library's, for
        # the process: `run` is the only user of prometheus_client in it.
        disable_created_metrics()
        self.registry = registry if registry is not None else CollectorRegistry()
        self.topics = {t.name: t.topic for t in tables}
        r = self.registry
        ProcessCollector(registry=r)  # process_resident_memory_bytes, process_cpu_seconds_total
        PlatformCollector(registry=r)  # python_info
        new = _Declare(r)
        self.records = {
            outcome: new.counter(
                f"records_{outcome}",
                f"Kafka records {outcome.replace('_', ' ')} by the table's runs"
                if outcome != "tombstones"
                else "Kafka records with a null value (tombstones) read by the table's runs",
            )
            for outcome in RECORD_OUTCOMES
        }
        self.commits = new.counter("commits", "Data commits of the table")
        self.cycle_failures = new.counter(
            "cycle_failures",
            "Cycles in which the table failed, by the component named (cause)",
            (*LABELS, "cause"),
        )
        self.cycles = new.counter(
            "cycles", "Refresh cycles run (a cycle refreshes the tables due)", labels=()
        )
        self.cycle_duration = new.histogram(
            "cycle_duration_seconds",
            "Wall time of a refresh cycle: plan, apply, maintenance",
            DURATION_BUCKETS,
            labels=(),
        )
        self.commit_duration = new.histogram(
            "commit_duration_seconds",
            "Wall time of the table's data commit (the catalog commit of its run)",
            COMMIT_BUCKETS,
        )
        self.lag = new.gauge(
            "lag_records",
            "Records in the topic the table has not committed (as `tableflow status`), "
            "read after each of the table's cycles",
        )
        self.freshness = new.gauge(
            "commit_freshness_seconds",
            "The table's last data commit time minus the newest Kafka timestamp it committed",
        )
        self.last_commit = new.gauge(
            "last_commit_timestamp_seconds", "Unix time of the table's last data commit"
        )
        self.suspended = new.gauge(
            "table_suspended", "1 while the table is suspended (bad records, on_error fail)"
        )
        self.blocked = new.gauge(
            "table_blocked", "1 while the table's plan has blockers (not applied by run)"
        )
        self.ready = new.gauge(
            "table_ready", "1 when the table's last cycle reached its components (/readyz)"
        )
        self.interval = new.gauge("refresh_interval_seconds", "The table's refresh_interval")
        self.last_cycle = new.gauge(
            "last_cycle_timestamp_seconds", "Unix time the last refresh cycle ended", labels=()
        )
        self.maintenance_runs = new.counter(
            "maintenance_runs",
            "Maintenance operations run on the table, by operation and status",
            (*LABELS, "operation", "status"),
        )
        self.maintenance_duration = new.histogram(
            "maintenance_duration_seconds",
            "Wall time of a maintenance operation on the table",
            MAINTENANCE_BUCKETS,
            (*LABELS, "operation"),
        )
        for table in tables:
            labels = self.labels(table.name)
            # Every series exists from the start: `increase()` sees the first records.
            for counter in (*self.records.values(), self.commits):
                counter.labels(*labels)
            self.interval.labels(*labels).set(table.refresh_interval_s)
            self.suspended.labels(*labels).set(0)
            self.blocked.labels(*labels).set(0)
            self.ready.labels(*labels).set(0)

    def labels(self, table: str) -> tuple[str, str]:
        return table, self.topics.get(table, "")

    def observe_cycle(
        self, report: CycleReport, duration_s: float, now: float
    ) -> tuple[dict[str, str | None], list[TableCommit]]:
        """Count the cycle. Returns, per table of the cycle, the component it did not
        reach (None: reached), and the data commits it made (for the freshness reader).
        The maintenance lane's report (no table refreshed) counts its maintenance only."""
        if report.refreshed:
            self.cycles.inc()
            self.cycle_duration.observe(duration_s)
            self.last_cycle.set(now)
        causes: dict[str, str | None] = dict.fromkeys(report.tables)
        commits: list[TableCommit] = []
        if report.error is not None:
            cause = failure_cause(report.error)
            for name in report.tables:
                self.cycle_failures.labels(*self.labels(name), cause).inc()
                causes[name] = cause if is_component(cause) or cause == "other" else None
        for name in report.tables:
            self.suspended.labels(*self.labels(name)).set(int(name in report.suspended))
            self.blocked.labels(*self.labels(name)).set(int(name in report.blocked))
        results = report.results.tables if report.results is not None else ()
        for result in results:
            commit = self._observe_table(result)
            if commit is not None:
                commits.append(commit)
            if result.status in ("error", "skipped") and report.error is None:
                cause = failure_cause(result.error or "other")
                self.cycle_failures.labels(*self.labels(result.table), cause).inc()
                if is_component(cause):
                    causes[result.table] = cause
        for done in report.maintenance:
            self._observe_maintenance(done)
        for name, missed in causes.items():
            self.ready.labels(*self.labels(name)).set(int(missed is None))
        return causes, commits

    def _observe_table(self, result: TableResult) -> TableCommit | None:
        labels = self.labels(result.table)
        totals = (result.accounting or {}).get("totals")
        if totals:
            counts = {outcome: int(totals.get(outcome, 0)) for outcome in RECORD_OUTCOMES}
        else:
            counts = {
                "read": result.records_read,
                "written": result.records_written,
                "skipped": result.records_skipped,
                "dead_lettered": result.records_dead_lettered,
            }
        for outcome, count in counts.items():
            if count:
                self.records[outcome].labels(*labels).inc(count)
        committed = result.status == "success" and result.snapshot_id is not None
        if not committed or result.offsets_after == result.offsets_before:
            return None
        self.commits.labels(*labels).inc()
        commit_s = (result.timings or {}).get("publish_commit")
        if commit_s is not None:
            self.commit_duration.labels(*labels).observe(commit_s)
        assert result.snapshot_id is not None
        return TableCommit(
            result.table,
            result.snapshot_id,
            result.offsets_before,
            result.offsets_after,
            result.committed_at_ms,
        )

    def _observe_maintenance(self, done: TableMaintenance) -> None:
        labels = self.labels(done.table)
        reports = [r for r in (done.report, done.deletes) if r is not None]
        for report in reports:
            for op in report.results:
                self.maintenance_runs.labels(*labels, op.operation, op.status).inc()
                self.maintenance_duration.labels(*labels, op.operation).observe(op.duration_s)
        if done.error and not reports:
            self.maintenance_runs.labels(*labels, "maintenance", "error").inc()
