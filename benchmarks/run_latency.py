"""Produce-to-committed latency of `tableflow run` (the CLI users run) vs a minimal loop.

    .venv/bin/python benchmarks/run_latency.py --rate 1000 --seconds 60
    .venv/bin/python benchmarks/run_latency.py --rate 20000 --seconds 60

Starts its own Apache Kafka broker and dev registry (127.0.0.1, free ports). For each of the
two contenders, a producer thread produces Confluent-framed Avro records (the 10-field
event of ingest.py) at a fixed rate to a fresh 4-partition topic, and every record's
produce time is its Kafka CreateTime (set by librdkafka when `produce()` is called, read
back from the delivery report with its partition and offset).

- **baseline**: one Python process (spawned) in a loop with the same cadence as
  `tableflow run` (fixed rate: the next cycle starts `--interval` seconds after the
  previous one started, or at once if that one took longer): read the high watermarks, consume up to them (one consumer, assigned, kept open
  across cycles), decode with fastavro, `pyarrow.Table` of the decoded columns, one
  pyiceberg `append` (SqlCatalog on SQLite, tmp warehouse) carrying the offsets in the
  snapshot summary. No metadata columns, no branch, no audits: the least any tool must
  do to commit a batch with its offsets.
- **tableflow**: `python -m tableflow_core --project-dir DIR run` as its own process on a
  one-table project (embedded catalog, Spark local[cores], `refresh_interval` =
  `--interval`), as users run it.

Each contender is warmed first: one second's worth of records is produced and waited for
(so the table exists and, for tableflow, the JVM and Python workers are warm), then the
producer runs for `--seconds`. When it is done, the benchmark waits until every produced
offset is committed, then stops the contender.

Latency of a record = the time its table's `main` moved to the first snapshot whose
`tableflow.offsets` cover the record, minus its produce time. The commit time is the
table's snapshot-log entry (the catalog's clock when `main` changed; for tableflow's
write-then-fast-forward that is the fast-forward, not the branch write), falling back to
the snapshot's `timestamp-ms`. The table is polled through pyiceberg (SqlCatalog on the
catalog's SQLite file, read-only) twice a second only to know when everything is
committed; the latencies come from the snapshot history afterwards, so the poll's timing
does not enter the figures. Targets (issue 13): p95 <= 3 s at 1k records/s, <= 10 s at
20k records/s.
"""

from __future__ import annotations

import argparse
import datetime as dt
import multiprocessing as mp
import os
import tempfile
import time
from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from multiprocessing.synchronize import Event as EventType
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition
from ingest import (
    AvroFramer,
    FramedAvroReader,
    OffsetCommit,
    RunProcess,
    consume_to_ends,
    offset_commits,
    record,
    stack,
    write_tables_project,
)

from tableflow_core.catalog.service import open_sql_catalog
from tableflow_core.dev import broker
from tableflow_core.kafka.admin import get_watermarks
from tableflow_core.state.offsets import OFFSETS_KEY, encode_offsets

PARTITIONS = 4
NAMESPACE = "bench"
CATALOG = "tableflow"  # the embedded catalog's default name (SqlCatalog rows are per name)
# issue 13: p95 produce-to-committed latency at a rate (records/s).
P95_TARGETS_S = {1_000: 3.0, 20_000: 10.0}
ARROW_SCHEMA = pa.schema([
    ("id", pa.int64()), ("user", pa.string()), ("amount", pa.float64()), ("qty", pa.int32()),
    ("active", pa.bool_()), ("at", pa.timestamp("us", tz="UTC")), ("city", pa.string()),
    ("score", pa.float32()), ("kind", pa.string()), ("day", pa.date32()),
])  # fmt: skip


def p95_target(rate: int) -> float | None:
    """The issue's target for the smallest listed rate >= `rate` (None above them all)."""
    fitting = [target for listed, target in sorted(P95_TARGETS_S.items()) if rate <= listed]
    return fitting[0] if fitting else None


