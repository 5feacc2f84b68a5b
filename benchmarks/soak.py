"""Soak of `tableflow run` (issue 42): does a table cost the same after hours as at first?

    .venv/bin/python benchmarks/soak.py --tables 3 --rate 100 --seconds 600 --window 120
    .venv/bin/python benchmarks/soak.py --accelerated --commits 20000 --seconds 1800

Starts its own Apache Kafka broker and dev registry (127.0.0.1, free ports), writes a
project on the embedded catalog (file warehouse, Spark local[2]) and starts
`python -m tableflow_core --project-dir DIR run` as its own process, as users run it.

- **soak** (default): `--tables` tables at `--interval` (1s), cycling through three
  kinds: a plain append table, an upsert table (string keys over `--keys` ids, so rows are
  updated), and a table with a range check routing ~5% of its rows and every undecodable
  record (one in 200) to an Iceberg dead-letter table. Each table's topic (2 partitions)
  gets `--rate` records/s from one producer thread. Every table has the project
  template's maintenance block (compaction on 10 commits or 20 small files, or hourly;
  `expire_snapshots: true`, the history rule of maintenance/history.py).
- **accelerated** (`--accelerated`): one plain append table refreshed every 100 ms with a
  trickle of records (`--rate`, default 20/s): tiny batches as fast as `run` commits,
  until `--commits` commits or `--seconds`, standing for weeks of history.

`--metrics-ab ROUNDS` (issue 43: the metrics cost nothing measurable) runs the soak
2 x ROUNDS times on the same broker and registry, without and with `--metrics-port 0`,
alternating (the order swapped every other round; each run its own topics and
warehouse), and prints each run's figures after its warm-up window, then per figure the
medians of both sides, their ratio and the spread of the side without:

    .venv/bin/python benchmarks/soak.py --tables 3 --rate 50 --seconds 120 --window 60 --metrics-ab 3

It measures each `--window` seconds and prints at the end, per window (its load average
at the window's end): the time between a table's consecutive
commits, p50/p95 over every table (`commit every`: a cycle's length as each table lives
it, maintenance included, whichever cycles run beside it), produce-to-commit freshness
p95 (each record's Kafka CreateTime to the moment `main` moved to the first snapshot
whose offsets cover it, from the snapshot log, polled every 2 s so expiry cannot hide a
commit), its p95 per table kind (append and upsert tables refresh in `run`'s shared
lane, each checked table in a lane of its own), and per table its freshness p95 and at
the window's end: metadata.json bytes, metadata files,
manifests in the current snapshot, data and delete files, scan planning time of pyiceberg
(`scan().plan_files()`) and DuckDB (`EXPLAIN` over `iceberg_scan`: reads the metadata and
manifests), the median of 3 each; pyiceberg's planning sampled every `PLAN_EVERY_S` too
(its median over the window is what `scan plan last/first` compares: the files a reader
plans over rise and fall between compactions, so one sample at the window's end says
where that moment fell more than how planning costs); and the run tree's RSS (median of
its samples) and CPU share. The first window is the warm-up (the JVM starts, tables are created): ratios
compare the last window with the second.

At the end the producer stops, the benchmark waits until every table committed every
produced offset, stops `run` with SIGTERM, and checks every record exactly once: by
(partition, offset) in its table or, for the checked table, in its table or the
dead-letter table; for the upsert table, each key's row is its latest record.
Last lines:

    commit p95 last/first window: X.XXx
    scan plan last/first window: X.XXx
    metadata.json bytes at the end: N
    rss last/first window: X.XXx
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from array import array
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from confluent_kafka import KafkaError, Message, Producer
from ingest import (
    AvroFramer,
    OffsetCommit,
    RunProcess,
    offset_commits,
    record,
    servers,
    tree_cpu_seconds,
    tree_rss_bytes,
    write_tables_project,
)

from tableflow_core.catalog.service import open_sql_catalog
from tableflow_core.dev import broker
from tableflow_core.readers.duckdb_reader import duckdb_connection

HOST = "127.0.0.1"
NAMESPACE = "bench"
CATALOG = "tableflow"
PARTITIONS = 2
KINDS = ("append", "upsert", "checked")
DLQ_TABLE = "bad_records"
GARBAGE_EVERY = 200  # one undecodable record in this many, on checked tables
# With `--metrics-port`, the soak scrapes /metrics and /readyz this often, as a Prometheus
# server would (its default is 1 minute; 5 s makes the scrapes' cost easier to see).
SCRAPE_EVERY_S = 5.0
PLAN_EVERY_S = 60.0  # between samples of pyiceberg's scan planning of each table
PSS_EVERY = 5  # polls (2 s apart) between PSS samples: smaps_rollup walks every mapping
# The project template's block (project_template/tableflow_project.yml).
TEMPLATE_MAINTENANCE = {
    "every": "1h",
    "compact": {"every_commits": 10, "every_small_files": 20},
    "expire_snapshots": True,
}


# --- the stack and the project ------------------------------------------------------


@dataclass(frozen=True)
class SoakTable:
    name: str
    topic: str
    kind: str  # append | upsert | checked


def table_yaml(table: SoakTable, interval: str) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "name": table.name,
        "topic": table.topic,
        "value": {"format": "avro"},
        "metadata_columns": ["partition", "offset"],
        "refresh_interval": interval,
        "maintenance": TEMPLATE_MAINTENANCE,
    }
    if table.kind == "upsert":
        spec |= {"mode": "upsert", "key": {"format": "string"}, "key_columns": ["id"]}
    if table.kind == "checked":
        spec |= {
            "on_error": "dlq",
            "dlq": {"type": "iceberg", "table": f"{NAMESPACE}.{DLQ_TABLE}"},
            "checks": [{"type": "range", "column": "qty", "max": 94, "on_failure": "dlq"}],
        }
    return spec


def write_project(
    root: Path,
    bootstrap: str,
    url: str,
    tables: list[SoakTable],
    interval: str,
    spark_conf: dict[str, str] | None = None,
) -> None:
    """The soak's project: ingest.py's (embedded catalog, namespace `bench`) on 2 cores,
    `spark_conf` in its target's Spark settings."""
    write_tables_project(
        root, bootstrap, url, 2, [table_yaml(t, interval) for t in tables], spark_conf=spark_conf
    )


