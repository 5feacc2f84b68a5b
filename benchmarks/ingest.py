"""Ingest throughput: `tableflow apply` and a warm `tableflow run` cycle (the CLI users
run) vs a single-process baseline, measured in the same run.

    .venv/bin/python benchmarks/ingest.py [--records 1000000] [--partitions 4] [--cores 2]
    .venv/bin/python benchmarks/ingest.py --warehouse s3 [--records 1000000]
    .venv/bin/python benchmarks/ingest.py --skip-apply --run-ab 2 --spark-conf KEY=VALUE

Starts its own Apache Kafka broker and dev schema registry (127.0.0.1, free ports), produces
N Confluent-framed Avro records of 10 fields, then measures in the same run:
- baseline: one Python process, confluent-kafka consume (assign all partitions) +
  fastavro decode + pyarrow Parquet write (zstd);
- tableflow apply: `python -m tableflow_core apply --auto-approve` as its own process, on a
  project written to a tmp dir (embedded catalog, Spark local[cores], the six `_kafka_*`
  metadata columns): interpreter and Spark start-up, plan, table creation, the pipeline
  (read ranges -> decode -> route bad records -> write -> publish) and the commit; the
  wall-clock time of the whole command. Then N more records and a second `apply` on the
  existing table (again a new process: what a cron-driven apply pays). Target (issue 13):
  cold apply >= 0.6x the baseline. The peak RSS of each apply's process tree (CLI, JVM,
  Python workers; /proc sampled every 0.2 s; the broker apart) is printed too (target
  <= 1.5 GB at 1M records).
- tableflow run, warm: `python -m tableflow_core run` as its own process on the same kind
  of project (a new topic, `refresh_interval` = `--run-interval`). Its first cycle creates
  the table and ingests `--warmup` records (JVM, Python workers, catalog warm); then N
  records are produced before the next cycle is due, and that cycle is measured: from its
  start (the warm-up cycle's end + the interval, as `tableflow run` schedules it) to its
  output line, i.e. the cycle's plan (catalog, registry, watermarks) and apply.
  `run_results.json` of that cycle gives the apply and table times inside it. Target
  (issue 13): a warm refresh >= 1.2x the baseline (both cores at work).

`--skip-apply --run-ab ROUNDS --spark-conf KEY=VALUE` (A/B of session settings): the
warm cycle ROUNDS times with the defaults and ROUNDS times with the `--spark-conf` entries
in the target's Spark settings, alternating, each its own `tableflow run` on its own
topic; prints each cycle and the ratio of the medians.

`--warehouse s3` (issue 28): the same project with its warehouse on S3 (s3proxy on local
disk, started here, with a request-counting proxy in front; the embedded catalog on
`s3://`, static keys from the environment through `env_var()`). Measured in the same
run: the file:// baseline, the same baseline writing its Parquet to the same S3 server
(pyarrow's S3 file system, through the proxy), `tableflow apply` of a new table on
file:// and on S3, and the S3 requests (Spark's and the catalog's) per Iceberg commit.
Target: apply on S3 >= 0.6x the file:// baseline.

Helpers shared by the other benchmarks live here (`servers`/`stack`, `AvroFramer`, `produce`,
`FramedAvroReader`/`consume_to_ends`, `baseline`, `offset_commits`, `write_project`/`write_tables_project`,
`cli`, `RunProcess`).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import functools
import io
import json
import os
import re
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Container, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import fastavro
import pyarrow as pa
import pyarrow.parquet as pq
from confluent_kafka import Consumer, Message, Producer, TopicPartition
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from event_schema import SCHEMA  # benchmarks/ is on sys.path when a script runs
from repo_root import ROOT  # noqa: F401  (tests.support below)

from tableflow_core.dev import broker
from tableflow_core.dev.processes import free_port
from tableflow_core.dev.registry import registry_url, start_registry
from tableflow_core.dev.s3_server import RunningS3Server, S3ServerSettings, start_s3_server
from tableflow_core.engine.spark_session import session_conf
from tableflow_core.jvm import class_data_sharing
from tableflow_core.kafka.admin import get_watermarks
from tableflow_core.schemas.formats import METADATA_COLUMNS
from tableflow_core.state.offsets import OFFSETS_KEY, decode_offsets
from tests.plan_project import write_project_files
from tests.support.fault_proxy import FaultProxy

HOST = "127.0.0.1"
# issue 13: ratios to the baseline (records/s).
COLD_APPLY_TARGET = 0.6
WARM_RUN_TARGET = 1.2
RSS_TARGET_GB = 1.5  # peak, 1M records
# A line `tableflow run` prints at the end of each cycle.
CYCLE_LINE = re.compile(r"^(Apply complete|Apply FAILED|up to date|cycle failed|blocked|suspended)")


def record(i: int) -> dict[str, object]:
    return {
        "id": i, "user": f"user-{i % 5000}", "amount": i * 0.25, "qty": i % 100,
        "active": i % 2 == 0, "at": dt.datetime(2026, 1, 1, tzinfo=dt.UTC) + dt.timedelta(seconds=i),
        "city": None if i % 7 == 0 else f"city-{i % 300}", "score": (i % 1000) / 10.0,
        "kind": "ABC"[i % 3], "day": dt.date(2026, 1, 1) + dt.timedelta(days=i % 365),
    }  # fmt: skip


class AvroFramer:
    """Confluent wire format for `topic`'s value: magic byte, schema id, Avro body."""

    def __init__(self, url: str, topic: str) -> None:
        schema_id = SchemaRegistryClient({"url": url}).register_schema(
            f"{topic}-value", Schema(json.dumps(SCHEMA), "AVRO")
        )
        self.header = struct.pack(">bI", 0, schema_id)
        self.schema = fastavro.parse_schema(SCHEMA)

    def frame(self, value: dict[str, object]) -> bytes:
        buffer = io.BytesIO()
        buffer.write(self.header)
        fastavro.schemaless_writer(buffer, self.schema, value)
        return buffer.getvalue()


