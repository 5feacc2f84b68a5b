"""Many tables: the commands users run on a project of N small tables (issue 31).

    .venv/bin/python benchmarks/many_tables.py --tables 1000 --records 200
    .venv/bin/python benchmarks/many_tables.py --tables 5000 --records 200 --phases validate,plan
    .venv/bin/python benchmarks/many_tables.py --tables 1000 --records 200 --against main

Starts its own Apache Kafka broker and dev registry (127.0.0.1, free ports) and sets up N topics of
`--records` Confluent-framed Avro records each (the 10-field event of ingest.py), quickly:
one CreateTopics request, the N value subjects registered concurrently (one schema, so one
id), each record framed once and one producer writing every topic.

Then each phase is a CLI process on a project of N tables (embedded catalog, Spark
local[`--cores`], `refresh_interval` = `--interval`), timed by the wall clock and by the
CPU seconds of its process tree (fair under load), with the peak memory of its process tree (PSS, shared pages split between sharers: the CLI, the
JVM, Spark's Python workers; /proc sampled every 0.2 s):
- `validate`; `plan` (no table exists yet); `apply --auto-approve` (the first apply: creates
  the N tables and ingests every record); `plan` again (`plan_existing`: the tables exist);
  `apply --auto-approve` again (`noop`: nothing to do);
- `run`: one pass of `tableflow run`. The run starts (its first cycle finds nothing new
  and starts the JVM, or catches up), then, once the next cycle is due at least 20 s
  ahead (after a catch-up longer than the interval the next cycle starts at once: the
  benchmark waits for the cycles after it), `--records` new records go into every
  topic, and the next cycle ingests them. The pass is that
  cycle, from its start (the fixed-rate schedule, runner/schedule.py) to its output line:
  plan and apply. Its run_results.json must show every table committing exactly its new
  records. The peak memory is the run process tree's over its whole life.

Baseline, in the same run: one Python process reads every record of the N topics with one
consumer, decodes it with fastavro and writes one Parquet file per topic: what the records
cost without any per-table overhead. With `--against REV`, every phase also runs with
tableflow_core as of git revision REV (a `git archive` copy run with PYTHONPATH pointing at
it) on a project of its own over the same topics, phase by phase interleaved (so both
meet the same load); for the run pass, each tree's run first catches up with what the
other's pass produced, then gets `--records` new records per table of its own.

Targets (issue 31; 1,000 tables x 200 records on 2 cores): validate <= 1 s, plan <= 3 s
(<= 15 s for 5,000 tables), a first apply <= 60 s, a no-op apply <= 5 s, a `tableflow run`
pass with new records in every table <= 45 s (a 1-minute refresh interval kept), peak
memory <= 2 GB. For another N the time targets are scaled linearly (marked "scaled").

The load average is printed before and after: the 2 cores are shared with other jobs, so
compare a phase with its baseline of the same run, not with another day's seconds.
"""

from __future__ import annotations

import argparse
import datetime as dt
import io
import json
import os
import struct
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import fastavro
import pyarrow as pa
import pyarrow.parquet as pq
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from event_schema import SCHEMA  # benchmarks/ is on sys.path when a script runs
from ingest import (
    FramedAvroReader,
    RunProcess,
    consume_to_ends,
    record,
    run_results,
    stack,
    tableflow_command,
    write_tables_project,
)
from memory import TreeSampler, sampled_run

from tableflow_core.dev import broker
from tableflow_core.kafka.admin import read_watermarks

REPO = Path(__file__).resolve().parent.parent
PHASES = ("validate", "plan", "apply", "plan_existing", "noop", "run")
# issue 31, for 1,000 tables (seconds); scaled linearly for another number of tables.
TARGETS_S = {"validate": 1.0, "plan": 3.0, "apply": 60.0, "noop": 5.0, "run": 45.0}
TARGET_TABLES = 1000
PLAN_5000_TARGET_S = 15.0
MEMORY_TARGET_GB = 2.0
THIS_TREE = "this tree"


def topic_name(i: int) -> str:
    return f"many_{i:04d}"


def tables_yaml(topics: Sequence[str], interval: str | None = None) -> list[dict[str, Any]]:
    tables: list[dict[str, Any]] = []
    for topic in topics:
        table: dict[str, Any] = {"name": topic, "topic": topic}
        if interval is not None:
            table["refresh_interval"] = interval
        tables.append(table)
    return tables


# -- set-up ------------------------------------------------------------------------------