# --- producing ----------------------------------------------------------------------


@dataclass
class Produced:
    """Every delivered record: (partition, offset, CreateTime ms) by topic; the latest
    (partition, offset) of each key of keyed topics; undecodable records by topic."""

    offsets: dict[tuple[str, int], array[int]] = field(default_factory=dict)
    times_ms: dict[tuple[str, int], array[int]] = field(default_factory=dict)
    latest: dict[str, dict[str, tuple[int, int]]] = field(default_factory=dict)
    errors: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def delivered(self, err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            self.errors += 1
            return
        topic, partition, offset = (
            str(msg.topic()),
            int(msg.partition() or 0),
            int(msg.offset() or 0),
        )
        with self.lock:
            self.offsets.setdefault((topic, partition), array("q")).append(offset)
            self.times_ms.setdefault((topic, partition), array("q")).append(int(msg.timestamp()[1]))
            key = msg.key()
            if key is not None:
                keys = self.latest.setdefault(topic, {})
                seen = keys.get(key.decode())
                if seen is None or seen[1] < offset:
                    keys[key.decode()] = (partition, offset)

    def next_offsets(self, topic: str) -> dict[int, int]:
        with self.lock:
            return {p: max(o) + 1 for (t, p), o in self.offsets.items() if t == topic and o}

    def count(self, topic: str) -> int:
        with self.lock:
            return sum(len(o) for (t, _), o in self.offsets.items() if t == topic)


class SteadyProducer(threading.Thread):
    """`rate` records/s to each table's topic until stopped."""

    def __init__(
        self, bootstrap: str, url: str, tables: list[SoakTable], rate: float, keys: int
    ) -> None:
        super().__init__(daemon=True)
        self.tables, self.rate, self.keys = tables, rate, keys
        self.framers = {t.topic: AvroFramer(url, t.topic) for t in tables}
        self.producer = Producer(broker.producer_config(bootstrap, **{"linger.ms": 20}))
        self.produced = Produced()
        self.stopping = threading.Event()

    def run(self) -> None:
        started, sent = time.monotonic(), 0
        while not self.stopping.is_set():
            due = int(self.rate * (time.monotonic() - started)) + 1
            while sent < due:
                for table in self.tables:
                    self._produce(table, sent)
                sent += 1
            self.producer.poll(0)
            time.sleep(0.01)
        self.producer.flush(60)

    def _produce(self, table: SoakTable, i: int) -> None:
        key: bytes | None = None
        partition: int | None = i % PARTITIONS
        if table.kind == "upsert":
            ident = i % self.keys
            value = self.framers[table.topic].frame({**record(i), "id": ident})
            key, partition = str(ident).encode(), None
        elif table.kind == "checked" and i % GARBAGE_EVERY == GARBAGE_EVERY - 1:
            value = b"\x00not avro"
        else:
            value = self.framers[table.topic].frame(record(i))
        kwargs: dict[str, Any] = {"key": key, "on_delivery": self.produced.delivered}
        if partition is not None:
            kwargs["partition"] = partition
        while True:
            try:
                self.producer.produce(table.topic, value, **kwargs)
                return
            except BufferError:
                self.producer.poll(0.01)


# --- reading the tables -------------------------------------------------------------


def new_commits(table: Any, topic: str, seen: dict[int, OffsetCommit]) -> None:
    """Add the commits on main's ancestry carrying offsets that `seen` lacks."""
    for commit in offset_commits(table, topic, known=seen):
        seen[commit.snapshot_id] = commit


def committed(commits: dict[int, OffsetCommit]) -> dict[int, int]:
    """The newest commit's offsets (commits are on one line of history)."""
    if not commits:
        return {}
    return max(commits.values(), key=lambda c: (sum(c.offsets.values()), c.at_ms)).offsets


def freshness(
    produced: Produced, topic: str, commits: dict[int, OffsetCommit]
) -> list[tuple[int, float]]:
    """(commit time ms, seconds from produce to commit) of every record a commit covers."""
    with produced.lock:
        arrays = {
            p: (np.frombuffer(bytes(produced.offsets[(t, p)]), dtype=np.int64),
                np.frombuffer(bytes(produced.times_ms[(t, p)]), dtype=np.int64))
            for (t, p) in produced.offsets if t == topic
        }  # fmt: skip
    out: list[tuple[int, float]] = []
    previous: dict[int, int] = {}
    for commit in sorted(commits.values(), key=lambda c: (c.at_ms, sum(c.offsets.values()))):
        for partition, next_offset in commit.offsets.items():
            low = previous.get(partition, 0)
            previous[partition] = max(low, next_offset)
            if partition not in arrays:
                continue
            offsets, times = arrays[partition]
            mask = (offsets >= low) & (offsets < next_offset)
            for latency in (commit.at_ms - times[mask]) / 1000.0:
                out.append((commit.at_ms, float(latency)))
    return out


@dataclass
class TableFigures:
    metadata_bytes: int = 0
    metadata_files: int = 0
    manifests: int = 0
    data_files: int = 0
    delete_files: int = 0
    snapshots: int = 0
    plan_pyiceberg_s: float = 0.0
    plan_duckdb_s: float = 0.0


def median_time(action: Callable[[], object], times: int = 3) -> float:
    spent = []
    for _ in range(times):
        began = time.perf_counter()
        action()
        spent.append(time.perf_counter() - began)
    return statistics.median(spent)


def table_figures(table: Any, duck: Any) -> TableFigures:
    metadata = table.metadata
    location = table.metadata_location.removeprefix("file://")
    folder = Path(location).parent
    current = table.current_snapshot()
    summary = current.summary.additional_properties if current and current.summary else {}
    figures = TableFigures(
        metadata_bytes=Path(location).stat().st_size,
        metadata_files=len(list(folder.glob("*.metadata.json"))),
        manifests=len(current.manifests(table.io)) if current else 0,
        data_files=int(summary.get("total-data-files", 0)),
        delete_files=int(summary.get("total-delete-files", 0)),
        snapshots=len(metadata.snapshots),
    )
    figures.plan_pyiceberg_s = median_time(planning(table))
    query = f"EXPLAIN SELECT count(*) FROM iceberg_scan('{location}')"
    figures.plan_duckdb_s = median_time(lambda: duck.execute(query).fetchall())
    return figures


# --- the soak -----------------------------------------------------------------------


@dataclass
class Window:
    index: int
    cycles: list[float] = field(default_factory=list)  # each table's time between commits
    fresh: list[float] = field(default_factory=list)
    fresh_by_table: dict[str, list[float]] = field(default_factory=dict)
    rss: list[int] = field(default_factory=list)
    # PSS by process kind (rss_breakdown), sampled every PSS_EVERY polls
    pss: dict[str, list[int]] = field(default_factory=dict)
    cpu_s: float = 0.0
    seconds: float = 0.0
    load: float = float("nan")  # the machine's 1-minute load average at the window's end
    tables: dict[str, TableFigures] = field(default_factory=dict)
    # pyiceberg's scan planning of each table, sampled every PLAN_EVERY_S
    plans: dict[str, list[float]] = field(default_factory=dict)
    commits: int = 0

    def p(self, values: list[float], q: float) -> float:
        return float(np.percentile(values, q)) if values else float("nan")

    @property
    def plan_s(self) -> float:
        """Each table's median planning over the window (its end's when not sampled), summed."""
        return sum(
            statistics.median(self.plans[name]) if self.plans.get(name) else f.plan_pyiceberg_s
            for name, f in self.tables.items()
        )

    @property
    def rss_median(self) -> float:
        return statistics.median(self.rss) if self.rss else float("nan")

    def add_pss(self, breakdown: list[tuple[str, int, int]]) -> None:
        self.pss.setdefault("tree", []).append(sum(pss for _, _, pss in breakdown))
        for kind, _, pss in breakdown:
            self.pss.setdefault(kind, []).append(pss)

    def pss_median(self, kind: str = "tree") -> float:
        values = self.pss.get(kind)
        return statistics.median(values) if values else float("nan")


def print_window(w: Window) -> None:
    print(
        f"window {w.index}{' (warm-up)' if w.index == 0 else ''}: {w.commits} commits, "
        f"commit every p50 {w.p(w.cycles, 50):.2f} s p95 {w.p(w.cycles, 95):.2f} s, "
        f"freshness p95 {w.p(w.fresh, 95):.2f} s, run tree RSS {w.rss_median / 2**20:.0f} MB "
        f"(max {max(w.rss, default=0) / 2**20:.0f}), CPU {w.cpu_s / max(w.seconds, 1e-9):.2f} "
        f"cores, load {w.load:.1f}",
        flush=True,
    )
    by_kind: dict[str, list[float]] = {}
    for name, fresh in w.fresh_by_table.items():
        by_kind.setdefault(name.rsplit("_", 1)[-1], []).extend(fresh)
    if by_kind:
        print(
            "  freshness p95 by table kind: "
            + ", ".join(f"{kind} {w.p(v, 95):.2f} s" for kind, v in sorted(by_kind.items())),
            flush=True,
        )
    kinds = [k for k in w.pss if k != "tree"]
    print(
        f"  run tree PSS median {w.pss_median() / 2**20:.0f} MB "
        f"(max {max(w.pss.get('tree', [0])) / 2**20:.0f}): "
        + ", ".join(f"{k} {w.pss_median(k) / 2**20:.0f} MB" for k in kinds),
        flush=True,
    )
    for name, f in w.tables.items():
        fresh = w.fresh_by_table.get(name, [])
        print(
            f"  {name}: freshness p95 {w.p(fresh, 95):.2f} s, metadata.json {f.metadata_bytes:,} B, {f.metadata_files} metadata "
            f"files, {f.snapshots} snapshots, {f.manifests} manifests, {f.data_files} data "
            f"files, {f.delete_files} delete files, plan pyiceberg {f.plan_pyiceberg_s * 1000:.0f}"
            f" ms duckdb {f.plan_duckdb_s * 1000:.0f} ms at the end"
            + _plan_samples(w.plans.get(name, [])),
            flush=True,
        )


def _plan_samples(samples: list[float]) -> str:
    if not samples:
        return ""
    return (
        f"; pyiceberg over the window p50 {statistics.median(samples) * 1000:.0f} ms, max "
        f"{max(samples) * 1000:.0f} ms ({len(samples)} samples)"
    )


class Scraper(threading.Thread):
    """Scrapes `run`'s metrics endpoint (announced on its console) every `SCRAPE_EVERY_S`
    until `stopping` is set; counts the scrapes that answered."""

    def __init__(self, run: RunProcess) -> None:
        super().__init__(daemon=True)
        self.run_process = run
        self.stopping = threading.Event()
        self.scrapes = 0
        self.failures = 0

    def _base_url(self) -> str | None:
        with self.run_process._changed:
            for _, line in self.run_process.lines:
                if line.startswith("Metrics at ") and "/metrics" in line:
                    return line.split()[2].removesuffix("/metrics")
        return None

    def run(self) -> None:
        while not self.stopping.wait(SCRAPE_EVERY_S):
            base = self._base_url()
            if base is None:
                continue
            for path in ("/metrics", "/readyz"):
                try:
                    with urllib.request.urlopen(base + path, timeout=5) as answer:
                        answer.read()
                    self.scrapes += 1
                except OSError:  # /readyz answers 503 (an HTTPError) until a cycle ran
                    self.failures += 1


def soak(
    args: argparse.Namespace,
    work: Path,
    bootstrap: str,
    url: str,
    metrics_port: bool = False,
    topic_prefix: str = "soak",
) -> tuple[int, list[Window]]:
    """One soak; its exit code (0: every record once) and its windows."""
    if args.accelerated:
        tables = [SoakTable("accelerated", f"{topic_prefix}_accelerated", "append")]
        interval = "100ms"
    else:
        tables = [
            SoakTable(f"t{i}_{KINDS[i % len(KINDS)]}", f"{topic_prefix}_{i}", KINDS[i % len(KINDS)])
            for i in range(args.tables)
        ]
        interval = args.interval
    broker.create_topics(bootstrap, {t.topic: PARTITIONS for t in tables})
    root = work / "project"
    write_project(root, bootstrap, url, tables, interval, dict(args.spark_conf))
    duck = duckdb_connection()
    producer = SteadyProducer(bootstrap, url, tables, args.rate, args.keys)
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    metrics = ("--metrics-port", "0") if metrics_port else ()
    run = RunProcess(root, work / "run.log", *metrics, env=env)
    scraper = Scraper(run)
    if metrics_port:
        scraper.start()
    database = root / "warehouse" / "catalog.db"
    deadline = time.monotonic() + 300
    while not database.exists():  # the embedded catalog creates it when `run` starts
        if run.proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"tableflow run did not start its catalog: see {work / 'run.log'}")
        time.sleep(0.5)
    catalog = open_sql_catalog(CATALOG, f"sqlite:///{database}", (root / "warehouse").as_uri())
    commits: dict[str, dict[int, OffsetCommit]] = {t.name: {} for t in tables}
    windows: list[Window] = []
    cpu_seen: dict[int, float] = {}
    started_mono, started_ms = time.monotonic(), time.time() * 1000
    producer.start()
    polls = 0
    planned = time.monotonic()
    try:
        window = Window(0)
        window_began, cpu_before = time.monotonic(), 0.0
        while True:
            now = time.monotonic()
            if run.proc.poll() is not None:
                raise SystemExit(
                    f"tableflow run exited ({run.proc.returncode}): see {work / 'run.log'}"
                )
            poll_tables(catalog, tables, commits)
            window.rss.append(tree_rss_bytes(run.proc.pid))
            polls += 1
            if polls % PSS_EVERY == 0:
                window.add_pss(rss_breakdown(run.proc.pid))
            if now - planned >= PLAN_EVERY_S:
                planned = now
                sample_planning(catalog, tables, window)
            total_commits = sum(len(c) for c in commits.values())
            done = now - started_mono >= args.seconds or (
                args.accelerated and total_commits >= args.commits
            )
            if now - window_began >= args.window or done:
                tree_cpu_seconds(run.proc.pid, cpu_seen)
                cpu_now = sum(cpu_seen.values())
                window.cpu_s, cpu_before = cpu_now - cpu_before, cpu_now
                window.seconds = now - window_began
                window.load = os.getloadavg()[0]
                names = [t.name for t in tables]
                if any(t.kind == "checked" for t in tables):
                    names.append(DLQ_TABLE)  # a commit per cycle that dead-letters
                for name in names:
                    try:
                        loaded = catalog.load_table((NAMESPACE, name))
                    except Exception:
                        continue
                    window.tables[name] = table_figures(loaded, duck)
                windows.append(window)
                window_began = time.monotonic()
                window = Window(len(windows))
                if done:
                    break
            time.sleep(2.0)
    finally:
        producer.stopping.set()
        producer.join(120)
    finished = wait_all_committed(catalog, tables, producer.produced, commits, timeout=300)
    breakdown = rss_breakdown(run.proc.pid)
    scraper.stopping.set()
    run.stop()  # SIGTERM: after the current cycle
    if metrics_port:
        print(f"metrics scrapes answered: {scraper.scrapes}, not answered: {scraper.failures}")
    fill_windows(windows, producer.produced, tables, commits, started_ms, args.window)
    for w in windows:
        print_window(w)
    failed = sum(1 for _, line in run.cycles() if line.startswith(("Apply FAILED", "cycle failed")))
    with run._changed:
        lines = [line for _, line in run.lines]
    retried = sum(1 for line in lines if "commit retried" in line or "commit was refused" in line)
    maintained = sum(1 for line in lines if line.startswith("maintained "))
    print(f"run cycles that failed: {failed}; commit conflicts retried: {retried}; "
          f"maintenance runs: {maintained}")  # fmt: skip
    print("run tree RSS (PSS) at the end, by process: " + ", ".join(
        f"{kind} {rss / 2**20:.0f} MB ({pss / 2**20:.0f} MB)" for kind, rss, pss in breakdown)
        + f"; total {sum(r for _, r, _ in breakdown) / 2**20:.0f} MB"
        f" ({sum(p for _, _, p in breakdown) / 2**20:.0f} MB)")  # fmt: skip
    ok = finished and exactly_once(catalog, tables, producer.produced)
    summary(windows, tables)
    return (0 if ok else 1), windows