class FramedAvroReader:
    """The baselines' decoding: a Confluent-framed Avro value read with fastavro, its
    writer schema fetched from the registry once per schema id."""

    def __init__(self, url: str) -> None:
        self.client = SchemaRegistryClient({"url": url})
        self.writers: dict[int, Any] = {}

    def read(self, value: bytes) -> dict[str, Any]:
        (schema_id,) = struct.unpack(">I", value[1:5])
        if schema_id not in self.writers:
            self.writers[schema_id] = fastavro.parse_schema(
                json.loads(self.client.get_schema(schema_id).schema_str or "")
            )
        return fastavro.schemaless_reader(io.BytesIO(value[5:]), self.writers[schema_id], None)  # type: ignore[return-value]


def consume_to_ends(
    consumer: Consumer, ends: dict[tuple[str, int], int]
) -> Iterator[list[Message]]:
    """The baselines' consuming: the messages of each `consume` call (errors left out)
    until every assigned (topic, partition) reached its end offset in `ends`."""
    remaining = {key: end for key, end in ends.items() if end > 0}
    while remaining:
        messages = [msg for msg in consumer.consume(10_000, timeout=1.0) if not msg.error()]
        for msg in messages:
            key = (msg.topic(), msg.partition())
            if msg.offset() + 1 >= remaining.get(key, 0):
                remaining.pop(key, None)
        yield messages


@dataclass(frozen=True)
class OffsetCommit:
    """A snapshot on main's ancestry that carries a topic's offsets (`tableflow.offsets`)."""

    snapshot_id: int
    at_ms: int  # when main moved to it (snapshot log), else its timestamp
    offsets: dict[int, int]  # partition -> next offset


def offset_commits(table: Any, topic: str, known: Container[int] = ()) -> Iterator[OffsetCommit]:
    """`topic`'s commits on a pyiceberg table's main ancestry, newest first, down to the
    first snapshot id in `known` (excluded)."""
    metadata = table.metadata
    moved: dict[int, int] = {}
    for entry in metadata.snapshot_log:
        moved.setdefault(entry.snapshot_id, entry.timestamp_ms)
    by_id = {s.snapshot_id: s for s in metadata.snapshots}
    snapshot_id = metadata.current_snapshot_id
    while snapshot_id is not None and snapshot_id in by_id and snapshot_id not in known:
        snapshot = by_id[snapshot_id]
        summary = snapshot.summary.additional_properties if snapshot.summary else {}
        if OFFSETS_KEY in summary:
            stored, offsets = decode_offsets(summary[OFFSETS_KEY], f"snapshot {snapshot_id}")
            if stored == topic:
                at = moved.get(snapshot_id, snapshot.timestamp_ms)
                yield OffsetCommit(snapshot_id, at, offsets)
        snapshot_id = snapshot.parent_snapshot_id


