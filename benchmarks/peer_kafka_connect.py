"""The Apache Iceberg Kafka Connect sink as a peer: throughput, freshness and memory.

    .venv/bin/python benchmarks/peer_kafka_connect.py --records 1000000,10000000
    .venv/bin/python benchmarks/peer_kafka_connect.py --records 1000000 --rates 1000,20000
    .venv/bin/python benchmarks/peer_kafka_connect.py --records 20000 --rates 1000,20000 \
        --seconds 30 --skip-default-interval --run-interval 500ms

One run starts, on loopback: Apache Kafka 4.4 (KRaft, `tableflow_core/dev/kafka_server.py`),
s3proxy (`dev/s3_server.py`), and tableflow's catalog server with its warehouse on that
S3 store, vending S3 credentials (`python -m tableflow_core.catalog.server`). Both sides
use exactly these: the same broker, topic contents, catalog and store.

- **tableflow**: a one-table project (plain JSON with declared columns, append, the
  catalog as a `rest` target asking for vended credentials), run as users run it:
  `tableflow apply --auto-approve` and `tableflow run` in their own processes.
- **sink**: Kafka Connect 4.3.1 standalone with the Iceberg 1.12.0 sink
  (`tests/support/kafka_connect.py`), JSON without schemas, the table auto-created, one task per
  topic partition; its commit interval at the shortest that runs stably here (1,000 ms,
  docs/interop.md) and at its default (300,000 ms).

Throughput: N records (8 fields: ids, text, a double, an ISO timestamp, the produce time)
are produced to a fresh 4-partition topic first; then the contender starts and the
clock runs until the table holds all N (tableflow: the apply process exits; sink: the
table's `total-records` reaches N). Each figure includes its JVM start, as users see it.
Peak memory: the process tree's RSS (tableflow: the CLI, its JVM, Spark's Python
workers; sink: the Connect JVM), sampled every 0.2 s.

Freshness: a producer runs at a fixed rate for `--seconds`; every record carries its
produce time (ms). Latency of a record = the time the table's `main` moved to the first
snapshot holding it (the snapshot log of the table metadata: the catalog's commit, for
tableflow its publish commit, which moves main) minus its produce time. The rows each snapshot
added are read from its added data files, so neither side's bookkeeping is trusted.
Each freshness line also gives the CPU seconds of the contender's process tree while its
records were produced and landed (processes that ended meanwhile are missed), and the
load average: a shorter `--run-interval` (a duration: `1s`, `500ms`) buys freshness with
CPU.

The last line is the throughput ratio at the largest N, against the sink at its shortest
stable commit interval: `apply/sink records/s: X.XXx` (target >= 1.5x). Figures and
configuration: docs/performance.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from ingest import RunProcess, tableflow_command, tree_cpu_seconds, tree_rss_bytes
from pydantic import SecretStr
from pyiceberg.catalog import load_catalog
from pyiceberg.exceptions import NoSuchTableError

from tableflow_core.catalog.clients import pyiceberg_catalog_properties
from tableflow_core.config.models.base import parse_duration_seconds
from tableflow_core.dev.kafka_server import KafkaServerSettings, start_kafka
from tableflow_core.dev.s3_server import S3ServerSettings, start_s3_server
from tests.fixtures.s3_catalog import start_s3_catalog_server
from tests.plan_project import write_project_files
from tests.support.kafka_connect import (
    IcebergSinkCatalog,
    KafkaConnectSettings,
    iceberg_sink,
    start_kafka_connect,
)

HOST = "127.0.0.1"
PARTITIONS = 4
NAMESPACE = "peer"
SHORTEST_STABLE_INTERVAL_MS = 1000  # docs/interop.md: the sink's commit cycle is ~1.3 s
DEFAULT_INTERVAL_MS = 300_000
STATUSES = ("PLACED", "PAID", "SHIPPED", "CANCELLED")
COLUMNS = [
    {"name": "id", "type": "long"},
    {"name": "customer"},
    {"name": "status"},
    {"name": "amount", "type": "double"},
    {"name": "currency"},
    {"name": "quantity", "type": "long"},
    {"name": "created_at"},
    {"name": "produced_ms", "type": "long"},
]


def record(i: int, produced_ms: int) -> bytes:
    return json.dumps(
        {
            "id": i,
            "customer": f"customer-{i % 50_000:05d}",
            "status": STATUSES[i % 4],
            "amount": round((i % 100_000) / 7, 2),
            "currency": "EUR",
            "quantity": 1 + i % 9,
            "created_at": f"2026-11-{1 + i % 28:02d}T{i % 24:02d}:{i % 60:02d}:00Z",
            "produced_ms": produced_ms,
        },
        separators=(",", ":"),
    ).encode()


@dataclass
class Stack:
    bootstrap: str
    catalog_uri: str
    credential: str
    work: Path

    def pyiceberg(self) -> Any:
        return load_catalog(
            "peer", **pyiceberg_catalog_properties(self.catalog_uri, self.credential)
        )

    def create_topic(self, name: str) -> None:
        admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 3})
        futures = admin.create_topics([NewTopic(name, PARTITIONS, 1)])
        for future in futures.values():
            future.result(60)


@contextmanager
def local_stack(work: Path) -> Iterator[Stack]:
    kafka = start_kafka(KafkaServerSettings(data_dir=work / "kafka", host=HOST))
    s3 = start_s3_server(S3ServerSettings(data_dir=work / "s3"))
    catalog = None
    try:
        catalog = start_s3_catalog_server(work, s3)
        stack = Stack(kafka.bootstrap, catalog.uri, catalog.credential, work)
        stack.pyiceberg().create_namespace_if_not_exists(NAMESPACE)
        yield stack
    finally:
        if catalog is not None:
            catalog.process.stop()
        s3.stop()
        kafka.stop()


def produce_backlog(stack: Stack, topic: str, count: int) -> None:
    producer = Producer(
        {"bootstrap.servers": stack.bootstrap, "linger.ms": 50, "batch.size": 1_000_000,
         "compression.type": "lz4", "enable.idempotence": True, "log_level": 3}
    )  # fmt: skip
    now = int(time.time() * 1000)
    for i in range(count):
        while True:
            try:
                producer.produce(
                    topic, key=str(i).encode(), value=record(i, now), partition=i % PARTITIONS
                )
                break
            except BufferError:
                producer.poll(0.1)
        if i % 10_000 == 0:
            producer.poll(0)
    if producer.flush(300) != 0:
        raise SystemExit(f"could not produce {count} records to {topic}")


# ----------------------------------------------------------------------------- tableflow


def write_project(stack: Stack, root: Path, topic: str, table: str, interval: str) -> Path:
    target = {
        "kafka": {"bootstrap_servers": stack.bootstrap},
        "catalog": {
            "type": "rest",
            "uri": stack.catalog_uri,
            "credential": "{{ env_var('PEER_CATALOG_CREDENTIAL') }}",
            "properties": {"header.X-Iceberg-Access-Delegation": "vended-credentials"},
        },
        "spark": {"master": f"local[{os.cpu_count() or 2}]"},
    }
    json_table = {
        "name": table,
        "topic": topic,
        "value": {"format": "json", "columns": COLUMNS},
        "metadata_columns": [],
    }
    return write_project_files(
        root,
        name="peer",
        target=("bench", target),
        defaults={"namespace": NAMESPACE, "refresh_interval": interval},
        tables=[json_table],
    )


def tableflow_env(stack: Stack) -> dict[str, str]:
    return {**os.environ, "PEER_CATALOG_CREDENTIAL": stack.credential}


@dataclass(frozen=True)
class Measured:
    seconds: float
    peak_bytes: int
    cpu_seconds: float  # the process tree's user+sys CPU: less sensitive to other load

    def line(self, count: int, name: str) -> str:
        return (
            f"{count:>11,} records  {name:<22} {self.seconds:8.1f} s "
            f"{count / self.seconds:>10,.0f} records/s  cpu {self.cpu_seconds:6.1f} s  "
            f"peak {mb(self.peak_bytes)}"
        )


def cpu_by_program(cpu: dict[int, float]) -> str:
    """CPU seconds per program name of the pids in `cpu` that are still known."""
    names: dict[str, float] = {}
    for pid, seconds in cpu.items():
        name = PROGRAMS.get(pid, "?")
        names[name] = names.get(name, 0.0) + seconds
    return ", ".join(f"{n} {v:.1f} s" for n, v in sorted(names.items(), key=lambda x: -x[1]))


PROGRAMS: dict[int, str] = {}


def remember_programs(pid: int) -> None:
    """Note the program name of `pid` and its descendants (for cpu_by_program)."""
    stack_ = [pid]
    while stack_:
        current = stack_.pop()
        try:
            # Read at every sample: spark-submit's shell script execs the JVM in its pid.
            argv = Path(f"/proc/{current}/cmdline").read_bytes().split(b"\0")
            joined = b" ".join(argv)
            PROGRAMS[current] = (
                "spark jvm" if argv[0].endswith(b"java")
                else "python workers" if b"worker_daemon" in joined or b"pyspark.daemon" in joined
                else "spark-submit scripts" if argv[0].endswith(b"bash")
                else "tableflow cli"
            )  # fmt: skip
            for task in Path(f"/proc/{current}/task").iterdir():
                stack_.extend(int(c) for c in (task / "children").read_text().split())
        except (OSError, IndexError):
            continue


def tableflow_apply(stack: Stack, topic: str, table: str, count: int) -> Measured:
    """`tableflow apply --auto-approve` in its own process, as users run it."""
    root = write_project(stack, stack.work / f"project-{table}", topic, table, "5m")
    cpu: dict[int, float] = {}
    peak = 0
    started = time.perf_counter()
    with (stack.work / f"{table}.apply.log").open("w") as log:
        proc = subprocess.Popen(
            tableflow_command(root, "apply", "--auto-approve"),
            stdout=log, stderr=subprocess.STDOUT, env=tableflow_env(stack),
        )  # fmt: skip
        while proc.poll() is None:
            remember_programs(proc.pid)
            peak = max(peak, tree_rss_bytes(proc.pid))
            tree_cpu_seconds(proc.pid, cpu)
            time.sleep(0.2)
    seconds = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"tableflow apply failed: see {log.name}")
    rows = total_records(stack, table)
    if rows != count:
        raise SystemExit(f"tableflow apply wrote {rows} rows to {table}, not {count}")
    print(f"    tableflow apply cpu by program: {cpu_by_program(cpu)}")
    return Measured(seconds, peak, sum(cpu.values()))


# ----------------------------------------------------------------------------- sink


def start_sink(stack: Stack, topic: str, table: str, interval_ms: int) -> Any:
    control = f"control-{uuid.uuid4().hex[:8]}"
    stack.create_topic(control)
    client_id, client_secret = stack.credential.split(":", 1)
    sink = iceberg_sink(
        name=f"sink-{table}",
        topics=topic,
        table=f"{NAMESPACE}.{table}",
        catalog=IcebergSinkCatalog(
            uri=stack.catalog_uri, credential=SecretStr(f"{client_id}:{client_secret}")
        ),
        commit_interval_ms=interval_ms,
        control_topic=control,
        tasks=PARTITIONS,
    )
    return start_kafka_connect(
        KafkaConnectSettings(
            data_dir=stack.work / f"connect-{table}",
            bootstrap=stack.bootstrap,
            connectors=(sink,),
            heap_mb=1024,
        )
    )


def sink_throughput(stack: Stack, topic: str, table: str, count: int, interval_ms: int) -> Measured:
    started = time.perf_counter()
    worker = start_sink(stack, topic, table, interval_ms)
    peak = 0
    cpu: dict[int, float] = {}
    try:
        deadline = started + max(1800, interval_ms / 1000 * 3)
        while total_records(stack, table) < count:
            peak = max(peak, tree_rss_bytes(worker.process.pid))
            tree_cpu_seconds(worker.process.pid, cpu)
            if time.perf_counter() > deadline:
                raise SystemExit(f"the sink did not commit {count} records to {table} in time")
            time.sleep(0.2)
        seconds = time.perf_counter() - started
    finally:
        worker.stop()
    rows = total_records(stack, table)
    if rows != count:
        raise SystemExit(f"the sink wrote {rows} rows to {table}, not {count}")
    return Measured(seconds, peak, sum(cpu.values()))


def total_records(stack: Stack, table: str) -> int:
    try:
        snapshot = stack.pyiceberg().load_table((NAMESPACE, table)).current_snapshot()
    except NoSuchTableError:
        return 0
    return int(snapshot.summary["total-records"]) if snapshot is not None else 0


# ----------------------------------------------------------------------------- freshness


@dataclass(frozen=True)
class Freshness:
    records: int
    p50_s: float
    p95_s: float
    max_s: float
    cpu_s: float = 0.0  # the contender's process tree while records were produced and landed
    wall_s: float = 0.0
    load: float = 0.0  # 1-minute load average at the end of that window

    def line(self, rate: int, name: str) -> str:
        core = self.cpu_s / self.wall_s if self.wall_s else 0.0
        return (
            f"freshness at {rate:>6,}/s  {name:<22} p50 {self.p50_s:6.2f} s  "
            f"p95 {self.p95_s:6.2f} s  max {self.max_s:6.2f} s  ({self.records:,} records)  "
            f"cpu {self.cpu_s:5.1f} s in {self.wall_s:4.1f} s ({core:.2f} cores)  "
            f"load {self.load:.1f}"
        )


def tree_cpu_now(pid: int) -> dict[int, float]:
    cpu: dict[int, float] = {}
    tree_cpu_seconds(pid, cpu)
    return cpu


def cpu_between(before: dict[int, float], after: dict[int, float]) -> float:
    """CPU seconds the tree spent between two samples (processes that ended in between
    are missed: an underestimate)."""
    return sum(seconds - before.get(pid, 0.0) for pid, seconds in after.items())


def produce_at_rate(stack: Stack, topic: str, rate: int, seconds: float, first_id: int) -> int:
    """Produce `rate` records/s for `seconds` (in 10 ms slices); how many were produced."""
    producer = Producer({"bootstrap.servers": stack.bootstrap, "linger.ms": 5, "log_level": 3})
    started = time.monotonic()
    sent = 0
    while (elapsed := time.monotonic() - started) < seconds:
        due = int(elapsed * rate)
        now_ms = int(time.time() * 1000)
        while sent < due:
            i = first_id + sent
            try:
                producer.produce(
                    topic, key=str(i).encode(), value=record(i, now_ms), partition=i % PARTITIONS
                )
            except BufferError:
                producer.poll(0.05)
                continue
            sent += 1
        producer.poll(0)
        time.sleep(0.01)
    if producer.flush(120) != 0:
        raise SystemExit("could not flush the rate producer")
    return sent


def latencies(stack: Stack, table: str, first_id: int) -> list[float]:
    """Each measured row's latency (ids from `first_id` on): when main first moved to a
    snapshot holding its data file, minus its produce time. Main's history is the snapshot
    log (a fast-forward or cherry-pick is when main moved, not when the file was written);
    rows are read from the data files themselves, so neither side's bookkeeping is trusted."""
    iceberg = stack.pyiceberg().load_table((NAMESPACE, table))
    io = iceberg.io
    files_of_manifest: dict[str, list[str]] = {}
    first_on_main: dict[str, int] = {}
    for log_entry in iceberg.metadata.snapshot_log:
        snapshot = iceberg.snapshot_by_id(log_entry.snapshot_id)
        if snapshot is None:
            continue  # expired
        for manifest in snapshot.manifests(io):
            if manifest.manifest_path not in files_of_manifest:
                files_of_manifest[manifest.manifest_path] = [
                    entry.data_file.file_path
                    for entry in manifest.fetch_manifest_entry(io, discard_deleted=True)
                ]
            for path in files_of_manifest[manifest.manifest_path]:
                first_on_main.setdefault(path, log_entry.timestamp_ms)
    result: list[float] = []
    for path, at_ms in first_on_main.items():
        with io.new_input(path).open() as f:
            data = pq.read_table(f, columns=["id", "produced_ms"])
        for i, produced in zip(
            data["id"].to_pylist(), data["produced_ms"].to_pylist(), strict=True
        ):
            if i >= first_id:
                result.append((at_ms - produced) / 1000)
    return result