def rss_breakdown(root: int) -> list[tuple[str, int, int]]:
    """RSS and PSS of each process of the run tree by what it is: the driver (Python),
    the driver's JVM, Python workers (pyspark daemon and its forks), others. RSS counts
    the pages a forked worker shares with the daemon once per process; PSS divides shared
    pages among their processes, so its sum is the memory the tree really holds."""
    found: list[tuple[str, int, int]] = []
    stack_ = [(root, "driver")]
    while stack_:
        pid, kind = stack_.pop()
        try:
            status = Path(f"/proc/{pid}/status").read_text()
            rss = next(
                int(line.split()[1]) * 1024
                for line in status.splitlines()
                if line.startswith("VmRSS:")
            )
            found.append((kind, rss, _pss_bytes(pid)))
            for task in Path(f"/proc/{pid}/task").iterdir():
                for child in (task / "children").read_text().split():
                    comm = Path(f"/proc/{child}/comm").read_text().strip()
                    cmdline = Path(f"/proc/{child}/cmdline").read_bytes()
                    child_kind = (
                        "driver JVM" if comm == "java"
                        else "python workers" if kind in ("driver JVM", "python workers") or b"daemon" in cmdline
                        else "other"
                    )  # fmt: skip
                    stack_.append((int(child), child_kind))
        except (OSError, StopIteration, ValueError):
            continue
    totals: dict[str, tuple[int, int]] = {}
    for kind, rss, pss in found:
        before = totals.get(kind, (0, 0))
        totals[kind] = (before[0] + rss, before[1] + pss)
    return sorted(((k, r, p) for k, (r, p) in totals.items()), key=lambda item: -item[1])


