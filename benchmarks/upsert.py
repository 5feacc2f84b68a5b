"""Upsert: tableflow's upsert (merge-on-read) vs pyiceberg's `Table.upsert`, same data, same run;
and an append table's dedup against the table beside it.

    .venv/bin/python benchmarks/upsert.py [--rows 1000000,10000000] [--batch 100000] [--batches 10]
    .venv/bin/python benchmarks/upsert.py --rows 1000000,100000000 --batch 100000 --batches 5
    .venv/bin/python benchmarks/upsert.py --rows 1000000 --batch 100000 --batches 6 --against REV

Starts its own Apache Kafka and dev registry; for each table size in `--rows`, a project of
two tables on one 4-partition topic of Avro records keyed by an Avro key {id}: `events`
(`mode: upsert`, key id) and `events_dedup` (an append table whose `dedup` on id, keep
first, drops a record whose id the table holds). Each table is applied on its own
(`tableflow apply --select`'s code: PlanTask + ApplyTask, one Spark application per size,
embedded catalog), so each has its own figures.
- The initial rows, ids 0..rows-1 (one record each): sizes up to `--direct-above`
  (20M) are produced to the topic (`produce_batch` calls of 20k records, one producer
  process per partition) and loaded by `tableflow apply`; larger ones are built directly
  (benchmarks/large_table.py: one placeholder record per row at the row's offset,
  tableflow's writer, the committed offsets in the commit), as issue 45 allows.
- pyiceberg (sizes up to `--pyiceberg-max`): the same initial rows loaded with `append`
  (10M rows at a time, one transaction), then batch 1 applied with its own `Table.upsert`
  (last record per key, as tableflow does) and `Table.delete` for the tombstones, in a
  child process stopped after `--pyiceberg-timeout` s. Its table must then equal the
  independent model (count, sum of amounts, fingerprint), as tableflow's does.
- Batches of `--batch` records (`batch_changes`: updates of existing ids, some several
  times, `--new-share` of new ids, 10% tombstones), each applied to both tables. Batch 1
  is cold, as `tableflow apply --auto-approve --select` runs it (cli/commands/apply.py):
  the catalog opened (the embedded one served) for its plan and apply, the apply on
  the world the plan read, the catalog closed; the upsert table's key index and the
  dedup table's key set built from the table, as a new process does each time (the
  process's key indexes are dropped before batch 1; built while the batch is read, as
  apply does: `index wait` in its breakdown, `index build` when the merge built it; the
  Spark application is the script's, already running: a one-shot `tableflow apply`
  starts its own; no reader process, as `apply` starts none). Batches 2.. are warm, as
  in `tableflow run` (this process keeps them), and planned and applied as its cycles
  are: one catalog kept open across them, the plan without the tables' activity, the
  reader process beside the driver as `run` starts it (engine/reader_process.py). An upsert batch of at most 250k records is
  merged on the driver (pipeline/upsert_rows.py): position delete files accumulate.
- Then every reader (pyiceberg in a child process stopped after `--reader-timeout` s,
  DuckDB, Spark, Trino started for the check) reads both tables' count, sum of amounts
  and a print of every row (`large_table.Figures`: exact integers) against an
  independent model (`large_table.UpsertModel`, `DedupModel`: the initial rows, then
  each record in produce order), and again after compaction of the upsert table
  (`rewrite_data_files`, deletes applied), each reader timed.
- `--first-load-records`: the first load of an upsert topic against an append table's
  apply of the same records (benchmarks/upsert_first_load.py, one round), same broker.

Last lines: `{large}/{small} batch cost: X.XXx` (the mean CPU seconds of the upsert
table's warm batches into the largest table over those into the smallest; CPU, as the
machine is shared: wall seconds are printed above), `vs pyiceberg at {large}: X.Xx`
(pyiceberg's upsert+delete of batch 1 over tableflow's apply of it, wall seconds;
pyiceberg runs in a child process stopped after `--pyiceberg-timeout` seconds: then the
ratio is a lower bound, labelled so), `first load vs append: X.XXx` and `dedup
{large}/{small} batch cost: X.XXx` (the dedup table's warm batches, CPU).

Every tableflow batch prints its breakdown (seconds). A batch merged on the driver: `plan`
(a cold batch's with the catalog's opening), `apply frame` (ApplyTask outside the table's
run; a cold batch's with the catalog's closing), `load+branch`, `read+decode job` (the
shared job's read tasks), `driver merge` (`index build`, `index wait` and `remember deletes (in merge)`,
the deletes table's commit beside its file writes, of it), `remember deletes` (a first
load's deletes table commit, after its merge), `publish commit`. A batch through Spark's MERGE (the initial
load, or with `--against` a tree before session 7): `plan` (PlanTask), `apply frame`
(ApplyTask outside the table's run), `load+branch`, `stage setup` (the stages' DataFrame
building), `merge` (the write: a batch of at most 500k records is counted, its new keys
counted and appended, then the WHEN MATCHED-only MERGE runs; a larger one is one MERGE)
with the Spark stages by kind (`kafka read+decode`; `table scan`: a stage reading an
Iceberg table, with the broadcast join when there is one; `join`: a shuffled join and
MergeRows; `write`: every other stage: the batch's window and cache, the data and delete
files) and the driver parts of the longest query, the MERGE (`analysis+planning`: the
write's time outside it, so for a broadcast batch also the count and append queries; `to
first stage`, `between stages`, `commit`), `audits`, `publish commit`; then CPU seconds of
the process tree (by process: driver, JVM, Python workers; the script's broker and
registry apart as `stack`), executor CPU (JVM only), rows shuffled and stages. The phase
timings come from run_results' `timings`, the stages from the Spark application's status
store.

A/B mode (`--against REV`): this tree and tableflow_core as of git revision REV (a `git
archive` copy), each in its own worker process (`--worker`: its own Spark application,
project and table, PYTHONPATH at its tree) on the same topic: the initial load, then
`--batches` batches, each applied by both, the order alternating; per batch both
breakdowns, then the means over batches 2.. side by side, and a check that both tables
hold the same rows. On a loaded machine compare CPU and the driver parts, not wall time.
"""

from __future__ import annotations

import argparse
import datetime as dt
import inspect
import io
import itertools
import json
import multiprocessing
import os
import pickle
import random
import resource
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import fastavro
import large_table
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from confluent_kafka import Producer
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from event_schema import SCHEMA  # benchmarks/ is on sys.path when a script runs
from ingest import record, servers, write_project, write_tables_project
from many_tables import checkout

from tableflow_core.dev import broker

KEY_SCHEMA = {"type": "record", "name": "EventKey", "fields": [{"name": "id", "type": "long"}]}
PARTITIONS = 4

Change = tuple[int, dict[str, Any] | None]  # (id, value or None for a tombstone)


def add_workload_arguments(
    parser: argparse.ArgumentParser, batches: int, batches_help: str | None = None
) -> None:
    """The workload's sizes, the same flags in every upsert benchmark: `--rows` (table
    sizes, comma-separated), `--batch` (changes per batch, `batch_changes`), `--batches`."""
    parser.add_argument("--rows", default="1000000,10000000", help="table sizes, comma-separated")
    parser.add_argument("--batch", type=int, default=100_000)
    parser.add_argument("--batches", type=int, default=batches, help=batches_help)