def register_subjects(url: str, topics: Sequence[str]) -> dict[str, int]:
    """Register the event schema under every topic's value subject, 16 requests at a time:
    topic -> schema id."""
    client = SchemaRegistryClient({"url": url})
    schema = Schema(json.dumps(SCHEMA), "AVRO")
    with ThreadPoolExecutor(16) as pool:
        ids = pool.map(lambda t: client.register_schema(f"{t}-value", schema), topics)
        return dict(zip(topics, ids, strict=True))


def produce_all(
    bootstrap: str,
    ids: dict[str, int],
    records: int,
    partitions: int,
    first: int = 0,
) -> None:
    """`records` framed records (ids first..first+records-1) into every topic, round-robin
    over its partitions; each record body is encoded once, one producer writes them all."""
    parsed = fastavro.parse_schema(SCHEMA)
    bodies = []
    for i in range(first, first + records):
        buffer = io.BytesIO()
        fastavro.schemaless_writer(buffer, parsed, record(i))
        bodies.append(buffer.getvalue())
    producer = Producer(broker.producer_config(bootstrap))
    headers: dict[int, bytes] = {}
    for topic, schema_id in ids.items():
        header = headers.setdefault(schema_id, struct.pack(">bI", 0, schema_id))
        for n, body in enumerate(bodies):
            while True:
                try:
                    producer.produce(topic, header + body, partition=n % partitions)
                    break
                except BufferError:
                    producer.poll(0.05)
        producer.poll(0)
    left = producer.flush(600)
    if left:
        raise SystemExit(f"{left} records were not delivered")


def high_watermarks(bootstrap: str, topics: Sequence[str]) -> dict[str, dict[int, int]]:
    found = read_watermarks({"bootstrap.servers": bootstrap}, topics).found
    return {t: {p: high for p, (_, high) in found[t].items()} for t in topics}


# -- the baseline ------------------------------------------------------------------------


def baseline(bootstrap: str, url: str, topics: Sequence[str], out: Path) -> tuple[float, int]:
    """One process: one consumer over every topic's partitions, fastavro decode, one
    Parquet file per topic. (seconds, rows)."""
    started = time.perf_counter()
    ends = high_watermarks(bootstrap, topics)
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": "baseline", "enable.auto.commit": False,
    })  # fmt: skip
    partition_ends = {(t, p): end for t, marks in ends.items() for p, end in marks.items() if end}
    consumer.assign([TopicPartition(t, p, 0) for t, p in partition_ends])
    reader = FramedAvroReader(url)
    rows: dict[str, list[dict[str, Any]]] = {t: [] for t in topics}
    for messages in consume_to_ends(consumer, partition_ends):
        for msg in messages:
            rows[msg.topic()].append(reader.read(msg.value()))
    consumer.close()
    out.mkdir(parents=True, exist_ok=True)
    for topic, topic_rows in rows.items():
        if topic_rows:
            pq.write_table(pa.Table.from_pylist(topic_rows), out / f"{topic}.parquet")
    return time.perf_counter() - started, sum(len(r) for r in rows.values())


# -- measuring the CLI -------------------------------------------------------------------


@dataclass(frozen=True)
class Tree:
    """A tableflow_core to run the CLI with: this checkout, or another revision's copy."""

    label: str
    root: Path

    def env(self) -> dict[str, str]:
        return {**os.environ, "PYTHONPATH": str(self.root)}


@dataclass
class Figure:
    seconds: float
    peak_pss: int
    detail: str = ""
    cpu_s: float | None = None  # the command's process tree (fair under load); None: not measured


def checkout(rev: str, into: Path) -> Path:
    """tableflow_core as of git revision `rev`, extracted under `into`."""
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", rev, "tableflow_core"], capture_output=True, check=True
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    return into


def cli_phase(tree: Tree, root: Path, *args: str) -> Figure:
    """`tableflow ARGS` in a new process on the project: wall seconds, peak tree PSS."""
    what = f"[{tree.label}] tableflow {' '.join(args)}"
    command = tableflow_command(root, *args)
    seconds, sampler = sampled_run(command, what, 0.2, text=True, env=tree.env(), cwd=tree.root)
    cpu_s = sum(proc.cpu_s for proc in sampler.procs.values())
    return Figure(seconds, sampler.peak_pss, cpu_s=cpu_s)


def applied(root: Path, records: int, tables: int) -> str:
    """The first apply's check: every table committed its records."""
    results = run_results(root)
    written = sum(int(t["records_written"]) for t in results["tables"])
    ok = sum(1 for t in results["tables"] if t["status"] == "success")
    if (ok, written) != (tables, tables * records):
        raise SystemExit(f"the first apply: {ok} tables ok, {written} records written")
    return f"{written:,} records"