@contextlib.contextmanager
def servers(work: Path) -> Iterator[tuple[str, str]]:
    """An Apache Kafka broker and a dev registry on free loopback ports: (bootstrap, registry url)."""
    kafka_port, registry_port = free_port(HOST), free_port(HOST)
    kafka = broker.start_broker(HOST, kafka_port, work / "kafka", work / "kafka.log")
    try:
        registry = start_registry(HOST, registry_port, work / "registry.db", work / "registry.log")
        try:
            yield f"{HOST}:{kafka_port}", registry_url(HOST, registry_port)
        finally:
            registry.stop()
    finally:
        kafka.stop()


@contextlib.contextmanager
def stack(work: Path) -> Iterator[tuple[str, str]]:
    """`servers`, with the driver JVM's class archive made before anything is timed."""
    with servers(work) as (bootstrap, url):
        prime_class_archive(work / "prime", bootstrap, url)
        yield bootstrap, url


def prime_class_archive(work: Path, bootstrap: str, url: str) -> None:
    """Make sure the driver JVM's class archive exists before anything is timed.

    The first JVM of a configuration writes the archive when it exits, after the command
    has returned (`jvm/class_data_sharing.py`): a user pays that once per machine, and
    a benchmark must neither time it nor let it compete with the next measured run. If no
    finished archive is there, a one-record apply (the benchmarks' Spark settings) writes
    it, and this waits until the archive's header is written."""
    sharing = class_data_sharing.class_data_sharing(session_conf(short_lived=True))
    if sharing is None or class_data_sharing.is_complete_archive(sharing.archive):
        print(f"JVM class archive: {sharing.archive if sharing else 'no JDK found'}")
        return
    directory = sharing.directory
    started = time.perf_counter()
    broker.create_topics(bootstrap, {"prime": 1})
    produce(bootstrap, url, "prime", 1, 1)
    cli(write_project(work, bootstrap, url, "prime", 1), "apply", "--auto-approve")
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        partials = list(directory.glob("*.jsa.partial"))  # none: sharing is off or refused
        if all(class_data_sharing.is_complete_archive(p) for p in partials):
            break
        time.sleep(0.5)
    print(f"JVM class archive: written by a one-record apply first "
          f"({time.perf_counter() - started:.1f} s, once per machine; not timed)")  # fmt: skip


def produce(
    bootstrap: str, url: str, topic: str, records: int, partitions: int, pool: int = 0
) -> int:
    """Produce `records` framed Avro values (with `pool` > 0, the first `pool` are framed
    once and cycled, so 10M records take minutes); returns the payload bytes."""
    framer = AvroFramer(url, topic)
    frames = [framer.frame(record(i)) for i in range(pool)] if pool else []
    producer = Producer(broker.producer_config(bootstrap))
    total = 0
    for i in range(records):
        value = frames[i % pool] if pool else framer.frame(record(i))
        total += len(value)
        while True:
            try:
                producer.produce(topic, value, partition=i % partitions)
                break
            except BufferError:
                producer.poll(0.05)
    producer.flush(600)
    return total


def baseline(
    bootstrap: str, url: str, topic: str, out_dir: Path | str, filesystem: Any = None
) -> tuple[float, int]:
    """consume + fastavro decode + Parquet write in one process; returns (seconds, rows).
    `filesystem`: a pyarrow file system `out_dir` is on (S3), else the local disk."""
    started = time.perf_counter()
    watermarks = get_watermarks({"bootstrap.servers": bootstrap}, topic)
    reader = FramedAvroReader(url)
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": "baseline", "enable.auto.commit": False,
    })  # fmt: skip
    consumer.assign([TopicPartition(topic, p, low) for p, (low, _) in watermarks.items()])
    ends = {(topic, p): high for p, (_, high) in watermarks.items()}
    rows: list[dict[str, object]] = []
    writer: pq.ParquetWriter | None = None
    written = 0

    def write() -> None:
        nonlocal rows, writer, written
        table = pa.Table.from_pylist(rows)
        if writer is None:
            writer = pq.ParquetWriter(
                f"{out_dir}/baseline.parquet",
                table.schema,
                compression="zstd",
                filesystem=filesystem,
            )
        writer.write_table(table)
        written += len(rows)
        rows = []

    for messages in consume_to_ends(consumer, ends):
        rows.extend(reader.read(msg.value()) for msg in messages)
        if len(rows) >= 100_000:
            write()
    if rows:
        write()
    if writer is not None:
        writer.close()
    consumer.close()
    return time.perf_counter() - started, written