# --- producing at a fixed rate --------------------------------------------------------


@dataclass
class Produced:
    """Produce time (ms, Kafka CreateTime) of every delivered record, by (topic, partition)."""

    offsets: dict[tuple[str, int], array[int]] = field(default_factory=dict)
    times_ms: dict[tuple[str, int], array[int]] = field(default_factory=dict)
    errors: int = 0
    seconds: float = 0.0

    def delivered(self, err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            self.errors += 1
            return
        key = (str(msg.topic()), int(msg.partition() or 0))
        self.offsets.setdefault(key, array("q")).append(int(msg.offset() or 0))
        self.times_ms.setdefault(key, array("q")).append(int(msg.timestamp()[1]))

    @property
    def count(self) -> int:
        return sum(len(offsets) for offsets in self.offsets.values())

    def next_offsets(self, topic: str) -> dict[int, int]:
        """Partition -> one past the last delivered offset (what a commit must reach)."""
        return {p: max(o) + 1 for (t, p), o in self.offsets.items() if t == topic and o}


class RateProducer:
    """Produces framed Avro records at `rate` records/s, round-robin over topics and
    partitions, recording each record's produce time from its delivery report."""

    def __init__(self, bootstrap: str, url: str, topics: Sequence[str], partitions: int) -> None:
        self.framers = [AvroFramer(url, topic) for topic in topics]
        self.topics = list(topics)
        self.partitions = partitions
        self.producer = Producer(broker.producer_config(bootstrap, **{"linger.ms": 5}))
        self.sent = 0

    def run(self, rate: float, seconds: float) -> Produced:
        """Produce `rate * seconds` records, paced evenly; returns when all are delivered."""
        produced = Produced()
        total = int(rate * seconds)
        count = 0
        started = time.monotonic()
        while count < total:
            due = min(total, int(rate * (time.monotonic() - started)) + 1)
            while count < due:
                self._produce(self.sent, produced)
                self.sent += 1
                count += 1
            self.producer.poll(0)
            time.sleep(0.002)
        self.producer.flush(60)
        produced.seconds = time.monotonic() - started
        return produced

    def _produce(self, i: int, produced: Produced) -> None:
        which = i % len(self.topics)
        value = self.framers[which].frame(record(i))
        partition = (i // len(self.topics)) % self.partitions
        while True:
            try:
                self.producer.produce(
                    self.topics[which], value, partition=partition, on_delivery=produced.delivered
                )
                return
            except BufferError:
                self.producer.poll(0.01)


# --- reading commits back -------------------------------------------------------------


def commit_history(table: Any, topic: str) -> list[OffsetCommit]:
    """The commits on main's ancestry carrying `tableflow.offsets`, oldest first."""
    return list(offset_commits(table, topic))[::-1]


@dataclass(frozen=True)
class Latencies:
    seconds: np.ndarray  # one per measured record
    commits: int  # commits that covered measured records
    uncommitted: int  # measured records no commit covers


def latencies(produced: Produced, topic: str, commits: list[OffsetCommit]) -> Latencies:
    parts: list[np.ndarray] = []
    used = 0
    covered = 0
    previous: dict[int, int] = {}
    arrays = {
        p: (np.frombuffer(produced.offsets[(t, p)], dtype=np.int64),
            np.frombuffer(produced.times_ms[(t, p)], dtype=np.int64))
        for (t, p) in produced.offsets if t == topic
    }  # fmt: skip
    for commit in commits:
        counted = 0
        for partition, next_offset in commit.offsets.items():
            low = previous.get(partition, 0)
            previous[partition] = next_offset
            if partition not in arrays:
                continue
            offsets, times = arrays[partition]
            mask = (offsets >= low) & (offsets < next_offset)
            counted += int(mask.sum())
            parts.append((commit.at_ms - times[mask]) / 1000.0)
        covered += counted
        used += counted > 0
    values = np.concatenate(parts) if parts else np.zeros(0)
    measured = sum(len(o) for (t, _), o in produced.offsets.items() if t == topic)
    return Latencies(values, used, measured - covered)


def committed_offsets(load: Callable[[], Any], topic: str) -> dict[int, int]:
    try:
        commits = commit_history(load(), topic)
    except Exception:  # the table does not exist yet, or SQLite is busy: poll again
        return {}
    return commits[-1].offsets if commits else {}


def wait_committed(
    load: Callable[[], Any], topic: str, target: dict[int, int], timeout: float
) -> bool:
    """Poll (twice a second) until the committed offsets reach `target`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done = committed_offsets(load, topic)
        if all(done.get(p, 0) >= o for p, o in target.items()):
            return True
        time.sleep(0.5)
    return False


def sql_table_loader(warehouse: Path, name: str) -> Callable[[], Any]:
    """Loads `bench.<name>` from the SQLite catalog database beside `warehouse` (the
    embedded catalog's default), without going through the catalog server."""
    catalog = open_sql_catalog(CATALOG, f"sqlite:///{warehouse / 'catalog.db'}", warehouse.as_uri())
    return lambda: catalog.load_table((NAMESPACE, name))


# --- the baseline loop ----------------------------------------------------------------


def baseline_loop(
    bootstrap: str, url: str, topic: str, warehouse: str, interval: float, stop: EventType
) -> None:
    """consume + decode + pyiceberg append every `interval` seconds (fixed rate)."""
    catalog = open_sql_catalog(
        CATALOG, f"sqlite:///{warehouse}/catalog.db", Path(warehouse).as_uri()
    )
    catalog.create_namespace(NAMESPACE)
    table = catalog.create_table((NAMESPACE, "events"), schema=ARROW_SCHEMA)
    reader = FramedAvroReader(url)
    kafka = {"bootstrap.servers": bootstrap}
    consumer = Consumer({
        **kafka, "group.id": "baseline", "enable.auto.commit": False,
    })  # fmt: skip
    positions = {p: 0 for p in range(PARTITIONS)}
    consumer.assign([TopicPartition(topic, p, 0) for p in positions])
    while not stop.is_set():
        began = time.monotonic()
        marks = get_watermarks(kafka, topic)
        ends = {(topic, p): high for p, (_, high) in marks.items() if high > positions[p]}
        rows: list[dict[str, Any]] = []
        for messages in consume_to_ends(consumer, ends):
            for msg in messages:
                rows.append(reader.read(msg.value() or b""))
                positions[int(msg.partition() or 0)] = int(msg.offset() or 0) + 1
        if rows:
            table.append(
                pa.Table.from_pylist(rows, schema=ARROW_SCHEMA),
                snapshot_properties={OFFSETS_KEY: encode_offsets(topic, positions)},
            )
        stop.wait(max(0.0, began + interval - time.monotonic()))
    consumer.close()


# --- measuring one contender ----------------------------------------------------------


@dataclass
class Measured:
    name: str
    produced: Produced
    latency: Latencies
    topic: str
    started: float  # time.monotonic() when the measured production began


def measure(
    name: str,
    bootstrap: str,
    url: str,
    topic: str,
    rate: float,
    seconds: float,
    load: Callable[[], Any],
) -> Measured:
    """Warm up (one second of records, committed), then produce for `seconds` and wait
    until every record is committed; the contender must be running already."""
    producer = RateProducer(bootstrap, url, [topic], PARTITIONS)
    warm = producer.run(rate, 1.0)
    if not wait_committed(load, topic, warm.next_offsets(topic), timeout=300):
        raise SystemExit(f"{name}: the warm-up records were not committed within 300 s")
    started = time.monotonic()
    produced = producer.run(rate, seconds)
    if not wait_committed(load, topic, produced.next_offsets(topic), timeout=max(300, 5 * seconds)):
        print(f"{name}: not every record was committed in time")
    lat = latencies(produced, topic, commit_history(load(), topic))
    return Measured(name, produced, lat, topic, started)


def report(rows: list[Measured], rate: int, seconds: float, target: float | None) -> None:
    goal = f"p95 <= {target:g} s" if target is not None else "no target at this rate"
    print(f"\nrate {rate:,} records/s for {seconds:g} s; issue 13 target: {goal}")
    print(f"{'contender':<52} {'records':>9} {'rate/s':>8} {'commits':>7} "
          f"{'p50 s':>6} {'p95 s':>6} {'max s':>6}  vs target")  # fmt: skip
    for row in rows:
        lat = row.latency.seconds
        p50, p95, top = (
            (float(np.percentile(lat, 50)), float(np.percentile(lat, 95)), float(lat.max()))
            if len(lat) else (float("nan"),) * 3
        )  # fmt: skip
        verdict = "" if target is None else ("met" if p95 <= target else "NOT met")
        achieved = row.produced.count / row.produced.seconds
        print(f"{row.name:<52} {row.produced.count:>9,} {achieved:>8,.0f} "
              f"{row.latency.commits:>7} {p50:6.2f} {p95:6.2f} {top:6.2f}  {verdict}")  # fmt: skip
        if row.latency.uncommitted or row.produced.errors:
            print(f"  ! {row.latency.uncommitted} records not committed, "
                  f"{row.produced.errors} delivery errors")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rate", type=int, default=1_000, help="records/s")
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--interval", type=int, default=1, help="refresh_interval, seconds")
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--skip-baseline", action="store_true")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="tf-bench-latency-"))
    print(f"work dir {work}; started {dt.datetime.now(dt.UTC):%H:%M:%S} UTC")
    rows: list[Measured] = []
    with stack(work) as (bootstrap, url):
        broker.create_topics(bootstrap, {"latency_base": PARTITIONS, "latency_run": PARTITIONS})
        load_before = os.getloadavg()
        if not args.skip_baseline:
            warehouse = work / "baseline"
            warehouse.mkdir()
            stop = mp.get_context("spawn").Event()
            loop = mp.get_context("spawn").Process(
                target=baseline_loop,
                args=(bootstrap, url, "latency_base", str(warehouse), args.interval, stop),
            )
            loop.start()
            try:
                name = f"baseline (1 process, pyiceberg append, {args.interval}s cadence)"
                load = sql_table_loader(warehouse, "events")
                rows.append(
                    measure(name, bootstrap, url, "latency_base", args.rate, args.seconds, load)
                )
            finally:
                stop.set()
                loop.join(60)
                if loop.is_alive():
                    loop.kill()
        root = write_tables_project(
            work / "project", bootstrap, url, args.cores,
            [{"name": "events", "topic": "latency_run", "refresh_interval": f"{args.interval}s"}],
        )  # fmt: skip
        AvroFramer(
            url, "latency_run"
        )  # the value schema registered: the first cycle creates the table
        run = RunProcess(root, work / "run.log")
        try:
            run.wait_cycles(1, timeout=300)
            load = sql_table_loader(root / "warehouse", "events")
            name = f"tableflow run (CLI, refresh_interval {args.interval}s, local[{args.cores}])"
            rows.append(measure(name, bootstrap, url, "latency_run", args.rate, args.seconds, load))
        finally:
            run.stop()
        load_after = os.getloadavg()
    print(f"load average before: {load_before[0]:.2f}, after: {load_after[0]:.2f} "
          f"({os.cpu_count()} cores)")  # fmt: skip
    report(rows, args.rate, args.seconds, p95_target(args.rate))
    times = run.cycle_seconds(args.interval, since=rows[-1].started)
    if times:
        print(f"tableflow run: {len(run.cycles())} cycles; the {len(times)} that applied "
              f"something after the warm-up took (plan + apply) median {np.median(times):.2f} s, "
              f"max {max(times):.2f} s")  # fmt: skip


if __name__ == "__main__":
    main()