def nothing_applied(root: Path) -> str:
    results = run_results(root) if (root / "target" / "run_results.json").exists() else None
    if results is not None and any(t["records_written"] for t in results["tables"]):
        raise SystemExit("the no-op apply wrote records")
    return ""


def run_pass(
    tree: Tree,
    root: Path,
    work: Path,
    bootstrap: str,
    ids: dict[str, int],
    args: argparse.Namespace,
    first_id: int,
) -> Figure:
    """One `tableflow run` pass with `--records` new records in every table."""
    topics = list(ids)
    run = RunProcess(root, work / f"run-{tree.label.replace(' ', '_')}.log",
                     env=tree.env(), cwd=tree.root)  # fmt: skip
    sampler = TreeSampler(run.proc.pid, 0.5)
    try:
        cycles = wait_for_quiet_gap(run, args.interval)
        before = high_watermarks(bootstrap, topics)
        produce_all(bootstrap, ids, args.records, args.partitions, first=first_id)
        after = high_watermarks(bootstrap, topics)
        produced_at = time.monotonic()
        due = run.next_cycle_start(args.interval)
        if due is not None and produced_at > due:
            raise SystemExit(f"[{tree.label}] producing the new records took until "
                             f"{produced_at - due:.1f} s after the next cycle started: that "
                             "cycle read part of them; use a longer --interval")  # fmt: skip
        while True:  # the first cycle that starts after the records are in
            cycles += 1
            run.wait_cycles(cycles, timeout=args.interval + 3600)
            seconds = run.cycle_seconds(args.interval, since=produced_at)
            if seconds:
                break
        results = run_results(root)
    finally:
        run.stop()
        sampler.stop()
    tables = {t["table"]: t for t in results["tables"]}
    wrong = [
        topic
        for topic in topics
        if topic not in tables
        or tables[topic]["status"] != "success"
        or {int(p): o for p, o in tables[topic]["offsets_before"].items()} != before[topic]
        or {int(p): o for p, o in tables[topic]["offsets_after"].items()} != after[topic]
    ]
    if wrong:
        raise SystemExit(f"[{tree.label}] the run pass did not commit the new records of "
                         f"{len(wrong)} tables, e.g. {wrong[:3]} (see {run._log.name})")  # fmt: skip
    apply_s = float(results["duration_s"])
    return Figure(seconds[0], sampler.peak_pss, f"apply {apply_s:.1f} s of it")


# Seconds left before the next cycle starts that producing the new records may take
# (1,000 tables x 200 records took ~3 s on a loaded machine).
PRODUCE_MARGIN_S = 20.0


def wait_for_quiet_gap(run: RunProcess, interval: float) -> int:
    """Wait for the first cycle (it catches up, and starts the JVM), then for as many more
    as it takes until the next one is due at least PRODUCE_MARGIN_S ahead: a catch-up
    cycle longer than the interval is followed at once by the next one (fixed-rate
    schedule), which would read records still being produced. The cycles ended so far."""
    cycles = 1
    run.wait_cycles(cycles, timeout=3600)
    while True:
        due = run.next_cycle_start(interval)
        if due is not None and due - time.monotonic() >= min(PRODUCE_MARGIN_S, interval / 2):
            return cycles
        cycles += 1
        run.wait_cycles(cycles, timeout=interval + 3600)


# -- main --------------------------------------------------------------------------------