def summarize(values: list[float]) -> Freshness:
    if not values:
        raise SystemExit("no measured record found in the table's data files")
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))]
    return Freshness(len(ordered), statistics.median(ordered), p95, ordered[-1])


def wait_for(rows: Callable[[], int], count: int, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while rows() < count:
        if time.monotonic() > deadline:
            raise SystemExit(f"{what}: {rows()} of {count} rows after {timeout:.0f} s")
        time.sleep(0.5)


def under_load(
    stack: Stack,
    topic: str,
    table: str,
    rate: int,
    seconds: float,
    warm: int,
    writer: int,
    what: str,
) -> tuple[float, float]:
    """Once `table` holds the `warm` warm-up records: `seconds` of records at `rate`/s to
    `topic`, until the table holds them all. (CPU s of the writer's process tree, wall s.)"""
    wait_for(lambda: total_records(stack, table), warm, 300, f"{what} (warm-up)")
    cpu_before, began = tree_cpu_now(writer), time.monotonic()
    sent = produce_at_rate(stack, topic, rate, seconds, warm)
    wait_for(lambda: total_records(stack, table), warm + sent, 600, what)
    return cpu_between(cpu_before, tree_cpu_now(writer)), time.monotonic() - began


def measured_freshness(stack: Stack, table: str, warm: int, cpu: float, wall: float) -> Freshness:
    """The freshness of the records after the warm-up, with the load's CPU and wall time."""
    found = summarize(latencies(stack, table, warm))
    return replace(found, cpu_s=cpu, wall_s=wall, load=os.getloadavg()[0])


def freshness_tableflow(
    stack: Stack, rate: int, seconds: float, interval: str, metrics: bool = False
) -> Freshness:
    """`tableflow run`'s freshness; `metrics`: with `--metrics-port 0` (issue 43's A/B)."""
    topic = table = f"fresh_tf_{rate}{'_metrics' if metrics else ''}"
    stack.create_topic(topic)
    warm = produce_at_rate(stack, topic, rate, 1, 0)
    root = write_project(stack, stack.work / f"project-{table}", topic, table, interval)
    os.environ["PEER_CATALOG_CREDENTIAL"] = stack.credential
    extra = ("--metrics-port", "0") if metrics else ()
    run = RunProcess(root, stack.work / f"{table}.log", *extra)
    try:
        run.wait_cycles(1, timeout=900)
        pid = run.proc.pid
        cpu, wall = under_load(stack, topic, table, rate, seconds, warm, pid, "tableflow run")
    finally:
        run.stop()
    return measured_freshness(stack, table, warm, cpu, wall)


def freshness_sink(stack: Stack, rate: int, seconds: float, interval_ms: int) -> Freshness:
    topic = table = f"fresh_sink_{rate}"
    stack.create_topic(topic)
    warm = produce_at_rate(stack, topic, rate, 1, 0)
    worker = start_sink(stack, topic, table, interval_ms)
    try:
        pid = worker.process.pid
        cpu, wall = under_load(stack, topic, table, rate, seconds, warm, pid, "sink")
    finally:
        worker.stop()
    return measured_freshness(stack, table, warm, cpu, wall)


# ----------------------------------------------------------------------------- main


def mb(value: int) -> str:
    return f"{value / 2**20:,.0f} MB"


def run_interval(text: str) -> str:
    """A refresh_interval as the project takes it ('1s', '500ms'); a bare number is seconds."""
    value = f"{text}s" if text.isdigit() else text
    try:
        parse_duration_seconds(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc
    return value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", default="1000000,10000000")
    parser.add_argument("--rates", default="1000,20000", help="freshness rates; empty: skip")
    parser.add_argument("--seconds", type=float, default=60.0, help="freshness run length")
    parser.add_argument(
        "--metrics",
        action="store_true",
        help="freshness also with `tableflow run --metrics-port 0` (the metrics' cost)",
    )
    parser.add_argument(
        "--run-interval",
        type=run_interval,
        default="1s",
        help="tableflow run's refresh_interval, a duration: 1s, 500ms",
    )
    parser.add_argument(
        "--skip-default-interval",
        action="store_true",
        help="skip the sink at its default 5-minute commit interval",
    )
    args = parser.parse_args()
    counts = [int(c) for c in args.records.split(",") if c]
    rates = [int(r) for r in args.rates.split(",") if r]
    print(f"cores {os.cpu_count()}, load average {os.getloadavg()[0]:.1f} at start")
    ratio = cpu_ratio = None
    with tempfile.TemporaryDirectory(prefix="peer-") as tmp, local_stack(Path(tmp)) as stack:
        print(f"stack: Apache Kafka {stack.bootstrap}, catalog {stack.catalog_uri} on s3proxy")
        for count in counts:
            tf_topic, sink_topic = f"thr_tf_{count}", f"thr_sink_{count}"
            for topic in (tf_topic, sink_topic):
                stack.create_topic(topic)
                produce_backlog(stack, topic, count)
            applied = tableflow_apply(stack, tf_topic, tf_topic, count)
            print(applied.line(count, "tableflow apply"))
            sunk = sink_throughput(
                stack, sink_topic, sink_topic, count, SHORTEST_STABLE_INTERVAL_MS
            )
            print(sunk.line(count, "sink (commit 1 s)"))
            if not args.skip_default_interval:
                table = f"{sink_topic}_default"
                slow = sink_throughput(stack, sink_topic, table, count, DEFAULT_INTERVAL_MS)
                print(slow.line(count, "sink (commit 5 min)"))
            ratio = sunk.seconds / applied.seconds
            cpu_ratio = sunk.cpu_seconds / applied.cpu_seconds
        for rate in rates:
            tf = freshness_tableflow(stack, rate, args.seconds, args.run_interval)
            contenders = [(f"tableflow run ({args.run_interval})", tf)]
            if args.metrics:
                with_metrics = freshness_tableflow(
                    stack, rate, args.seconds, args.run_interval, metrics=True
                )
                contenders.append(
                    (f"tableflow run ({args.run_interval}) --metrics-port", with_metrics)
                )
            sink = freshness_sink(stack, rate, args.seconds, SHORTEST_STABLE_INTERVAL_MS)
            for name, f in (*contenders, ("sink (commit 1 s)", sink)):
                print(f.line(rate, name))
    print(f"load average {os.getloadavg()[0]:.1f} at end")
    if ratio is not None and cpu_ratio is not None:
        print(f"apply/sink records per CPU second: {cpu_ratio:.2f}x")
        print(f"apply/sink records/s: {ratio:.2f}x")


if __name__ == "__main__":
    main()