def _pss_bytes(pid: int) -> int:
    try:
        rollup = Path(f"/proc/{pid}/smaps_rollup").read_text()
    except OSError:
        return 0
    return next(
        (int(line.split()[1]) * 1024 for line in rollup.splitlines() if line.startswith("Pss:")),
        0,
    )


def planning(table: Any) -> Callable[[], object]:
    """pyiceberg planning a scan of the whole table."""
    return lambda: list(table.scan().plan_files())


def sample_planning(catalog: Any, tables: list[SoakTable], window: Window) -> None:
    for t in tables:
        try:
            loaded = catalog.load_table((NAMESPACE, t.name))
        except Exception:  # not created yet, or SQLite busy: next sample
            continue
        window.plans.setdefault(t.name, []).append(median_time(planning(loaded)))


def poll_tables(
    catalog: Any, tables: list[SoakTable], commits: dict[str, dict[int, OffsetCommit]]
) -> None:
    for t in tables:
        try:
            new_commits(catalog.load_table((NAMESPACE, t.name)), t.topic, commits[t.name])
        except Exception:  # not created yet, or SQLite busy: next poll
            continue


def wait_all_committed(
    catalog: Any,
    tables: list[SoakTable],
    produced: Produced,
    commits: dict[str, dict[int, OffsetCommit]],
    timeout: float,
) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        poll_tables(catalog, tables, commits)
        if all(
            all(
                committed(commits[t.name]).get(p, 0) >= o
                for p, o in produced.next_offsets(t.topic).items()
            )
            for t in tables
        ):
            return True
        time.sleep(1.0)
    print("NOT everything was committed within the timeout")
    return False