def target_for(phase: str, tables: int) -> tuple[float | None, str]:
    base = "plan" if phase == "plan_existing" else phase
    if base not in TARGETS_S:
        return None, ""
    if base == "plan" and tables == 5000:
        return PLAN_5000_TARGET_S, ""
    scaled = TARGETS_S[base] * tables / TARGET_TABLES
    return scaled, "" if tables == TARGET_TABLES else " (scaled)"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tables", type=int, default=1000)
    parser.add_argument("--records", type=int, default=200, help="per table and per pass")
    parser.add_argument("--partitions", type=int, default=1, help="per topic")
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--interval", type=int, default=60, help="refresh_interval, seconds")
    parser.add_argument("--phases", default=",".join(PHASES), help=f"of {','.join(PHASES)}")
    parser.add_argument("--against", help="a git revision to run every phase with too")
    args = parser.parse_args()
    phases = [p for p in args.phases.split(",") if p]
    unknown = set(phases) - set(PHASES)
    if unknown:
        parser.error(f"unknown phases {sorted(unknown)}")
    work = Path(tempfile.mkdtemp(prefix="tf-bench-many-"))
    print(f"work dir {work}; started {dt.datetime.now(dt.UTC):%H:%M:%S} UTC", flush=True)
    trees = [Tree(THIS_TREE, REPO)]
    if args.against:
        trees.append(Tree(args.against, checkout(args.against, work / "against")))
    n = args.tables
    topics = [topic_name(i) for i in range(n)]
    with stack(work) as (bootstrap, url):
        started = time.perf_counter()
        broker.create_topics(bootstrap, {t: args.partitions for t in topics}, timeout=300)
        created = time.perf_counter()
        ids = register_subjects(url, topics)
        registered = time.perf_counter()
        produce_all(bootstrap, ids, args.records, args.partitions)
        done = time.perf_counter()
        print(f"set-up: {n} topics created in {created - started:.1f} s, {n} subjects "
              f"registered in {registered - created:.1f} s, {n} x {args.records:,} records "
              f"produced in {done - registered:.1f} s", flush=True)  # fmt: skip
        base_s, rows = baseline(bootstrap, url, topics, work / "baseline")
        assert rows == n * args.records, rows
        projects = {
            tree.label: write_tables_project(
                work / f"project-{i}", bootstrap, url, args.cores,
                tables_yaml(topics, f"{args.interval}s"),
            )
            for i, tree in enumerate(trees)
        }  # fmt: skip
        load_before = os.getloadavg()
        figures: dict[tuple[str, str], Figure] = {}
        next_id = args.records
        for phase in phases:
            for tree in trees:
                root = projects[tree.label]
                if phase == "validate":
                    figure = cli_phase(tree, root, "validate")
                elif phase in ("plan", "plan_existing"):
                    figure = cli_phase(tree, root, "plan")
                elif phase == "apply":
                    figure = cli_phase(tree, root, "apply", "--auto-approve")
                    figure.detail = applied(root, args.records, n)
                elif phase == "noop":
                    (root / "target" / "run_results.json").unlink(missing_ok=True)
                    figure = cli_phase(tree, root, "apply", "--auto-approve")
                    figure.detail = nothing_applied(root)
                else:
                    figure = run_pass(tree, root, work, bootstrap, ids, args, next_id)
                    next_id += args.records
                figures[(phase, tree.label)] = figure
                cpu = f"{figure.cpu_s:7.2f} CPU s" if figure.cpu_s is not None else " " * 13
                print(f"  {phase:<14} {tree.label:<12} {figure.seconds:8.2f} s {cpu} "
                      f"{figure.peak_pss / 1e9:6.2f} GB  {figure.detail}  "
                      f"(load {os.getloadavg()[0]:.1f})", flush=True)  # fmt: skip
        load_after = os.getloadavg()
    print(f"\n{n} tables x {args.records:,} records, {args.partitions} partition(s) each; "
          f"load average {load_before[0]:.1f} before, {load_after[0]:.1f} after "
          f"({os.cpu_count()} cores)")  # fmt: skip
    print(f"baseline: 1 process reads, decodes and writes all {rows:,} records "
          f"({n} Parquet files) in {base_s:.2f} s")  # fmt: skip
    header = "".join(f"{t.label:>22}" for t in trees)
    print(f"{'phase':<16}{header}   target")
    for phase in phases:
        cells = "".join(
            f"{figures[(phase, t.label)].seconds:>11.2f} s {figures[(phase, t.label)].peak_pss / 1e9:5.2f} GB"
            for t in trees
        )
        limit, scaled = target_for(phase, n)
        mine = figures[(phase, THIS_TREE)]
        verdict = ""
        if limit is not None:
            met = mine.seconds <= limit and mine.peak_pss <= MEMORY_TARGET_GB * 1e9
            verdict = (f"<= {limit:g} s{scaled}, <= {MEMORY_TARGET_GB:g} GB: "
                       f"{'met' if met else 'NOT met'}")  # fmt: skip
        print(f"{phase:<16}{cells}   {verdict}")
    if "run" in phases:
        print(f"run pass = the cycle with {args.records} new records in each of the {n} "
              f"tables, plan + apply ({figures[('run', THIS_TREE)].detail}); "
              f"refresh_interval {args.interval} s")  # fmt: skip
    print("memory: peak PSS of the command's process tree (CLI, JVM, Python workers)")
    print("CPU (printed per phase above): user + system seconds of the command's process "
          "tree, sampled from /proc every 0.2 s (a process's last 0.2 s can be missed); not "
          "for the run pass, whose process lives across cycles")  # fmt: skip
    sys.stdout.flush()


if __name__ == "__main__":
    main()
