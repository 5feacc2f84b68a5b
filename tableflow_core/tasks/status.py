"""`tableflow status`: where every table stands, read without Spark.

Per table: committed offsets against the topic's end (lag in records), the last commit
and its age, rows and files, the current snapshot, the last run's result
(target/run_results.json), dead-letter counts and whether the table is suspended.
State comes from the catalog (pyiceberg), Kafka watermarks (confluent-kafka) and the
project's files. A component that cannot be reached (the broker, the schema registry,
the catalog) makes the tables that need it `unreachable`, naming it: the command shows
what it could read and exits 1 (`cli/commands/status.py`). The JSON shape is documented
in docs/status.md (`status_version`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from tableflow_core.config.project import Project, Table
from tableflow_core.delta import mirrored_snapshot_id
from tableflow_core.delta.sync import delta_uri
from tableflow_core.kafka.admin import CONNECT_TIMEOUT_S as KAFKA_CONNECT_TIMEOUT_S
from tableflow_core.kafka.offsets import initial_offsets
from tableflow_core.plan.desired import format_spec, start_from_value
from tableflow_core.plan.world import KAFKA_TIMEOUT_S, Readers, default_readers
from tableflow_core.schemas.registry import probe_registry
from tableflow_core.state.offsets import read_committed_offsets
from tableflow_core.targets.catalog import open_catalog
from tableflow_core.targets.kafka import kafka_consumer_config
from tableflow_core.targets.registry import registry_settings

STATUS_VERSION: Literal[1] = 1
SUSPENDED_PROPERTY = "tableflow.suspended"
RUN_RESULTS_FILE = Path("target") / "run_results.json"

TableState = Literal["ok", "lagging", "suspended", "not_created", "error", "unreachable"]


@dataclass(frozen=True)
class PartitionStatus:
    partition: int
    committed: int | None  # next offset the table reads; None: never ingested
    low: int
    high: int  # the topic's end
    lag: int  # records in [committed (or where a new table starts), high)


@dataclass(frozen=True)
class DlqStatus:
    type: Literal["kafka", "iceberg"]
    target: str  # topic or `namespace.table`
    exists: bool | None  # None: not read (a Kafka DLQ topic is not counted)
    records: int | None  # dead-lettered records of this table's topic
    by_stage: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class LastRun:
    status: str
    finished_at: str | None
    records_written: int
    records_dead_lettered: int
    snapshot_id: int | None
    error: str | None


@dataclass(frozen=True)
class DeltaStatus:
    """The Delta log over the table's files (tables with `formats: [.., delta]`)."""

    exists: bool
    mirrored_snapshot_id: int | None  # the Iceberg snapshot the Delta log was synced to
    in_sync: bool  # mirrors the table's current snapshot


@dataclass(frozen=True)
class TableStatus:
    name: str
    identifier: str
    topic: str
    state: TableState
    exists: bool
    location: str | None = None
    formats: tuple[str, ...] = ("iceberg",)
    snapshot_id: int | None = None
    last_commit_at: str | None = None  # ISO-8601 UTC of the current snapshot
    last_commit_age_s: float | None = None
    rows: int | None = None
    data_files: int | None = None
    delete_files: int | None = None
    lag: int | None = None  # None: Kafka could not be read
    partitions: tuple[PartitionStatus, ...] = ()
    suspended: bool = False
    suspended_reason: str | None = None
    last_run: LastRun | None = None
    dlq: DlqStatus | None = None
    delta: DeltaStatus | None = None
    problems: tuple[str, ...] = ()
    # Components this table needs that could not be reached: `kafka at 127.0.0.1:19092`.
    unreachable: tuple[str, ...] = ()


@dataclass(frozen=True)
class ProjectStatus:
    project: str
    target: str
    generated_at: str
    tables: tuple[TableStatus, ...]
    status_version: Literal[1] = STATUS_VERSION
    # Every component that could not be reached, with why (the CLI's error message).
    unreachable: tuple[str, ...] = ()

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=False)


# ------------------------------------------------------------------- pure parts