def write_project(
    root: Path, bootstrap: str, url: str, topic: str, cores: int, **table_keys: Any
) -> Path:
    """A one-table project (`events` reading `topic`, plus `table_keys`) with the embedded
    catalog, as `tableflow init` makes them."""
    table = {"name": "events", "topic": topic, **table_keys}
    return write_tables_project(root, bootstrap, url, cores, [table])


def write_tables_project(
    root: Path,
    bootstrap: str,
    url: str,
    cores: int,
    tables: list[dict[str, Any]],
    catalog: dict[str, Any] | None = None,
    spark_conf: dict[str, str] | None = None,
) -> Path:
    """A project of `tables` (table YAML mappings) in namespace `bench`, embedded catalog
    (`catalog`: keys replacing the file warehouse, e.g. an s3:// one and its storage;
    `spark_conf`: Spark settings of the target)."""
    target = {
        "kafka": {"bootstrap_servers": bootstrap},
        "schema_registry": {"url": url},
        "catalog": {
            "type": "embedded",
            "warehouse": str(root / "warehouse"),
            "port": free_port(HOST),
            # As `tableflow init` writes it (local development).
            "auth": {"mode": "none"},
            **(catalog or {}),
        },
        "spark": {"master": f"local[{cores}]", **({"conf": spark_conf} if spark_conf else {})},
    }
    return write_project_files(
        root, name="bench", target=("bench", target), defaults={"namespace": "bench"}, tables=tables
    )


def tableflow_command(root: Path, *args: str) -> list[str]:
    """The CLI as users run it, in a new process."""
    return [sys.executable, "-m", "tableflow_core", "--project-dir", str(root), *args]


def tree_rss_bytes(pid: int) -> int:
    """Resident memory of a process and its descendants (Linux /proc; 0 once it is gone)."""
    total, stack_ = 0, [pid]
    while stack_:
        current = stack_.pop()
        try:
            status = Path(f"/proc/{current}/status").read_text()
            total += next(
                int(line.split()[1]) * 1024 for line in status.splitlines()
                if line.startswith("VmRSS:")
            )  # fmt: skip
            for task in Path(f"/proc/{current}/task").iterdir():
                stack_.extend(int(c) for c in (task / "children").read_text().split())
        except (OSError, StopIteration, ValueError):
            continue
    return total


def tree_cpu_seconds(pid: int, seen: dict[int, float]) -> None:
    """Record user+sys CPU seconds of a process and its descendants into `seen` (by pid;
    Linux /proc). Sampled while the tree runs: the last interval of a process is missed."""
    tick = os.sysconf("SC_CLK_TCK")
    stack_ = [pid]
    while stack_:
        current = stack_.pop()
        try:
            fields = Path(f"/proc/{current}/stat").read_text().rsplit(")", 1)[1].split()
            seen[current] = (int(fields[11]) + int(fields[12])) / tick  # utime, stime
            for task in Path(f"/proc/{current}/task").iterdir():
                stack_.extend(int(c) for c in (task / "children").read_text().split())
        except (OSError, IndexError, ValueError):
            continue


def cli_measured(
    root: Path,
    *args: str,
    env: dict[str, str] | None = None,
    cpu: dict[int, float] | None = None,
    cwd: Path | None = None,
) -> tuple[float, int]:
    """Run `tableflow ARGS` on the project in a new process: (wall seconds, peak RSS of its
    process tree in bytes: the CLI, the JVM, Spark's Python workers; sampled every 0.2 s).
    `env`: the child's environment (e.g. another PYTHONPATH) and `cwd` its directory (`-m`
    puts the working directory first on sys.path: a tree's own root for an A/B run);
    `cpu` collects the tree's CPU seconds by pid (`tree_cpu_seconds`)."""
    started = time.perf_counter()
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(
            tableflow_command(root, *args), stdout=out, stderr=err, text=True, env=env, cwd=cwd
        )
        peak = 0
        while proc.poll() is None:
            peak = max(peak, tree_rss_bytes(proc.pid))
            if cpu is not None:
                tree_cpu_seconds(proc.pid, cpu)
            time.sleep(0.2)
        seconds = time.perf_counter() - started
        if proc.returncode != 0:
            out.seek(0)
            err.seek(0)
            raise SystemExit(
                f"tableflow {' '.join(args)} failed:\n{out.read()[-3000:]}\n{err.read()[-3000:]}"
            )
    return seconds, peak


def cli(root: Path, *args: str) -> float:
    """Run `tableflow ARGS` on the project in a new process; its wall seconds."""
    return cli_measured(root, *args)[0]


def run_results(root: Path) -> dict[str, Any]:
    return dict(json.loads((root / "target" / "run_results.json").read_text()))