def batch_changes(rows: int, size: int, seed: int, new_share: float = 0.0) -> list[Change]:
    """Updates of existing ids (some ids several times), 10% tombstones; with
    `new_share`, that share of the records are of ids new to the table (each batch its
    own: ids from `rows + seed * size`)."""
    rng = random.Random(seed)
    hot = [rng.randrange(rows) for _ in range(max(1, size // 50))]
    changes: list[Change] = []
    fresh = itertools.count(rows + seed * size)
    for _ in range(size):
        if new_share and rng.random() < new_share:
            key = next(fresh)
        else:
            key = rng.choice(hot) if rng.random() < 0.1 else rng.randrange(rows)
        if rng.random() < 0.1:
            changes.append((key, None))
        else:
            changes.append((key, {**record(key), "amount": key * 0.25 + seed, "qty": seed % 100}))
    return changes


class Topic:
    def __init__(self, bootstrap: str, url: str, name: str) -> None:
        client = SchemaRegistryClient({"url": url})
        self.name = name
        self.bootstrap = bootstrap
        self.url = url
        self.value_header = struct.pack(
            ">bI", 0, client.register_schema(f"{name}-value", Schema(json.dumps(SCHEMA), "AVRO"))
        )
        self.key_header = struct.pack(
            ">bI", 0, client.register_schema(f"{name}-key", Schema(json.dumps(KEY_SCHEMA), "AVRO"))
        )
        self.value_schema = fastavro.parse_schema(SCHEMA)
        self.key_schema = fastavro.parse_schema(KEY_SCHEMA)

    def _frame(self, header: bytes, schema: Any, value: dict[str, Any]) -> bytes:
        buffer = io.BytesIO()
        buffer.write(header)
        fastavro.schemaless_writer(buffer, schema, value)
        return buffer.getvalue()

    def produce(self, changes: list[Change]) -> None:
        """Produce `changes`, each key to its own partition (as a keyed producer does: the
        latest wins), many records per `produce_batch` call."""
        by_partition: dict[int, list[Change]] = {p: [] for p in range(PARTITIONS)}
        for change in changes:
            by_partition[change[0] % PARTITIONS].append(change)
        for partition, part in by_partition.items():
            self.produce_partition(partition, part)

    def messages(self, changes: list[Change]) -> list[dict[str, Any]]:
        value = self.value_schema
        return [
            {
                "key": self.key_header + avro_long(key),
                "value": None if v is None else self._frame(self.value_header, value, v),
            }
            for key, v in changes
        ]

    def produce_partition(self, partition: int, changes: list[Change]) -> None:
        producer = Producer(broker.producer_config(self.bootstrap))
        for start in range(0, len(changes), PRODUCE_CHUNK):
            messages = self.messages(changes[start : start + PRODUCE_CHUNK])
            produce_messages(producer, self.name, partition, messages)
        remaining = producer.flush(300)
        assert remaining == 0, f"{remaining} records not delivered"

    def produce_initial(self, rows: int) -> float:
        """Produce ids 0..rows-1 (one record each), a producer process per partition;
        wall seconds."""
        started = time.perf_counter()
        context = multiprocessing.get_context("spawn")
        args = [(self.bootstrap, self.url, self.name, p, rows) for p in range(PARTITIONS)]
        with context.Pool(min(PARTITIONS, os.cpu_count() or 1)) as pool:
            pool.starmap(_produce_initial_partition, args)
        return time.perf_counter() - started


def produce_messages(
    producer: Producer, topic: str, partition: int, messages: list[dict[str, Any]]
) -> None:
    """`messages` ({key, value}) to `partition` by `produce_batch`; those the local queue
    refused are sent again once it drained a little."""
    pending = messages
    while pending:
        queued = producer.produce_batch(topic, pending, partition=partition)
        failed = [m for m in pending if m.get("_error")]
        if queued < len(pending) and not failed:
            failed = pending[queued:]
        pending = [{"key": m["key"], "value": m["value"]} for m in failed]
        producer.poll(0.05 if pending else 0)


PRODUCE_CHUNK = 20_000


def avro_long(n: int) -> bytes:
    """Avro's encoding of a long (zig-zag varint): the key {id} after its header."""
    n = (n << 1) ^ (n >> 63)
    out = bytearray()
    while n & ~0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _produce_initial_partition(
    bootstrap: str, url: str, name: str, partition: int, rows: int
) -> None:
    topic = Topic(bootstrap, url, name)
    ids = range(partition, rows, PARTITIONS)
    for start in range(0, len(ids), PRODUCE_CHUNK * 5):
        chunk = ids[start : start + PRODUCE_CHUNK * 5]
        topic.produce_partition(partition, [(i, record(i)) for i in chunk])


def measured_apply(
    root: Path, spark: Any, table_name: str | None = None, handle: Any = None
) -> dict[str, Any]:
    """Plan + apply as `tableflow apply --auto-approve` does (`--select table_name`: that
    table only; cli/commands/apply.py): one catalog opened for both, the apply on the
    world the plan read, the catalog closed; with what it cost: wall seconds (the
    catalog's open and close in `plan` and `apply`), CPU seconds of this process tree
    (driver, JVM, Python workers), the run's phase timings from run_results (`timings`,
    when the tree reports them) and the Spark stages it ran. With `handle` (a catalog
    kept open), as a `tableflow run` cycle does it (tasks/run.py): the plan reads through
    the open catalog without the tables' activity."""
    from tableflow_core.config.loader import load_project
    from tableflow_core.targets.catalog import use_catalog
    from tableflow_core.tasks.apply import ApplyTask
    from tableflow_core.tasks.plan import PlanTask

    stages = SparkStages(spark)
    cpu_before = tree_cpu(os.getpid())
    threads_before = jvm_thread_cpu(os.getpid())
    started = time.perf_counter()
    project = load_project(root)
    tables = tuple(t for t in project.tables if table_name in (None, t.name))
    selectors = () if table_name is None else (table_name,)
    with use_catalog(project, handle) as opened:
        planning = PlanTask(
            project, tables, selectors=selectors, handle=opened,
            observe_activity=handle is None,
        )  # fmt: skip
        plan = planning.run()
        planned = time.perf_counter()
        results = ApplyTask(project, plan, spark=spark, handle=opened, world=planning.world).run()
    ended = time.perf_counter()
    assert results.status == "success", results
    table = results.tables[0]
    return {
        "wall": ended - started,
        "plan": planned - started,
        "apply": ended - planned,
        "cpu": {k: v - cpu_before[k] for k, v in tree_cpu(os.getpid()).items()},
        "jvm_threads": {k: v - threads_before[k] for k, v in jvm_thread_cpu(os.getpid()).items()},
        "records_read": table.records_read,
        "timings": dict(getattr(table, "timings", None) or {}),
        "stages": stages.since(),
        "query": stages.longest_query(),
    }


def tree_cpu(pid: int) -> dict[str, float]:
    """user+sys CPU seconds of a process tree (Linux /proc, reaped children included), by
    process: `driver` (this Python process), `jvm` (Spark's JVM), `workers` (the Python
    workers the JVM forks, e.g. the decode stage's) and `stack` (the broker and registry
    this script started: not tableflow's, left out of its total)."""
    tick = os.sysconf("SC_CLK_TCK")
    totals = {"driver": 0.0, "jvm": 0.0, "workers": 0.0, "stack": 0.0}
    stack: list[tuple[int, str | None]] = [(pid, None)]
    while stack:
        current, parent = stack.pop()
        try:
            stat = Path(f"/proc/{current}/stat").read_text()
            name = stat.split("(", 1)[1].rsplit(")", 1)[0]
            if parent is None:
                kind = "driver"
            elif parent == "driver":
                kind = "jvm" if name == "java" else "stack"
            else:
                kind = "workers" if parent in ("jvm", "workers") else parent
            fields = stat.rsplit(")", 1)[1].split()
            totals[kind] += sum(int(f) for f in fields[11:15]) / tick  # utime stime cutime cstime
            for task in Path(f"/proc/{current}/task").iterdir():
                stack.extend((int(c), kind) for c in (task / "children").read_text().split())
        except (OSError, ValueError):
            continue
    return totals


# The JVM's threads by what they do, by name prefix (Linux thread names are cut at 15).
JVM_THREAD_KINDS = (
    ("C1 CompilerThre", "jit"),
    ("C2 CompilerThre", "jit"),
    ("GC Thread", "gc"),
    ("G1 ", "gc"),
    ("VM Thread", "gc"),
    ("Executor task l", "tasks"),
)


def jvm_thread_cpu(driver_pid: int) -> dict[str, float]:
    """CPU seconds of the Spark JVM's live threads by kind (`JVM_THREAD_KINDS`); `other`:
    the driver's threads (py4j calls: analysis, planning, codegen, Iceberg commits), the
    scheduler, shuffle, listeners. Threads that ended are missed (the caller compares with
    the process total)."""
    tick = os.sysconf("SC_CLK_TCK")
    totals = {"jit": 0.0, "gc": 0.0, "tasks": 0.0, "other": 0.0}
    for child in Path(f"/proc/{driver_pid}/task").glob("*/children"):
        for pid in child.read_text().split():
            try:
                if Path(f"/proc/{pid}/comm").read_text().strip() != "java":
                    continue
                for thread in Path(f"/proc/{pid}/task").iterdir():
                    stat = (thread / "stat").read_text()
                    name = stat.split("(", 1)[1].rsplit(")", 1)[0]
                    kind = next((k for p, k in JVM_THREAD_KINDS if name.startswith(p)), "other")
                    fields = stat.rsplit(")", 1)[1].split()
                    totals[kind] += (int(fields[11]) + int(fields[12])) / tick
            except (OSError, ValueError):
                continue
    return totals


# A stage's part of the batch, by the operators of its plan (Spark's operation graph).
STAGE_KINDS = (
    ("PythonMapInArrow", "kafka read+decode"),
    ("BatchScan", "table scan"),
    ("MergeRows", "join"),
)


def stage_kind(operators: list[str], shuffle_write: int) -> str:
    kind = next((k for marker, k in STAGE_KINDS if any(marker in o for o in operators)), "write")
    return "join+write" if kind == "join" and not shuffle_write else kind


class SparkStages:
    """The Spark stages the application ran since this object was made, from its status
    store (what the Spark UI shows; the UI itself is off)."""

    def __init__(self, spark: Any) -> None:
        self.session = spark
        self.context = spark.sparkContext
        self.store = self.context._jsc.sc().statusStore()
        self.before = {s["id"] for s in self._all()}
        self.queries_before = self._query_ids()

    def _all(self) -> list[dict[str, Any]]:
        gateway = self.context._gateway
        listed = self.store.stageList(
            None, False, False, gateway.new_array(gateway.jvm.double, 0),
            gateway.jvm.java.util.ArrayList(),
        )  # fmt: skip
        rows = []
        for i in range(listed.length()):
            stage = listed.apply(i)
            if stage.status().toString() != "COMPLETE":
                continue
            start = stage.submissionTime().get().getTime() / 1000
            end = stage.completionTime().get().getTime() / 1000
            rows.append({
                "id": stage.stageId(),
                "tasks": stage.numTasks(),
                "start": start,
                "end": end,
                "wall": end - start,
                "run": stage.executorRunTime() / 1000,
                "cpu": stage.executorCpuTime() / 1e9,
                "input": stage.inputRecords(),
                "shuffle_read": stage.shuffleReadRecords(),
                "shuffle_write": stage.shuffleWriteRecords(),
                "output": stage.outputRecords(),
            })  # fmt: skip
        return rows

    def _operators(self, stage_id: int) -> list[str]:
        names: list[str] = []
        clusters = [self.store.operationGraphForStage(stage_id).rootCluster()]
        while clusters:
            cluster = clusters.pop()
            names.append(cluster.name())
            nodes = cluster.childNodes().iterator()
            while nodes.hasNext():
                names.append(nodes.next().name())
            children = cluster.childClusters().iterator()
            while children.hasNext():
                clusters.append(children.next())
        return names

    def longest_query(self) -> tuple[float, float] | None:
        """(start, end) epoch seconds of the longest SQL execution since `before` (the MERGE:
        its stages and the commit of its writes run inside it)."""
        listed = self.session._jsparkSession.sharedState().statusStore().executionsList()
        spans = []
        for i in range(listed.length()):
            execution = listed.apply(i)
            if execution.executionId() in self.queries_before:
                continue
            completion = execution.completionTime()
            if completion.isDefined():
                start = execution.submissionTime() / 1000
                spans.append((start, completion.get().getTime() / 1000))
        return max(spans, key=lambda span: span[1] - span[0], default=None)

    def _query_ids(self) -> set[int]:
        listed = self.session._jsparkSession.sharedState().statusStore().executionsList()
        return {listed.apply(i).executionId() for i in range(listed.length())}

    def since(self) -> list[dict[str, Any]]:
        rows = sorted((s for s in self._all() if s["id"] not in self.before), key=lambda s: s["id"])
        for row in rows:
            row["kind"] = stage_kind(self._operators(row["id"]), row["shuffle_write"])
        return rows


def covered_seconds(intervals: list[tuple[float, float]]) -> float:
    """Seconds covered by at least one of the intervals (concurrent stages count once)."""
    total, reach = 0.0, float("-inf")
    for start, end in sorted(intervals):
        if end > reach:
            total += end - max(start, reach)
            reach = end
    return total


def breakdown(measured: dict[str, Any]) -> dict[str, float]:
    """One apply's seconds by part. A batch merged on the driver: its read+decode job,
    the driver's merge, the deletes table's commit and the publish. A batch through Spark:
    `merge` is the MERGE statement: its Spark stages by kind
    (stages of one kind summed; the two map stages run side by side), `merge driver` the
    parts of it no stage covered: analysis and planning (before its SQL execution starts),
    to the first stage (Iceberg's scan planning), between stages (adaptive re-planning,
    scheduling) and after the last (the commit of the row delta on the branch)."""
    timings, stages = measured["timings"], measured["stages"]
    parts: dict[str, float] = {"plan": measured["plan"]}
    if "shared_job" in timings:  # the driver's merge (pipeline/upsert_rows.py)
        _driver_parts(measured, parts)
    else:
        _spark_parts(measured, parts)
    cpu = measured["cpu"]
    parts["CPU"] = sum(seconds for kind, seconds in cpu.items() if kind != "stack")
    for kind, seconds in cpu.items():
        parts[f"  CPU {kind}"] = seconds
        if kind == "jvm":
            threads = measured.get("jvm_threads", {})
            for thread_kind, thread_seconds in threads.items():
                parts[f"    JVM {thread_kind}"] = thread_seconds
            if threads:
                parts["    JVM ended threads"] = seconds - sum(threads.values())
    parts["  executor CPU (JVM)"] = sum(st["cpu"] for st in stages)
    parts["shuffled rows (k)"] = sum(st["shuffle_write"] for st in stages) / 1000
    parts["jobs' stages"] = len(stages)
    return parts


def _driver_parts(measured: dict[str, Any], parts: dict[str, float]) -> None:
    """A batch merged on the driver (a shared job's read tasks decode it): the job, the
    driver's merge (a batch's deletes table commit inside it), a first load's deletes
    table commit, the publish."""
    timings = measured["timings"]
    named = ("load", "start_run", "shared_job", "merge", "remember_deletes", "publish_commit")
    parts["apply frame"] = measured["apply"] - sum(timings.get(k, 0.0) for k in named)
    parts["load+branch"] = timings.get("load", 0.0) + timings.get("start_run", 0.0)
    parts["read+decode job"] = timings.get("shared_job", 0.0)
    parts["driver merge"] = timings.get("merge", 0.0)
    parts["  index build"] = timings.get("index_build", 0.0)
    # the wait for an index built while the batch was read (or for the last batch's move)
    parts["  index wait"] = timings.get("index_take", 0.0)
    parts["remember deletes"] = timings.get("remember_deletes", 0.0)
    # a batch's deletes table commit runs inside its merge, beside the file writes
    parts["  remember deletes (in merge)"] = timings.get("merge_remember_deletes", 0.0)
    parts["publish commit"] = timings.get("publish_commit", 0.0)
    for stage in measured["stages"]:
        key = f"  {stage['kind']}"
        parts[key] = parts.get(key, 0.0) + stage["wall"]


def _spark_parts(measured: dict[str, Any], parts: dict[str, float]) -> None:
    """A batch through Spark's window, append and MERGE."""
    timings, stages = measured["timings"], measured["stages"]
    staged = sum(timings.get(k, 0.0) for k in ("read_ranges", "decode", "route_bad_records"))
    ingest = timings.get("load", 0.0) + timings.get("start_run", 0.0) + staged
    ingest += timings.get("write", 0.0) + timings.get("publish", 0.0)
    parts["apply frame"] = measured["apply"] - ingest if timings else measured["apply"]
    parts["load+branch"] = timings.get("load", 0.0) + timings.get("start_run", 0.0)
    parts["stage setup"] = staged + timings.get("write", 0.0) - timings.get("merge", 0.0)
    if "merge" in timings:
        parts["merge"] = timings["merge"]
    for stage in stages:
        key = f"  {stage['kind']}"
        parts[key] = parts.get(key, 0.0) + stage["wall"]
    query = measured.get("query")
    if "merge" in timings and query and stages:
        start, end = query
        inside = [(st["start"], st["end"]) for st in stages if start <= st["start"] <= end]
        first, last = min(i[0] for i in inside), max(i[1] for i in inside)
        parts["  merge analysis+planning"] = timings["merge"] - (end - start)
        parts["  merge to first stage"] = first - start
        parts["  merge between stages"] = last - first - covered_seconds(inside)
        parts["  merge commit"] = end - last
    parts["audits"] = timings.get("publish", 0.0) - timings.get("publish_commit", 0.0)
    parts["publish commit"] = timings.get("publish_commit", 0.0)


def breakdown_line(parts: dict[str, float]) -> str:
    return ", ".join(f"{k.strip()} {v:.2f}" if k != "jobs' stages" else f"{int(v)} stages"
                     for k, v in parts.items())  # fmt: skip


def mean_parts(rows: list[dict[str, float]]) -> dict[str, float]:
    keys = list(dict.fromkeys(k for row in rows for k in row))
    return {k: sum(row.get(k, 0.0) for row in rows) / len(rows) for k in keys}


def final_rows(changes: list[Change]) -> tuple[pa.Table, list[int]]:
    """The batch reduced to its last record per id: (rows to upsert, ids to delete)."""
    last: dict[int, dict[str, Any] | None] = {}
    for key, value in changes:
        last[key] = value
    upserts = [v for v in last.values() if v is not None]
    deletes = [k for k, v in last.items() if v is None]
    return pa.Table.from_pylist(upserts), deletes


def initial_rows(rows: int) -> pa.Table:
    """`record(i)` for i in 0..rows-1 as one Arrow table, built by column (a list of 10M
    dicts would take minutes and gigabytes); the types `Table.from_pylist` infers."""
    return initial_rows_range(0, rows)


def initial_rows_range(start_id: int, stop_id: int) -> pa.Table:
    """`record(i)` for i in start_id..stop_id-1 (`initial_rows`)."""
    i = np.arange(start_id, stop_id, dtype=np.int64)
    users = pa.array([f"user-{k}" for k in range(5000)])
    cities = pa.array([f"city-{k}" for k in range(300)])
    city = pc.take(cities, pa.array(i % 300))
    start = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    table = pa.table({
        "id": pa.array(i),
        "user": pc.take(users, pa.array(i % 5000)),
        "amount": pa.array(i * 0.25),
        "qty": pa.array(i % 100),
        "active": pa.array(i % 2 == 0),
        "at": pa.array(int(start.timestamp()) * 1_000_000 + i * 1_000_000, pa.timestamp("us", "UTC")),
        "city": pc.if_else(pa.array(i % 7 == 0), pa.scalar(None, pa.string()), city),
        "score": pa.array((i % 1000) / 10.0),
        "kind": pc.take(pa.array(["A", "B", "C"]), pa.array(i % 3)),
        "day": pa.array((dt.date(2026, 1, 1) - dt.date(1970, 1, 1)).days + (i % 365), pa.int32()).cast(pa.date32()),
    })  # fmt: skip
    sample = pa.Table.from_pylist(
        [record(k) for k in range(start_id, min(stop_id, start_id + 2000))]
    )
    assert table.slice(0, sample.num_rows).equals(sample), "initial_rows differs from record()"
    return table


def pyiceberg_catalog(work: Path) -> Any:
    from pyiceberg.catalog.sql import SqlCatalog

    return SqlCatalog(
        "bench", uri=f"sqlite:///{work}/pyiceberg.db", warehouse=f"file://{work}/pyiceberg-wh"
    )


PYICEBERG_CHUNK_ROWS = 10_000_000  # the rows built and appended at a time (memory)


def pyiceberg_load(work: Path, rows: int) -> tuple[float, Any]:
    """(seconds, table): the same initial rows with pyiceberg's own `append`, in one
    transaction of appends of at most PYICEBERG_CHUNK_ROWS rows (100M rows built at once
    would take ~7 GB); the seconds are pyiceberg's, the rows' building left out."""
    catalog = pyiceberg_catalog(work)
    catalog.create_namespace("bench")
    table = catalog.create_table("bench.events", initial_rows_range(0, min(rows, 1000)).schema)
    seconds = 0.0
    with table.transaction() as tx:
        for start in range(0, rows, PYICEBERG_CHUNK_ROWS):
            chunk = initial_rows_range(start, min(rows, start + PYICEBERG_CHUNK_ROWS))
            started = time.perf_counter()
            tx.append(chunk)
            seconds += time.perf_counter() - started
            del chunk
        started = time.perf_counter()  # the commit, at the block's end
    seconds += time.perf_counter() - started
    return seconds, catalog.load_table("bench.events")


def pyiceberg_upsert(table: Any, changes: list[Change]) -> float:
    """Seconds for pyiceberg's own `upsert` (last record per key) + `delete` (tombstones)."""
    from pyiceberg.expressions import In

    upserts, deletes = final_rows(changes)
    started = time.perf_counter()
    table.upsert(upserts.cast(table.schema().as_arrow()), join_cols=["id"])
    if deletes:
        table.delete(In("id", deletes))
    return time.perf_counter() - started


def _pyiceberg_upsert_child(work: Path, changes: list[Change], answer: Any) -> None:
    table = pyiceberg_catalog(work).load_table("bench.events")
    answer.put(pyiceberg_upsert(table, changes))


def pyiceberg_upsert_boxed(work: Path, changes: list[Change], timeout: float) -> float | None:
    """pyiceberg's upsert+delete in a child process (`pyiceberg_upsert`); its seconds, or
    None when it had not finished after `timeout` seconds (then it is stopped: the table
    keeps what it committed so far)."""
    seconds: float | None = in_child(
        _pyiceberg_upsert_child, (work, changes), timeout, "pyiceberg's upsert"
    )
    return seconds


def in_child(target: Any, args: tuple[Any, ...], timeout: float, what: str) -> Any:
    """`target(*args, answer)` in a spawned process: what it put on `answer`, or None when
    it had not finished after `timeout` seconds (then it is stopped)."""
    context = multiprocessing.get_context("spawn")
    answer = context.Queue()
    child = context.Process(target=target, args=(*args, answer))
    child.start()
    child.join(timeout)
    if child.is_alive():
        child.terminate()
        child.join(30)
        return None
    assert child.exitcode == 0, f"{what} failed (exit {child.exitcode})"
    return answer.get(timeout=10)


def compact(project_root: Path, spark: Any, how: str = "spark") -> None:
    """Rewrite the data files with their deletes applied (the embedded catalog runs
    meanwhile): `spark`, every data file (`rewrite_data_files`, rewrite-all); `driver`,
    those with deletes, by the driver's `apply_deletes` (what `tableflow run` runs for
    readers; minutes instead of half an hour at 100M rows). Spark keeps a catalog it
    loaded under its name, so the project's catalog is registered under a name of this
    project's own: another project's run in the same session may have loaded its catalog
    as `tableflow`."""
    from tableflow_core.config.loader import load_project
    from tableflow_core.engine.spark_session import register_catalog
    from tableflow_core.pipeline.apply_deletes import apply_deletes
    from tableflow_core.targets.catalog import open_catalog

    project = load_project(project_root)
    with open_catalog(project) as handle:
        if how == "driver":
            apply_deletes(handle.catalog.load_table("bench.events"), indexes=None)
            return
        name = f"compact_{project.target.catalog.port}"
        register_catalog(spark, name, handle.spark_properties)
        spark.sql(
            f"CALL {name}.system.rewrite_data_files(table => 'bench.events', "
            "options => map('rewrite-all', 'true', 'remove-dangling-deletes', 'true'))"
        )


def catalog_commits(project_root: Path) -> int:
    """The table's catalog commits so far (its metadata files, CREATE TABLE included)."""
    from tableflow_core.config.loader import load_project
    from tableflow_core.targets.catalog import open_catalog

    with open_catalog(load_project(project_root)) as handle:
        return len(handle.catalog.load_table("bench.events").metadata.metadata_log) + 1


def table_summary(project_root: Path) -> tuple[int, float]:
    from tableflow_core.config.loader import load_project
    from tableflow_core.targets.catalog import open_catalog

    with open_catalog(load_project(project_root)) as handle:
        arrow = handle.catalog.load_table("bench.events").scan().to_arrow()
        return arrow.num_rows, round(pc.sum(arrow["amount"]).as_py(), 2)


REPO = Path(__file__).resolve().parent.parent
MARK = "@@measured "  # a worker's answer line (the apply's own output goes to stdout too)
# A worker runs this script without the editable install's finder: that finder (on
# sys.meta_path, before PYTHONPATH's entries) maps tableflow_core to the checkout the
# install came from, so the worker's tree would not be the one measured.
WORKER_START = (
    "import os, runpy, sys; "
    "sys.meta_path[:] = [f for f in sys.meta_path if '__editable__' not in f.__module__]; "
    "sys.argv = sys.argv[1:]; sys.path.insert(1, os.path.dirname(sys.argv[0])); "
    "runpy.run_path(sys.argv[0], run_name='__main__')"
)


def bench_session(cores: int, short_lived: bool) -> Any:
    """The Spark application of `tableflow apply` (`short_lived`) or of `tableflow run` (a
    service, with its driver's Arrow pool; a tree from before services existed: its
    long-lived application), in this process."""
    from tableflow_core.engine import spark_session

    options: dict[str, bool] = {"short_lived": short_lived}
    service = "service" in inspect.signature(spark_session.build_spark_session).parameters
    if service and not short_lived:
        options["service"] = True
        spark_session.use_system_arrow_pool()
    return spark_session.build_spark_session(f"local[{cores}]", "tableflow-bench", **options)


def reader_process(root: Path | None) -> str:
    """The reader process (engine/reader_process.py) as the command has it: `root` None,
    none (a one-shot `tableflow apply` starts none); else the one `tableflow run`
    starts (`start_reader_for`, the project's tables), waited for: a run's cycles find it
    ready from its first seconds on. A tree from before it: none."""
    try:
        from tableflow_core.engine import reader_process as readers
    except ImportError:
        return "none (a tree before it)"
    readers.stop_reader_process()
    if root is None:
        return "none, as a one-shot apply"
    from tableflow_core.config.loader import load_project

    project = load_project(root)
    started = time.perf_counter()
    readers.start_reader_for(project, project.tables)
    process = readers.current()
    if process is None or not process.wait_ready(120):
        return "did not start: the driver reads every range"
    return f"started as `tableflow run` starts it, ready in {time.perf_counter() - started:.2f} s"


def reader_process_mb() -> str:
    """The reader process's peak RSS (Linux /proc), or why there is none."""
    try:
        from tableflow_core.engine import reader_process
    except ImportError:
        return "none (a tree before it)"
    process = reader_process.current()
    if process is None or process.ended:
        return "none"
    status = Path(f"/proc/{process.pid}/status").read_text()
    peak = next(line.split()[1] for line in status.splitlines() if line.startswith("VmHWM:"))
    return f"peak RSS {int(peak) / 1024:,.0f} MB"


def worker(root: Path, cores: int, short_lived: bool) -> None:
    """`--worker ROOT`: one tree's side of the A/B mode, its own Spark application; applies
    the project at ROOT for each `apply` line on stdin and answers one line (MARK + JSON)."""
    import tableflow_core

    print(MARK + json.dumps({"tree": tableflow_core.__file__}), flush=True)
    spark = bench_session(cores, short_lived)
    for line in sys.stdin:
        if line.strip() != "apply":
            break
        print(MARK + json.dumps(measured_apply(root, spark)), flush=True)
    spark.stop()


class Worker:
    """A `--worker` process with PYTHONPATH at one tree (its own tableflow_core)."""

    def __init__(
        self, label: str, tree: Path, root: Path, cores: int, log: Path, short_lived: bool
    ) -> None:
        self.label = label
        self.log = log
        self.process = subprocess.Popen(
            [sys.executable, "-c", WORKER_START, __file__, "--worker", str(root),
             "--cores", str(cores),
             *(["--short-lived"] if short_lived else [])],
            env={**os.environ, "PYTHONPATH": str(tree)}, cwd=tree, text=True,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log.open("w"),
        )  # fmt: skip
        tree_file = self._answer()["tree"]
        assert tree_file.startswith(str(tree)), (label, tree_file)

    def _answer(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            if line.startswith(MARK):
                answer: dict[str, Any] = json.loads(line[len(MARK) :])
                return answer
        raise RuntimeError(f"worker {self.label} ended (exit {self.process.wait()}): {self.log}")

    def apply(self) -> dict[str, Any]:
        assert self.process.stdin is not None
        self.process.stdin.write("apply\n")
        self.process.stdin.flush()
        return self._answer()

    def stop(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            self.process.wait(120)
        except subprocess.TimeoutExpired:
            self.process.kill()


def ab_mode(args: argparse.Namespace, work: Path, topic: Topic, bootstrap: str, url: str) -> None:
    """This tree and `--against REV`, each on its own table (project, catalog, Spark
    application) fed by the same topic; every batch applied by both, the order alternating."""
    trees = {"this tree": REPO, args.against: checkout(args.against, work / "against")}
    workers = []
    for n, (label, tree) in enumerate(trees.items()):
        root = write_project(
            work / f"project_{n}", bootstrap, url, topic.name, args.cores,
            mode="upsert", key_columns=["id"], key={"format": "avro"},
        )  # fmt: skip
        log = work / f"worker_{n}.log"
        workers.append(Worker(label, tree, root, args.cores, log, args.short_lived))
    try:
        for w in workers:
            load = w.apply()
            cpu = sum(v for k, v in load["cpu"].items() if k != "stack")
            print(f"initial load  {w.label:<12} {load['wall']:7.2f} s, CPU {cpu:6.1f} s",
                  flush=True)  # fmt: skip
        figures: dict[str, list[dict[str, float]]] = {w.label: [] for w in workers}
        for seed in range(1, args.batches + 1):
            topic.produce(batch_changes(args.rows, args.batch, seed=seed))
            for w in workers if seed % 2 else list(reversed(workers)):
                parts = {"wall": 0.0, **breakdown(m := w.apply())}
                parts["wall"] = m["wall"]
                figures[w.label].append(parts)
                print(f"batch {seed:2d} {w.label:<12} {breakdown_line(parts)}", flush=True)
        print(f"\nmeans over batches 2..{args.batches} (load average now "
              f"{os.getloadavg()[0]:.2f}, {os.cpu_count()} cores):")  # fmt: skip
        means = {label: mean_parts(rows[1:] or rows) for label, rows in figures.items()}
        keys = list(dict.fromkeys(k for m in means.values() for k in m))
        print(f"{'part':<22}" + "".join(f"{label:>14}" for label in means))
        for key in keys:
            print(f"{key:<22}" + "".join(f"{m.get(key, 0.0):>14.2f}" for m in means.values()))
    finally:
        for w in workers:
            w.stop()
    summaries = [table_summary(work / f"project_{n}") for n in range(len(workers))]
    assert len(set(summaries)) == 1, summaries
    commits = [catalog_commits(work / f"project_{n}") for n in range(len(workers))]
    print(f"both tables: {summaries[0][0]:,} rows, sum of amounts {summaries[0][1]}; catalog "
          f"commits {dict(zip(trees, commits, strict=True))}")  # fmt: skip


def measure_size(
    args: argparse.Namespace, rows: int, work: Path, bootstrap: str, url: str
) -> dict[str, float | None]:
    """One table size, in its own project and Spark application (a session keeps the first
    catalog of a name it loads): initial load, batch 1 against pyiceberg, batches 2.., the
    scans. The figures the comparison lines use: tableflow's mean batch (CPU and wall s)
    and batch 1 of both (wall s; pyiceberg None when time-boxed)."""
    spark = bench_session(args.cores, args.short_lived)
    try:
        return _measure_size(args, rows, work, bootstrap, url, spark)
    finally:
        spark.stop()


UPSERT_TABLE, DEDUP_TABLE = "events", "events_dedup"


def bench_tables(topic: str) -> list[dict[str, Any]]:
    """The two tables of a size's project, both on its topic: an upsert table on id, and
    an append table whose `dedup` on id looks at what the table holds."""
    dedup = {"type": "dedup", "keys": ["id"], "keep": "first"}
    return [
        {"name": UPSERT_TABLE, "topic": topic, "mode": "upsert", "key_columns": ["id"],
         "key": {"format": "avro"}},
        {"name": DEDUP_TABLE, "topic": topic, "transforms": [dedup]},
    ]  # fmt: skip


def build_directly(root: Path, topic: Topic, rows: int, spark: Any) -> None:
    """The tables of `rows` rows built directly (benchmarks/large_table.py): tableflow
    creates them on the empty topic, then the placeholders and the data files."""
    from tableflow_core.config.loader import load_project
    from tableflow_core.targets.catalog import open_catalog

    for table in (UPSERT_TABLE, DEDUP_TABLE):
        created = measured_apply(root, spark, table)
        assert created["records_read"] == 0, created
    created_ms = int(time.time() * 1000)
    produce_s = large_table.produce_placeholders(
        topic.bootstrap, topic.name, PARTITIONS, rows, topic.key_header
    )
    with open_catalog(load_project(root)) as handle:
        identifiers = [f"bench.{UPSERT_TABLE}", f"bench.{DEDUP_TABLE}"]
        build_s = large_table.build_tables(
            handle.catalog, identifiers, topic.name, PARTITIONS, rows, created_ms,
            initial_rows_range,
        )  # fmt: skip
        files = len(handle.catalog.load_table(identifiers[0]).inspect.data_files())
    print(f"built directly: {rows:,} placeholder records produced in {produce_s:.1f} s; both "
          f"tables' data files written and committed in {build_s:.1f} s ({files} data files "
          f"each); load average {os.getloadavg()[0]:.2f}", flush=True)  # fmt: skip


def _pyiceberg_figures_child(metadata_location: str, answer: Any) -> None:
    from pyiceberg.table import StaticTable

    table = StaticTable.from_metadata(metadata_location)
    started = time.perf_counter()
    figures = large_table.pyiceberg_figures_of(table)
    answer.put((figures, time.perf_counter() - started))


def pyiceberg_figures_boxed(
    metadata_location: str, timeout: float
) -> tuple[large_table.Figures, float] | None:
    """pyiceberg's figures of one snapshot and its seconds, in a child process; None when
    it had not finished after `timeout` seconds."""
    result: tuple[large_table.Figures, float] | None = in_child(
        _pyiceberg_figures_child, (metadata_location,), timeout, "pyiceberg's read"
    )
    return result


def check_readers(
    root: Path, spark: Any, label: str, models: dict[str, large_table.Figures], timeout: float
) -> None:
    """Every reader's figures (`large_table.Figures`) of each table in `models` against its model,
    each reader timed: pyiceberg (a child process, stopped after `timeout` s), DuckDB,
    Spark (the project's catalog registered under a name of this project's own), Trino (a
    server started for the check, on the project's catalog)."""
    from tableflow_core.config.loader import load_project
    from tableflow_core.engine.spark_session import register_catalog
    from tableflow_core.targets.catalog import open_catalog

    project = load_project(root)
    with open_catalog(project) as handle, large_table.trino_reader(handle, root) as trino:
        spark_catalog = f"readers_{project.target.catalog.port}"
        register_catalog(spark, spark_catalog, handle.spark_properties)
        for table, model in models.items():
            identifier = f"bench.{table}"
            loaded = handle.catalog.load_table(identifier)
            deletes = sum(1 for task in loaded.scan().plan_files() for _ in task.delete_files)
            seconds: dict[str, float] = {}
            figures: dict[str, large_table.Figures] = {}
            boxed = pyiceberg_figures_boxed(loaded.metadata_location, timeout)
            if boxed is not None:
                figures["pyiceberg"], seconds["pyiceberg"] = boxed
            for reader in ("DuckDB", "Spark", "Trino"):
                started = time.perf_counter()
                figures[reader] = large_table.engine_figures(
                    reader, loaded.metadata_location, spark, f"{spark_catalog}.{identifier}", trino
                )
                seconds[reader] = time.perf_counter() - started
            print("  " + large_table.agree(f"{table} {label}", figures, model), flush=True)
            timed = ", ".join(f"{r} {s:.2f} s" for r, s in seconds.items())
            missing = "" if boxed else f"; pyiceberg not done after {timeout:.0f} s (stopped)"
            print(f"    read in: {timed} ({deletes} delete files){missing}", flush=True)


def _measure_size(
    args: argparse.Namespace, rows: int, work: Path, bootstrap: str, url: str, spark: Any
) -> dict[str, float | None]:
    from tableflow_core.config.loader import load_project
    from tableflow_core.pipeline.key_index import INDEXES
    from tableflow_core.targets.catalog import open_catalog

    name = f"bench_upsert_{rows}"
    broker.create_topics(bootstrap, {name: PARTITIONS})
    topic = Topic(bootstrap, url, name)
    root = write_tables_project(work / f"project_{rows}", bootstrap, url, args.cores,
                                bench_tables(topic.name))  # fmt: skip
    direct = rows > args.direct_above
    print(f"\n== rows {rows:,}, batch {args.batch:,} records ({args.new_share:.0%} new ids, 10% "
          f"tombstones), {PARTITIONS} partitions, local[{args.cores}]; the table "
          + ("built directly" if direct else "loaded through Kafka")
          + f"; load average {os.getloadavg()[0]:.2f} ({os.cpu_count()} cores)", flush=True)  # fmt: skip
    if direct:
        build_directly(root, topic, rows, spark)
    else:
        produce_s = topic.produce_initial(rows)
        print(f"produced the {rows:,} records in {produce_s:.1f} s", flush=True)
        for table in (UPSERT_TABLE, DEDUP_TABLE):
            load = measured_apply(root, spark, table)
            load_cpu = sum(v for k, v in load["cpu"].items() if k != "stack")
            print(f"initial load  {table:<12} tableflow apply {load['wall']:8.2f} s (CPU "
                  f"{load_cpu:.1f} s, {rows / load['wall']:,.0f} records/s); load average "
                  f"{os.getloadavg()[0]:.2f}", flush=True)  # fmt: skip
    upsert_model, dedup_model = large_table.UpsertModel(rows), large_table.DedupModel(rows)
    py_work = work / f"pyiceberg_{rows}"
    pyiceberg = rows <= args.pyiceberg_max
    if pyiceberg:
        py_work.mkdir()
        py_load_s, py_table = pyiceberg_load(py_work, rows)
        print(f"pyiceberg append of the same rows {py_load_s:8.2f} s", flush=True)
        del py_table

    changes = batch_changes(rows, args.batch, seed=1, new_share=args.new_share)
    topic.produce(changes)
    upsert_model.apply(changes)
    dedup_model.apply(changes)
    kept = released(changes)
    del changes
    INDEXES.clear()  # batch 1 as a new process applies it: no key index, no key set held
    print(f"reader process: {reader_process(None)}", flush=True)
    first = measured_apply(root, spark, UPSERT_TABLE)
    first_dedup = measured_apply(root, spark, DEDUP_TABLE)
    batch_s = first["wall"]
    print(f"batch 1 (cold: the key index and key set built): upsert {batch_s:.2f} s, CPU "
          f"{breakdown(first)['CPU']:.2f} s; dedup {first_dedup['wall']:.2f} s, CPU "
          f"{breakdown(first_dedup)['CPU']:.2f} s", flush=True)  # fmt: skip
    print(f"  breakdown s: {breakdown_line(breakdown(first))}", flush=True)
    py_upsert_s = None
    if pyiceberg:
        py_upsert_s = pyiceberg_upsert_boxed(py_work, pickle.loads(kept), args.pyiceberg_timeout)
        if py_upsert_s is None:
            print(f"pyiceberg upsert+delete of batch 1 > {args.pyiceberg_timeout:.0f} s "
                  f"(time-boxed, stopped)   speed-up > {args.pyiceberg_timeout / batch_s:5.1f}x",
                  flush=True)  # fmt: skip
        else:
            print(f"pyiceberg upsert+delete of batch 1 {py_upsert_s:8.2f} s   speed-up "
                  f"{py_upsert_s / batch_s:5.1f}x", flush=True)  # fmt: skip
            theirs = large_table.pyiceberg_figures_of(
                pyiceberg_catalog(py_work).load_table("bench.events")
            )
            assert theirs == upsert_model.figures(), (theirs, upsert_model.figures())
            print(f"  pyiceberg's table equal to the model: {theirs[0]:,} rows", flush=True)
    else:
        print(f"pyiceberg's upsert not run at {short(rows)} rows (--pyiceberg-max "
              f"{args.pyiceberg_max:,}: it reads the whole table for the batch's keys)")  # fmt: skip

    cpu: dict[str, list[float]] = {UPSERT_TABLE: [], DEDUP_TABLE: []}
    batch_times, parts = [], []
    commits_before = catalog_commits(root)
    print(f"reader process: {reader_process(root)}", flush=True)
    # Warm batches as `tableflow run`'s cycles: one catalog kept open across them.
    with open_catalog(load_project(root)) as handle:
        for seed in range(2, args.batches + 1):
            changes = batch_changes(rows, args.batch, seed=seed, new_share=args.new_share)
            topic.produce(changes)
            upsert_model.apply(changes)
            dedup_model.apply(changes)
            del changes  # not held while tableflow applies the batch (`released`)
            measured = measured_apply(root, spark, UPSERT_TABLE, handle)
            batch_times.append(measured["wall"])
            parts.append(breakdown(measured))
            cpu[UPSERT_TABLE].append(parts[-1]["CPU"])
            dedup = measured_apply(root, spark, DEDUP_TABLE, handle)
            cpu[DEDUP_TABLE].append(breakdown(dedup)["CPU"])
    mean_s = mean_cpu = mean_dedup = None
    if batch_times:
        mean_s = sum(batch_times) / len(batch_times)
        mean_cpu = sum(cpu[UPSERT_TABLE]) / len(batch_times)
        mean_dedup = sum(cpu[DEDUP_TABLE]) / len(batch_times)
        per_batch = (catalog_commits(root) - commits_before) / len(batch_times)
        print(f"batches 2..{args.batches} (warm): upsert mean {mean_s:.2f} s, CPU {mean_cpu:.2f} "
              f"s, {per_batch:.1f} catalog commits per batch; dedup CPU {mean_dedup:.2f} s; "
              f"load average {os.getloadavg()[0]:.2f}; this process's peak RSS "
              f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:,.0f} MB, its reader "
              f"process's {reader_process_mb()}",
              flush=True)  # fmt: skip
        print(f"  upsert breakdown s (mean): {breakdown_line(mean_parts(parts))}", flush=True)
    models = {UPSERT_TABLE: upsert_model.figures(), DEDUP_TABLE: dedup_model.figures()}
    check_readers(root, spark, f"after {args.batches} batches", models, args.reader_timeout)
    started = time.perf_counter()
    compact(root, spark, args.compaction)
    compact_s = time.perf_counter() - started
    print(f"compaction of {UPSERT_TABLE} ({args.compaction}): {compact_s:.1f} s; load average "
          f"{os.getloadavg()[0]:.2f}", flush=True)  # fmt: skip
    check_readers(root, spark, "after compaction", {UPSERT_TABLE: models[UPSERT_TABLE]},
                  args.reader_timeout)  # fmt: skip
    return {"batch_s": batch_s, "py_upsert_s": py_upsert_s, "mean_s": mean_s,
            "mean_cpu": mean_cpu, "mean_dedup": mean_dedup}  # fmt: skip


def released(changes: list[Change]) -> bytes:
    """A batch's changes kept as one bytes object while tableflow applies it: held as
    they are, ~94k of their (id, record) tuples stay tracked by the collector, and each
    of its full passes inside the apply traversed them (~0.1 s a pass at 1M rows, measured
    with gc.callbacks): objects of this script's that a `tableflow run` process has not."""
    return pickle.dumps(changes, protocol=pickle.HIGHEST_PROTOCOL)


def short(rows: int) -> str:
    return f"{rows // 1_000_000}M" if rows % 1_000_000 == 0 else f"{rows // 1000}k"


def main() -> None:
    parser = argparse.ArgumentParser()
    add_workload_arguments(parser, batches=10, batches_help="batches before the scans")
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument(
        "--pyiceberg-timeout", type=float, default=600, help="seconds pyiceberg's upsert may take"
    )
    parser.add_argument(
        "--direct-above",
        type=int,
        default=20_000_000,
        help="sizes above it are built directly (benchmarks/large_table.py)",
    )
    parser.add_argument(
        "--new-share",
        type=float,
        default=0.1,
        help="share of a batch's records whose ids are new to the tables",
    )
    parser.add_argument(
        "--pyiceberg-max",
        type=int,
        default=10_000_000,
        help="the largest size pyiceberg's upsert is run on",
    )
    parser.add_argument(
        "--reader-timeout",
        type=float,
        default=900,
        help="seconds pyiceberg's read of a table may take",
    )
    parser.add_argument(
        "--first-load-records",
        type=int,
        default=500_000,
        help="ids of the first-load comparison (0: not run)",
    )
    parser.add_argument(
        "--compaction",
        choices=("spark", "driver"),
        default="driver",
        help="how the upsert table is compacted before the last reads: the driver's "
        "apply_deletes (what `tableflow run` runs) or Spark's rewrite_data_files",
    )
    parser.add_argument("--against", help="A/B mode: a git revision to compare with")
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    parser.add_argument(
        "--short-lived",
        action="store_true",
        help="the JVM options of a one-shot `tableflow apply` (C1-only JIT) instead of those "
        "of `tableflow run` (a long-lived application, as these batches share)",
    )
    args = parser.parse_args()
    if args.worker:
        return worker(args.worker, args.cores, args.short_lived)
    sizes = [int(r) for r in args.rows.split(",")]
    work = Path(tempfile.mkdtemp(prefix="tf-upsert-"))
    with servers(work) as (bootstrap, url):
        if args.against:
            args.rows = sizes[0]
            broker.create_topics(bootstrap, {"bench_upsert": PARTITIONS})
            topic = Topic(bootstrap, url, "bench_upsert")
            topic.produce_initial(args.rows)
            return ab_mode(args, work, topic, bootstrap, url)
        print(f"load average before: {os.getloadavg()[0]:.2f} ({os.cpu_count()} cores)", flush=True)
        first_load = None
        if args.first_load_records:
            # imported here: upsert_first_load imports this module
            from upsert_first_load import first_load_vs_append

            first_load = first_load_vs_append(
                bootstrap, url, work, args.first_load_records, args.cores, rounds=1
            )
        figures = {rows: measure_size(args, rows, work, bootstrap, url) for rows in sizes}
        print(f"\nload average after: {os.getloadavg()[0]:.2f}")
    summary_lines(args, sizes, figures, first_load)


def summary_lines(
    args: argparse.Namespace,
    sizes: list[int],
    figures: dict[int, dict[str, float | None]],
    first_load: float | None,
) -> None:
    """The comparisons, the issue's three last."""
    small, large = figures[min(sizes)], figures[max(sizes)]
    label = f"{short(max(sizes))}/{short(min(sizes))}"
    if len(sizes) > 1 and small["mean_s"] and large["mean_s"]:
        print(f"{label} batch wall: {large['mean_s'] / small['mean_s']:.2f}x "
              "(shared machine: CPU is the measure)")  # fmt: skip
    py_s, ours_s = large["py_upsert_s"], large["batch_s"]
    assert ours_s is not None
    if max(sizes) > args.pyiceberg_max:
        print(f"vs pyiceberg at {short(max(sizes))}: not run (--pyiceberg-max)")
    elif py_s is None:
        print(f"vs pyiceberg at {short(max(sizes))}: >{args.pyiceberg_timeout / ours_s:.1f}x "
              f"(lower bound: pyiceberg stopped after {args.pyiceberg_timeout:.0f} s)")  # fmt: skip
    else:
        print(f"vs pyiceberg at {short(max(sizes))}: {py_s / ours_s:.1f}x")
    for rows in sizes:  # the same, against a warm batch (as in `tableflow run`)
        py_s, warm_s = figures[rows]["py_upsert_s"], figures[rows]["mean_s"]
        if py_s is not None and warm_s:
            print(f"vs pyiceberg at {short(rows)}, a warm batch: {py_s / warm_s:.1f}x "
                  f"({py_s:.2f} vs {warm_s:.2f} s)")  # fmt: skip
    if len(sizes) > 1 and small["mean_cpu"] and large["mean_cpu"]:
        print(f"{label} batch cost: {large['mean_cpu'] / small['mean_cpu']:.2f}x")
    if first_load is not None:
        print(f"first load vs append: {first_load:.2f}x")
    if len(sizes) > 1 and small["mean_dedup"] and large["mean_dedup"]:
        print(f"dedup {label} batch cost: {large['mean_dedup'] / small['mean_dedup']:.2f}x")


if __name__ == "__main__":
    main()