def partition_lags(
    committed: Mapping[int, int] | None,
    watermarks: Mapping[int, tuple[int, int]],
    start: Literal["earliest", "latest"] | int,
    offsets_for_time: Mapping[int, int] | None = None,
) -> tuple[PartitionStatus, ...]:
    """Lag per partition; partitions never read count from where the table would start."""
    fresh = initial_offsets(watermarks, start, offsets_for_time)
    result = []
    for partition, (low, high) in sorted(watermarks.items()):
        done = (committed or {}).get(partition)
        position = max(done if done is not None else fresh[partition], low)
        result.append(PartitionStatus(partition, done, low, high, max(0, high - position)))
    return tuple(result)


def committed_offsets(iceberg: Any, table: Table) -> dict[int, int] | None:
    """The next offset per partition the table reads, from its commits (None: it never
    ingested its current topic)."""
    found = read_committed_offsets(iceberg)
    return dict(found.offsets) if found and found.topic == table.topic else None


def table_lag(
    table: Table,
    committed: Mapping[int, int] | None,
    watermarks: Mapping[int, tuple[int, int]],
    io: Readers,
    kafka_conf: Any,
) -> tuple[PartitionStatus, ...]:
    """The table's lag per partition against the topic's `watermarks` (`status` and the
    metrics of `tableflow run` both count it here)."""
    start = start_from_value(table)
    for_time = None
    if isinstance(start, int) and not committed:
        for_time = io.offsets_for_timestamp(kafka_conf, table.topic, start, KAFKA_TIMEOUT_S)
    return partition_lags(committed, watermarks, start, for_time)


def suspension(properties: Mapping[str, str]) -> tuple[bool, str | None]:
    """`tableflow.suspended` table property: present = suspended, with a readable reason.

    `tableflow run` writes a JSON record (reason, topic, partition, offset, run_id,
    suspended_at); any other text (set by hand) is shown as it is.
    """
    raw = properties.get(SUSPENDED_PROPERTY)
    if raw is None:
        return False, None
    try:
        record = json.loads(raw)
    except ValueError:
        return True, raw
    if not isinstance(record, dict) or "reason" not in record:
        return True, raw
    where = [f"topic {record['topic']}"] if record.get("topic") not in (None, "?") else []
    where += [f"{k} {record[k]}" for k in ("partition", "offset") if record.get(k) is not None]
    if record.get("suspended_at") not in (None, "?"):
        where.append(f"since {record['suspended_at']}")
    return True, str(record["reason"]) + (f" ({', '.join(where)})" if where else "")


def last_runs(path: Path) -> tuple[dict[str, LastRun], str | None]:
    """Per table name, its entry in run_results.json; a problem text when unreadable."""
    if not path.is_file():
        return {}, None
    try:
        data = json.loads(path.read_text())
        finished = data.get("finished_at")
        runs = {
            str(entry["table"]): LastRun(
                status=str(entry.get("status", "unknown")),
                finished_at=entry.get("finished_at") or finished,
                records_written=int(entry.get("records_written", 0)),
                records_dead_lettered=int(entry.get("records_dead_lettered", 0)),
                snapshot_id=entry.get("snapshot_id"),
                error=entry.get("error"),
            )
            for entry in data.get("tables", [])
        }
        return runs, None
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        return {}, f"{path}: cannot read the last run's results: {exc}"


def table_state(status: TableStatus) -> TableState:
    """The table's one-word state. A component the table needs that is down comes first:
    what was not read cannot be `ok` (nor `not_created`, when the catalog is down)."""
    if status.unreachable:
        return "unreachable"
    if not status.exists:
        return "not_created"
    if status.suspended:
        return "suspended"
    if status.last_run is not None and status.last_run.status == "error":
        return "error"
    if status.lag:
        return "lagging"
    return "ok"


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat(timespec="seconds")


def _summary_int(summary: Any, key: str) -> int | None:
    if summary is None:
        return None
    raw = (
        summary.additional_properties.get(key)
        if hasattr(summary, "additional_properties")
        else None
    )
    if raw is None:
        try:
            raw = summary[key]
        except (KeyError, TypeError):
            return None
    try:
        return int(raw)
    except (TypeError, ValueError):
        return None


# ------------------------------------------------------------------- reading