def cli_apply(root: Path) -> tuple[float, dict[str, object], int]:
    """`tableflow apply --auto-approve` in a new process: (wall seconds, its table result,
    peak RSS bytes of its process tree)."""
    seconds, peak = cli_measured(root, "apply", "--auto-approve")
    return seconds, run_results(root)["tables"][0], peak


class RunProcess:
    """`tableflow run` in its own process; its stdout lines kept with arrival times."""

    def __init__(
        self,
        root: Path,
        log: Path,
        *args: str,
        env: dict[str, str] | None = None,
        cwd: Path | None = None,
    ) -> None:
        env = {**(env or os.environ), "PYTHONUNBUFFERED": "1", "COLUMNS": "200"}
        self._log = log.open("w")  # stderr
        self._out = log.with_suffix(".out").open("w")  # stdout, each line with its time
        self.proc = subprocess.Popen(
            tableflow_command(root, "run", *args),
            stdout=subprocess.PIPE, stderr=self._log, text=True, env=env, cwd=cwd,
        )  # fmt: skip
        self.lines: list[tuple[float, str]] = []
        self._changed = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        started = time.monotonic()
        for line in self.proc.stdout:
            with self._changed:
                self.lines.append((time.monotonic(), line.rstrip("\n")))
                self._out.write(f"{self.lines[-1][0] - started:9.2f} {line}")
                self._out.flush()
                self._changed.notify_all()
        with self._changed:
            self._changed.notify_all()

    def cycles(self) -> list[tuple[float, str]]:
        with self._changed:
            return [(at, line) for at, line in self.lines if CYCLE_LINE.match(line)]

    def wait_cycles(self, count: int, timeout: float) -> list[tuple[float, str]]:
        """Wait until `count` cycles have ended; fails if the process exits first."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while len(self.cycles()) < count:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(self.failure(f"waiting for cycle {count}"))
                self._changed.wait(0.5)
            return self.cycles()

    def failure(self, doing: str) -> str:
        output = "\n".join(line for _, line in self.lines[-30:])
        return f"tableflow run ({doing}): exit code {self.proc.poll()}\n{output}\n(see {self._log.name})"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(120)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._reader.join(10)
        self._log.close()
        self._out.close()

    def cycle_seconds(self, interval: float, since: float = 0.0) -> list[float]:
        """Wall time of each cycle that applied something and started after `since`
        (time.monotonic()), from its start to its output line. `tableflow run` is
        fixed-rate (runner/schedule.py): a cycle starts one interval after the previous
        one started, or at once if that one took longer; the first starts at the run's
        "Refreshing ..." line. (Assumes one interval for every table, as the benchmarks
        configure.)"""
        return [
            end - start
            for start, end, line in self._schedule(interval)
            if line.startswith("Apply") and start >= since
        ]

    def next_cycle_start(self, interval: float) -> float | None:
        """When (time.monotonic()) the cycle after the last ended one starts: one interval
        after that one started, or at its end if it overran; None before the first."""
        schedule = self._schedule(interval)
        if not schedule:
            return None
        start, end, _ = schedule[-1]
        return max(start + interval, end)

    def _schedule(self, interval: float) -> list[tuple[float, float, str]]:
        """Each ended cycle: (start, end, its output line), by runner/schedule.py's rule."""
        with self._changed:
            first = next((at for at, line in self.lines if line.startswith("Refreshing")), None)
        if first is None:
            return []
        schedule: list[tuple[float, float, str]] = []
        start = first
        for end, line in self.cycles():
            if schedule:
                start = max(schedule[-1][0] + interval, schedule[-1][1])
            schedule.append((start, end, line))
        return schedule


@dataclass(frozen=True)
class WarmCycle:
    seconds: float  # the cycle's apply, start to end (run_results.json); its plan is apart
    apply_s: float  # run_results.json: the apply's duration
    engine_s: float  # run_results.json: the table's duration
    interval: int