def fill_windows(
    windows: list[Window],
    produced: Produced,
    tables: list[SoakTable],
    commits: dict[str, dict[int, OffsetCommit]],
    started_ms: float,
    window_s: float,
) -> None:
    """Assign each table's commits, the time since its previous commit, and records'
    freshness to the windows of their commit time."""

    def index(offset_s: float) -> int:
        return min(max(int(offset_s // window_s), 0), len(windows) - 1)

    for t in tables:
        times = sorted(commit.at_ms for commit in commits[t.name].values())
        for at_ms in times:
            windows[index((at_ms - started_ms) / 1000)].commits += 1
        for before, at_ms in itertools.pairwise(times):
            windows[index((at_ms - started_ms) / 1000)].cycles.append((at_ms - before) / 1000)
        for at_ms, latency in freshness(produced, t.topic, commits[t.name]):
            window = windows[index((at_ms - started_ms) / 1000)]
            window.fresh.append(latency)
            window.fresh_by_table.setdefault(t.name, []).append(latency)


def exactly_once(catalog: Any, tables: list[SoakTable], produced: Produced) -> bool:
    """Every produced record once: in its table by (partition, offset), or in the
    dead-letter table (checked tables); an upsert table holds each key's latest record."""
    ok = True
    dlq: dict[str, list[tuple[int, int]]] = {}
    if any(t.kind == "checked" for t in tables):
        rows = catalog.load_table((NAMESPACE, DLQ_TABLE)).scan().to_arrow().to_pylist()
        for row in rows:
            dlq.setdefault(row["source_topic"], []).append(
                (row["source_partition"], row["source_offset"])
            )
    for t in tables:
        rows = (
            catalog.load_table((NAMESPACE, t.name))
            .scan(selected_fields=("_kafka_partition", "_kafka_offset", "id"))
            .to_arrow()
        )
        got = list(
            zip(
                rows["_kafka_partition"].to_pylist(), rows["_kafka_offset"].to_pylist(), strict=True
            )
        )
        with produced.lock:
            expected = {
                (p, o)
                for (topic, p), offsets in produced.offsets.items()
                if topic == t.topic
                for o in offsets
            }
            latest = dict(produced.latest.get(t.topic, {}))
        if t.kind == "upsert":
            want = set(latest.values())
            good = len(got) == len(set(got)) == len(want) and set(got) == want
            print(
                f"exactly once: {t.name}: {len(got):,} rows, {len(want):,} keys, each its latest record: {'yes' if good else 'NO'}"
            )
        else:
            landed = got + dlq.get(t.topic, [])
            good = len(landed) == len(set(landed)) and set(landed) == expected
            print(f"exactly once: {t.name}: {len(expected):,} produced, {len(got):,} in the table"
                  f"{f', {len(dlq.get(t.topic, [])):,} dead-lettered' if t.kind == 'checked' else ''}"
                  f", duplicates {len(landed) - len(set(landed))}, missing {len(expected - set(landed))}: "
                  f"{'yes' if good else 'NO'}")  # fmt: skip
        ok = ok and good
    return ok


def ratio(last: float, first: float) -> float:
    return last / first if first > 0 else float("nan")


# A last window shorter than this share of the others (the run reached its commits just
# after a window began) is too few samples to compare: the one before it is compared.
FULL_WINDOW_SHARE = 0.5


def summary(windows: list[Window], tables: list[SoakTable]) -> None:
    measured = [w for w in windows[1:] if w.cycles] or windows
    if len(measured) > 2 and measured[-1].seconds < FULL_WINDOW_SHARE * measured[-2].seconds:
        measured = measured[:-1]
    first, last = measured[0], measured[-1]
    ends = [f.metadata_bytes for f in windows[-1].tables.values()]
    print(f"compared: window {first.index} (first after the warm-up) and window {last.index}")
    print(
        f"commit p95 last/first window: {ratio(last.p(last.cycles, 95), first.p(first.cycles, 95)):.2f}x"
    )
    print(f"scan plan last/first window: {ratio(last.plan_s, first.plan_s):.2f}x")
    print(f"metadata.json bytes at the end: {max(ends, default=0)}")
    print(f"rss last/first window: {ratio(last.rss_median, first.rss_median):.2f}x")
    print(f"pss last/first window: {ratio(last.pss_median(), first.pss_median()):.2f}x")


@dataclass(frozen=True)
class SideFigures:
    """One soak's figures after its warm-up window, for the A/B of `--metrics-ab`."""

    cores: float
    # The run tree's CPU seconds per table commit: what the A/B compares first, as the
    # load of other processes on the machine stretches wall times far more than it does
    # the CPU a commit takes.
    cpu_per_commit_s: float
    commit_p50_s: float
    freshness_p95_s: float
    rss_mb: float
    pss_mb: float
    load: float

    @classmethod
    def of(cls, windows: list[Window]) -> SideFigures:
        measured = [w for w in windows[1:] if w.seconds > 0] or windows
        cycles = [c for w in measured for c in w.cycles]
        fresh = [f for w in measured for f in w.fresh]
        return cls(
            cores=sum(w.cpu_s for w in measured) / max(sum(w.seconds for w in measured), 1e-9),
            cpu_per_commit_s=sum(w.cpu_s for w in measured)
            / max(sum(w.commits for w in measured), 1),
            commit_p50_s=float(np.percentile(cycles, 50)) if cycles else float("nan"),
            freshness_p95_s=float(np.percentile(fresh, 95)) if fresh else float("nan"),
            rss_mb=statistics.median(w.rss_median for w in measured) / 2**20,
            pss_mb=statistics.median(w.pss_median() for w in measured) / 2**20,
            load=os.getloadavg()[0],
        )


def metrics_ab(args: argparse.Namespace, work: Path, bootstrap: str, url: str) -> int:
    """`--metrics-ab N`: N soaks a side without and with `--metrics-port`, alternating (the
    order swapped every other round), on the same broker and registry; the medians."""
    sides: dict[bool, list[SideFigures]] = {False: [], True: []}
    code = 0
    for round_number in range(args.metrics_ab):
        order = (False, True) if round_number % 2 == 0 else (True, False)
        for with_metrics in order:
            label = f"r{round_number}_{'with' if with_metrics else 'without'}"
            run_work = work / label
            run_work.mkdir()
            status, windows = soak(args, run_work, bootstrap, url, with_metrics, f"soak_{label}")
            code = code or status
            figures = SideFigures.of(windows)
            sides[with_metrics].append(figures)
            print(f"metrics A/B {label}: {figures}", flush=True)
    for name, pick in (
        ("CPU s a commit", lambda f: f.cpu_per_commit_s),
        ("CPU cores", lambda f: f.cores),
        ("commit every p50 s", lambda f: f.commit_p50_s),
        ("freshness p95 s", lambda f: f.freshness_p95_s),
        ("run tree RSS MB", lambda f: f.rss_mb),
        ("run tree PSS MB", lambda f: f.pss_mb),
    ):
        without = statistics.median(pick(f) for f in sides[False])
        with_ = statistics.median(pick(f) for f in sides[True])
        spreads = [
            max(pick(f) for f in sides[s]) - min(pick(f) for f in sides[s]) for s in (False, True)
        ]
        print(
            f"metrics A/B median {name}: without {without:.3f}, with {with_:.3f}, "
            f"with/without {ratio(with_, without):.3f}x, the medians {abs(with_ - without):.3f} "
            f"apart (spread of the runs: without {spreads[0]:.3f}, with {spreads[1]:.3f})"
        )
    return code


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tables", type=int, default=3)
    parser.add_argument("--rate", type=float, default=None, help="records/s per table")
    parser.add_argument("--interval", default="1s")
    parser.add_argument("--seconds", type=float, default=600)
    parser.add_argument("--window", type=float, default=120)
    parser.add_argument("--keys", type=int, default=1000, help="keys of upsert tables")
    parser.add_argument("--accelerated", action="store_true")
    parser.add_argument("--commits", type=int, default=20_000)
    parser.add_argument(
        "--spark-conf",
        action="append",
        default=[],
        type=lambda text: tuple(text.split("=", 1)),
        metavar="KEY=VALUE",
        help="a Spark conf entry of the target (A/B of session settings); repeatable",
    )
    parser.add_argument(
        "--metrics", action="store_true", help="run with --metrics-port 0 (issue 43's A/B)"
    )
    parser.add_argument(
        "--metrics-ab",
        type=int,
        default=0,
        metavar="ROUNDS",
        help="ROUNDS soaks without and ROUNDS with --metrics-port 0, alternating, same servers",
    )
    parser.add_argument("--keep", type=Path, default=None, help="work directory to keep")
    args = parser.parse_args()
    if args.rate is None:
        args.rate = 20.0 if args.accelerated else 100.0
    print(f"soak: {vars(args)}, load at start {os.getloadavg()[0]:.1f}", flush=True)
    if args.keep is not None:
        args.keep.mkdir(parents=True, exist_ok=True)
        work_context: Any = _Kept(args.keep)
    else:
        work_context = tempfile.TemporaryDirectory(prefix="tableflow-soak-")
    # Without `stack`'s class-archive priming: a soak's first window is its warm-up anyway.
    with work_context as name, servers(Path(name)) as (bootstrap, url):
        if args.metrics_ab:
            code = metrics_ab(args, Path(name), bootstrap, url)
        else:
            code, _ = soak(args, Path(name), bootstrap, url, args.metrics)
    raise SystemExit(code)


class _Kept:
    def __init__(self, path: Path) -> None:
        self.path = path

    def __enter__(self) -> str:
        return str(self.path)

    def __exit__(self, *exc: object) -> None:
        return None


if __name__ == "__main__":
    main()