def _dlq_status(catalog: Any, table: Table) -> DlqStatus | None:
    dlq = table.dlq
    if dlq is None:
        return None
    if dlq.type == "kafka":
        return DlqStatus("kafka", dlq.topic, None, None)
    from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError
    from pyiceberg.expressions import EqualTo

    try:
        dlq_table = catalog.load_table(tuple(dlq.table.split(".")))
    except (NoSuchTableError, NoSuchNamespaceError):
        return DlqStatus("iceberg", dlq.table, False, 0)
    names = {f.name for f in dlq_table.schema().fields}
    if "source_topic" in names:
        scan = dlq_table.scan(
            row_filter=EqualTo(term="source_topic", value=table.topic),
            selected_fields=("source_topic", *(("stage",) if "stage" in names else ())),
        )
    else:
        scan = dlq_table.scan(selected_fields=(next(iter(names)),))
    rows = scan.to_arrow()
    by_stage: dict[str, int] = {}
    if "stage" in rows.column_names:
        for stage in rows.column("stage").to_pylist():
            by_stage[str(stage)] = by_stage.get(str(stage), 0) + 1
    return DlqStatus("iceberg", dlq.table, True, rows.num_rows, by_stage)


def _delta_status(location: str, snapshot: Any) -> DeltaStatus:
    from deltalake import DeltaTable

    exists = DeltaTable.is_deltatable(delta_uri(location))
    mirrored = mirrored_snapshot_id(location) if exists else None
    current = snapshot.snapshot_id if snapshot is not None else None
    return DeltaStatus(exists, mirrored, exists and mirrored == current)