def warm_run(
    work: Path,
    bootstrap: str,
    url: str,
    records: int,
    args: argparse.Namespace,
    interval: int,
    name: str = "run",
    spark_conf: dict[str, str] | None = None,
) -> WarmCycle:
    """`tableflow run` on a new topic: a first cycle creates the table and ingests
    `--warmup` records (JVM, Python workers and catalog warm), then `records` are produced
    before the next cycle is due; that cycle is the one measured. `name`: the topic's and
    project's suffix (one per run of an A/B); `spark_conf`: the target's Spark settings."""
    topic = f"bench_{name}"
    broker.create_topics(bootstrap, {topic: args.partitions})
    produce(bootstrap, url, topic, args.warmup, args.partitions)
    table = {
        "name": "events", "topic": topic, "metadata_columns": list(METADATA_COLUMNS),
        "refresh_interval": f"{interval}s",
    }  # fmt: skip
    root = write_tables_project(
        work / f"{name}_project", bootstrap, url, args.cores, [table], spark_conf=spark_conf
    )
    run = RunProcess(root, work / "run.log")
    try:
        run.wait_cycles(1, timeout=900)
        warm = run_results(root)["tables"][0]
        if warm["records_written"] != args.warmup:
            raise SystemExit(run.failure(f"the warm-up cycle wrote {warm['records_written']}"))
        produce(bootstrap, url, topic, records, args.partitions)
        produced_at = time.time()
        run.wait_cycles(2, timeout=interval + 900)
        results = run_results(root)
    finally:
        run.stop()
    table = results["tables"][0]
    # The scheduler is fixed-rate (runner/schedule.py): the measured cycle starts one
    # interval after the warm-up cycle *started*. Its apply's own clock is in run_results.
    started = dt.datetime.fromisoformat(results["started_at"]).timestamp()
    if started < produced_at:
        raise SystemExit(
            f"a cycle started while records were still being produced (interval {interval}s); "
            "pass a larger --run-interval"
        )
    if table["records_written"] != records:
        raise SystemExit(f"the measured cycle wrote {table['records_written']}, not {records}")
    finished = dt.datetime.fromisoformat(results["finished_at"]).timestamp()
    return WarmCycle(finished - started, results["duration_s"], table["duration_s"], interval)


def run_ab(
    work: Path, bootstrap: str, url: str, args: argparse.Namespace, interval: int, base_s: float
) -> None:
    """`--run-ab ROUNDS`: the warm cycle of `records` with the defaults and with
    `--spark-conf`, ROUNDS each, alternating (the order swapped every other round), each
    its own `tableflow run` on its own topic; prints every cycle and the ratio of the
    medians (with/without: below 1 is faster with `--spark-conf`)."""
    sides: dict[str, list[WarmCycle]] = {"defaults": [], "with --spark-conf": []}
    conf = dict(args.spark_conf)
    for i in range(args.run_ab):
        order = ["defaults", "with --spark-conf"]
        for side in order if i % 2 == 0 else order[::-1]:
            name = f"run{i}_{'a' if side == 'defaults' else 'b'}"
            cycle = warm_run(
                work, bootstrap, url, args.records, args, interval, name,
                conf if side != "defaults" else None,
            )  # fmt: skip
            sides[side].append(cycle)
            print(f"round {i} {side}: warm cycle {cycle.seconds:.2f} s, the table "
                  f"{cycle.engine_s:.2f} s (baseline {base_s:.2f} s), load "
                  f"{os.getloadavg()[0]:.1f}", flush=True)  # fmt: skip
    medians = {
        side: (
            statistics.median(c.seconds for c in cycles),
            statistics.median(c.engine_s for c in cycles),
        )
        for side, cycles in sides.items()
    }
    (a_cycle, a_table), (b_cycle, b_table) = medians.values()
    print(f"--spark-conf {conf}")
    print(f"warm cycle of {args.records:,} records, medians: defaults {a_cycle:.2f} s (table "
          f"{a_table:.2f} s), with --spark-conf {b_cycle:.2f} s (table {b_table:.2f} s); "
          f"with/without {b_cycle / a_cycle:.2f}x (table {b_table / a_table:.2f}x)")  # fmt: skip


S3_KEY_ID_ENV, S3_SECRET_ENV = "BENCH_S3_ACCESS_KEY_ID", "BENCH_S3_SECRET_ACCESS_KEY"


def s3_catalog(root: Path, endpoint: str, prefix: str) -> dict[str, Any]:
    """The embedded catalog's keys for a warehouse on the benchmark's S3 server; the keys
    through env_var(), as a user writes them."""
    return {
        "warehouse": f"s3://warehouse/{prefix}",
        "database_url": f"sqlite:///{root / 'catalog.db'}",
        "storage": {
            "endpoint": endpoint,
            "access_key_id": f"{{{{ env_var('{S3_KEY_ID_ENV}') }}}}",
            "secret_access_key": f"{{{{ env_var('{S3_SECRET_ENV}') }}}}",
        },
    }


def s3_filesystem(server: RunningS3Server, endpoint: str) -> Any:
    from pyarrow import fs

    return fs.S3FileSystem(
        access_key=server.credentials.access_key_id,
        secret_key=server.credentials.secret_access_key.get_secret_value(),
        endpoint_override=endpoint.removeprefix("http://"),
        scheme="http",
        region=server.region,
    )


def s3_main(args: argparse.Namespace, work: Path, bootstrap: str, url: str) -> None:
    """`--warehouse s3`: baselines on file:// and S3, apply on file:// and S3, requests."""
    topic = "bench_events"
    broker.create_topics(bootstrap, {topic: args.partitions})
    payload = produce(bootstrap, url, topic, args.records, args.partitions)
    with (
        start_s3_server(S3ServerSettings(data_dir=work / "s3")) as server,
        FaultProxy(upstream=server.endpoint) as proxy,
    ):
        os.environ[S3_KEY_ID_ENV] = server.credentials.access_key_id
        os.environ[S3_SECRET_ENV] = server.credentials.secret_access_key.get_secret_value()
        load_before = os.getloadavg()
        file_base_s, rows = baseline(bootstrap, url, topic, work)
        assert rows == args.records, rows
        proxy.reset_requests()
        s3_base_s, rows = baseline(
            bootstrap, url, topic, "warehouse/baseline", s3_filesystem(server, proxy.endpoint)
        )
        assert rows == args.records, rows
        baseline_requests = len(proxy.requests)
        keys = {"metadata_columns": list(METADATA_COLUMNS)}
        file_root = write_project(work / "file", bootstrap, url, topic, args.cores, **keys)
        file_s, file_result, _ = cli_apply(file_root)
        assert file_result["records_written"] == args.records, file_result
        s3_root = work / "s3project"
        write_tables_project(
            s3_root, bootstrap, url, args.cores, [{"name": "events", "topic": topic, **keys}],
            catalog=s3_catalog(s3_root, proxy.endpoint, "bench"),
        )  # fmt: skip
        proxy.reset_requests()
        s3_s, s3_result, _ = cli_apply(s3_root)
        assert s3_result["records_written"] == args.records, s3_result
        requests = proxy.requests
        commits = s3_commits(server)
        load_after = os.getloadavg()

    line = functools.partial(
        throughput_line, base_s=file_base_s, records=args.records, payload=payload
    )

    by_method: dict[str, int] = {}
    for request in requests:
        by_method[request.method] = by_method.get(request.method, 0) + 1
    print(f"load average before measuring: {load_before[0]:.2f}, after: {load_after[0]:.2f} "
          f"({os.cpu_count()} cores); ratios are to the file:// baseline")  # fmt: skip
    print(line("baseline, Parquet to file:// (1 process)", file_base_s))
    print(line("baseline, Parquet to S3 (1 process)", s3_base_s)
          + f"  ({baseline_requests} S3 requests)")  # fmt: skip
    print(line(f"tableflow apply, file:// (CLI, local[{args.cores}])", file_s, COLD_APPLY_TARGET))
    print(line(f"tableflow apply, S3 (CLI, local[{args.cores}])", s3_s, COLD_APPLY_TARGET))
    print(f"tableflow apply on S3 vs the S3 baseline: {s3_base_s / s3_s:.2f}x; "
          f"vs apply on file://: {file_s / s3_s:.2f}x")  # fmt: skip
    methods = ", ".join(f"{n} {m}" for m, n in sorted(by_method.items()))
    print(f"S3 requests of the S3 apply (Spark + catalog, create table + commit): "
          f"{len(requests)} ({methods}); Iceberg commits: {commits}; "
          f"per commit: {len(requests) / max(commits, 1):.0f}")  # fmt: skip


def throughput_line(
    name: str,
    seconds: float,
    target: float | None = None,
    *,
    base_s: float,
    records: int,
    payload: int,
) -> str:
    """One figure: seconds, records/s, MB/s and the ratio of the baseline's seconds to
    these (with the target it is held to, if any)."""
    ratio = base_s / seconds
    goal = "" if target is None else (
        f"  target >= {target:g}x: {'met' if ratio >= target else 'NOT met'}"
    )  # fmt: skip
    return (f"{name:<52} {seconds:7.2f} s  {records / seconds:>10,.0f} records/s  "
            f"{payload / seconds / 1e6:6.1f} MB/s  ratio {ratio:4.2f}{goal}")  # fmt: skip