@dataclass
class StatusTask:
    project: Project
    tables: tuple[Table, ...]
    readers: Readers | None = None
    now: Callable[[], float] = time.time
    max_workers: int = 8

    def run(self) -> ProjectStatus:
        io = self.readers or default_readers()
        kafka_conf = kafka_consumer_config(self.project.target.kafka)
        runs, runs_problem = last_runs(self.project.root / RUN_RESULTS_FILE)
        topics = sorted({t.topic for t in self.tables})
        kafka_down = self._kafka_down(io) if self.tables else None
        registry_down = self._registry_down()
        with (
            open_catalog(self.project) as handle,
            ThreadPoolExecutor(self.max_workers, thread_name_prefix="tableflow-status") as pool,
        ):
            watermark_f = {
                topic: pool.submit(io.get_watermarks, kafka_conf, topic, KAFKA_TIMEOUT_S)
                for topic in (topics if kafka_down is None else ())
            }
            status_f = [
                pool.submit(
                    self._table_status,
                    handle.catalog,
                    handle.address,
                    t,
                    watermark_f.get(t.topic),
                    io,
                    kafka_conf,
                )
                for t in self.tables
            ]
            statuses = []
            reasons: dict[str, str] = {}  # unreachable component -> why
            for table, future in zip(self.tables, status_f, strict=True):
                status: TableStatus = future.result()
                extra = (runs_problem,) if runs_problem else ()
                down = list(status.unreachable)  # the catalog's, with why: named below
                if kafka_down is not None:
                    down.append(kafka_down)
                if registry_down is not None and _uses_registry(table):
                    down.append(registry_down)
                reasons.update((_component(why), why) for why in down)
                status = _with(
                    status,
                    last_run=runs.get(table.name),
                    problems=(*status.problems, *extra),
                    unreachable=tuple(dict.fromkeys(_component(why) for why in down)),
                )
                statuses.append(_with(status, state=table_state(status)))
        return ProjectStatus(
            project=self.project.name,
            target=self.project.target_name,
            generated_at=_iso(int(self.now() * 1000)),
            tables=tuple(statuses),
            unreachable=tuple(reasons.values()),
        )

    def _kafka_down(self, io: Readers) -> str | None:
        """Why Kafka cannot be read (one TCP connection, ~2 s at most), else None."""
        address = self.project.target.kafka.bootstrap_servers
        try:
            io.probe_kafka(address, KAFKA_CONNECT_TIMEOUT_S)
        except Exception as exc:
            return f"kafka at {address} is not reachable: {self.project.redact(str(exc))}"
        return None

    def _registry_down(self) -> str | None:
        """Why the schema registry cannot be read, when a selected table needs it."""
        settings = registry_settings(self.project.target.schema_registry)
        if settings is None or not any(_uses_registry(t) for t in self.tables):
            return None
        try:
            probe_registry(settings)
        except Exception as exc:
            return self.project.redact(str(exc))
        return None

    def _table_status(
        self,
        catalog: Any,
        catalog_address: str,
        table: Table,
        watermarks_f: Any,
        io: Readers,
        kafka_conf: Any,
    ) -> TableStatus:
        from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

        problems: list[str] = []
        unreachable: list[str] = []
        base = TableStatus(
            name=table.name,
            identifier=table.identifier,
            topic=table.topic,
            state="ok",
            exists=False,
            formats=tuple(table.formats),
        )
        committed: Mapping[int, int] | None = None
        try:
            iceberg = catalog.load_table((*table.namespace, table.table))
        except (NoSuchTableError, NoSuchNamespaceError):
            iceberg = None
        except Exception as exc:
            iceberg = None
            why = f"catalog at {catalog_address} is not reachable or failed: {exc}"
            unreachable.append(self.project.redact(why))
        if iceberg is not None:
            base = self._iceberg_part(base, iceberg, table, problems)
            committed = committed_offsets(iceberg, table)
        try:
            dlq = _dlq_status(catalog, table)
        except Exception as exc:
            dlq = None
            problems.append(f"dlq: {self.project.redact(str(exc))}")
        lag: int | None = None
        partitions: tuple[PartitionStatus, ...] = ()
        if watermarks_f is None:  # Kafka is down: run() names it
            return _with(base, dlq=dlq, problems=tuple(problems), unreachable=tuple(unreachable))
        try:
            partitions = table_lag(table, committed, watermarks_f.result(), io, kafka_conf)
            lag = sum(p.lag for p in partitions)
        except Exception as exc:
            if "did not answer" in str(exc):  # connected, but no metadata: down for us
                address = self.project.target.kafka.bootstrap_servers
                unreachable.append(
                    self.project.redact(f"kafka at {address} is not reachable: {exc}")
                )
            else:
                problems.append(f"kafka: {self.project.redact(str(exc))}")
        return _with(
            base,
            lag=lag,
            partitions=partitions,
            dlq=dlq,
            problems=tuple(problems),
            unreachable=tuple(unreachable),  # with why; run() keeps the component's name
        )

    def _iceberg_part(
        self, base: TableStatus, iceberg: Any, table: Table, problems: list[str]
    ) -> TableStatus:
        metadata = iceberg.metadata
        snapshot = iceberg.current_snapshot()
        suspended, reason = suspension(metadata.properties)
        values: dict[str, Any] = {
            "exists": True,
            "location": metadata.location,
            "suspended": suspended,
            "suspended_reason": reason,
        }
        if "delta" in table.formats:
            try:
                values["delta"] = _delta_status(metadata.location, snapshot)
            except Exception as exc:
                problems.append(f"delta: {self.project.redact(str(exc))}")
        if snapshot is not None:
            summary = snapshot.summary
            values.update(
                snapshot_id=snapshot.snapshot_id,
                last_commit_at=_iso(snapshot.timestamp_ms),
                last_commit_age_s=round(max(0.0, self.now() - snapshot.timestamp_ms / 1000), 1),
                rows=_summary_int(summary, "total-records"),
                data_files=_summary_int(summary, "total-data-files"),
                delete_files=_summary_int(summary, "total-delete-files"),
            )
        else:
            values.update(rows=0, data_files=0, delete_files=0)
        return _with(base, **values)


def _uses_registry(table: Table) -> bool:
    return format_spec(table.value).uses_registry or format_spec(table.key).uses_registry


def _component(why: str) -> str:
    """`kafka at 127.0.0.1:19092` from `kafka at 127.0.0.1:19092 is not reachable: ...`."""
    return why.split(" is not reachable", 1)[0]


def _with(status: TableStatus, **changes: Any) -> TableStatus:
    from dataclasses import replace

    return replace(status, **changes)