def s3_commits(server: RunningS3Server) -> int:
    """Metadata files written under the benchmark's table: one per catalog commit (the
    table's creation included)."""
    pages = (
        server.client()
        .get_paginator("list_objects_v2")
        .paginate(Bucket=server.bucket, Prefix="bench/")
    )
    return sum(
        1
        for page in pages
        for item in page.get("Contents", [])
        if item["Key"].endswith(".metadata.json")
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--warmup", type=int, default=10_000, help="records of the warm cycle")
    parser.add_argument(
        "--run-interval", type=int, default=0,
        help="refresh_interval of the warm run, s (default: from the time producing took)",
    )  # fmt: skip
    parser.add_argument("--skip-apply", action="store_true", help="only the warm run")
    parser.add_argument("--skip-run", action="store_true", help="only the applies")
    parser.add_argument(
        "--spark-conf", action="append", default=[], metavar="KEY=VALUE",
        type=lambda text: tuple(text.split("=", 1)),
        help="with --run-ab: a Spark conf entry of the B side's target; repeatable",
    )  # fmt: skip
    parser.add_argument(
        "--run-ab", type=int, default=0, metavar="ROUNDS",
        help="the warm run cycle ROUNDS times with the defaults and with --spark-conf",
    )  # fmt: skip
    parser.add_argument(
        "--warehouse", choices=("file", "s3"), default="file",
        help="s3: apply on S3 against the file:// baseline and S3 requests per commit",
    )  # fmt: skip
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="tf-bench-"))
    with stack(work) as (bootstrap, url):
        if args.warehouse == "s3":
            s3_main(args, work, bootstrap, url)
            return
        topic = "bench_events"
        broker.create_topics(bootstrap, {topic: args.partitions})
        started = time.perf_counter()
        payload = produce(bootstrap, url, topic, args.records, args.partitions)
        produce_s = time.perf_counter() - started
        print(f"produced {args.records:,} records, {payload / 1e6:.1f} MB payload "
              f"({payload / args.records:.0f} B/record) in {produce_s:.1f}s")  # fmt: skip
        load_before = os.getloadavg()

        base_s, base_rows = baseline(bootstrap, url, topic, work)
        assert base_rows == args.records, base_rows

        if not args.skip_apply:
            root = write_project(
                work / "project", bootstrap, url, topic, args.cores,
                metadata_columns=list(METADATA_COLUMNS),
            )  # fmt: skip
            first_s, first, first_rss = cli_apply(root)
            assert first["records_written"] == args.records, first
            produce(bootstrap, url, topic, args.records, args.partitions)
            second_s, second, second_rss = cli_apply(root)
            assert second["records_written"] == args.records, second
        if not args.skip_run:
            # Fixed rate: the warm-up cycle (JVM start, table creation) and producing the
            # records must both fit in one interval.
            interval = args.run_interval or max(10, int(produce_s * 1.5) + 40)
            if args.run_ab:
                run_ab(work, bootstrap, url, args, interval, base_s)
                return
            cycle = warm_run(work, bootstrap, url, args.records, args, interval)

        line = functools.partial(
            throughput_line, base_s=base_s, records=args.records, payload=payload
        )

        load_after = os.getloadavg()
        print(f"load average before measuring: {load_before[0]:.2f}, after: {load_after[0]:.2f} "
              f"({os.cpu_count()} cores)")  # fmt: skip
        print(line("baseline (1 process, consume+decode+Parquet)", base_s))
        if not args.skip_apply:
            print(line(f"tableflow apply, new table (CLI, local[{args.cores}])", first_s,
                       COLD_APPLY_TARGET))  # fmt: skip
            print(line("tableflow apply, existing table (CLI)", second_s, COLD_APPLY_TARGET))
            print(f"engine time inside apply (run_results): first {first['duration_s']:.2f} s, "
                  f"second {second['duration_s']:.2f} s")  # fmt: skip
            print(f"peak RSS of the apply's process tree (CLI + JVM + Python workers; the "
                  f"broker apart): first {first_rss / 1e9:.2f} GB, second {second_rss / 1e9:.2f} GB; "
                  f"issue 13 target <= {RSS_TARGET_GB:g} GB at 1M records")  # fmt: skip
        if not args.skip_run:
            print(line(f"tableflow run, warm cycle (CLI, refresh {cycle.interval}s)",
                       cycle.seconds, WARM_RUN_TARGET))  # fmt: skip
            print(f"inside the warm cycle's apply (run_results): the table {cycle.engine_s:.2f} s; "
                  "the cycle's plan (pyiceberg, registry, watermarks) is not included")  # fmt: skip


if __name__ == "__main__":
    main()
