"""What readers of an upsert table pay for its delete files between the maintenance
`tableflow run` runs after each refresh (maintenance/delete_load.py), against the table
compacted, measured in the same run; and what that maintenance costs per batch.

    .venv/bin/python benchmarks/upsert_deletes_scan.py [--rows 1000000] [--batch 100000] [--batches 8]
    .venv/bin/python benchmarks/upsert_deletes_scan.py --rows 10000000 --batches 4 --deletes-rewrite-budget unbounded

Starts its own Kafka-protocol broker and dev registry; produces `--rows` Avro records keyed
by an Avro key {id} (benchmarks/upsert.py's topic); an upsert table (no `maintenance:`
block: only what its delete files make due) reads it through `tableflow apply`'s code
(PlanTask + ApplyTask, one Spark application). Then `--batches` times: a batch of
`--batch` records (updates of existing keys, keys repeated, 10% tombstones;
benchmarks/upsert.py's `batch_changes`) is applied, and the maintenance `tableflow run`
runs after a refresh runs (MaintainTask: its wall seconds and the rows its compaction
rewrote). (A `--without` table, never maintained, was dropped: a second project's embedded
catalog in the same Spark session finds the first one's under the same name.)
`--deletes-rewrite-budget` gives the maintained table a `maintenance:` block with that
`deletes_rewrite_budget` (docs/maintenance.md, "A table's budget").

At the end the table is compacted in full (every data file rewritten, deletes applied) and
Spark stops; then the snapshot after each batch and after each maintenance is scanned in
full by time travel, in turn with the compacted snapshot (so both under the same load):
pyiceberg (`scan(snapshot_id=...).to_arrow()`) and DuckDB (`iceberg_scan(...,
snapshot_from_id => ...)`, fetched as Arrow), the best of `--repeats` each. Ratios are to
the compacted scan. The last lines: the worst ratio after a batch, the worst after the
maintenance that follows it (`readers after maintenance / compacted: ...`), and the
maintenance's cost per batch.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ingest import stack, write_project
from upsert import PARTITIONS, Topic, batch_changes, compact, measured_apply

from tableflow_core.dev import broker

Scans = tuple[float, float, float, float]  # pyiceberg wall, CPU; DuckDB wall, CPU


def budget_value(text: str) -> float | str:
    """`--deletes-rewrite-budget`'s value as the YAML would hold it."""
    return text if text == "unbounded" else float(text)


def snapshot_scans(table: Any, snapshot_id: int, con: Any) -> tuple[Scans, int]:
    """One full scan of every column at a snapshot by each reader: (seconds, rows)."""
    wall, cpu = time.perf_counter(), time.process_time()
    rows = table.scan(snapshot_id=snapshot_id).to_arrow().num_rows
    py = (time.perf_counter() - wall, time.process_time() - cpu)
    wall, cpu = time.perf_counter(), time.process_time()
    sql = f"SELECT * FROM iceberg_scan('{table.metadata_location}', snapshot_from_id => {snapshot_id})"
    duck_rows = con.execute(sql).to_arrow_table().num_rows
    duck = (time.perf_counter() - wall, time.process_time() - cpu)
    assert duck_rows == rows, (snapshot_id, duck_rows, rows)
    return (*py, *duck), rows


def ratios(
    table: Any, snapshot_id: int, compacted: tuple[Any, int], repeats: int, con: Any
) -> Scans:
    """The snapshot's scans over the compacted (table, snapshot)'s, each the best of
    `repeats`, scanned in turn."""
    best = [float("inf")] * 4
    reference = [float("inf")] * 4
    for _ in range(repeats):
        got, _ = snapshot_scans(table, snapshot_id, con)
        ref, _ = snapshot_scans(*compacted, con)
        best = [min(a, b) for a, b in zip(best, got, strict=True)]
        reference = [min(a, b) for a, b in zip(reference, ref, strict=True)]
    r = [b / c for b, c in zip(best, reference, strict=True)]
    return r[0], r[1], r[2], r[3]


def current_snapshot(root: Path) -> tuple[int, int]:
    """(main's snapshot id, its delete files)."""
    from tableflow_core.config.loader import load_project
    from tableflow_core.targets.catalog import open_catalog

    with open_catalog(load_project(root)) as handle:
        table = handle.catalog.load_table("bench.events")
        summary = table.current_snapshot().summary
        return table.current_snapshot().snapshot_id, int(summary.get("total-delete-files") or 0)


def rewritten_rows(root: Path, since: int) -> int:
    """Rows the compactions after snapshot `since` rewrote (their deleted-records)."""
    from tableflow_core.config.loader import load_project
    from tableflow_core.targets.catalog import open_catalog

    with open_catalog(load_project(root)) as handle:
        table = handle.catalog.load_table("bench.events")
        rows, snapshot = 0, table.current_snapshot()
        while snapshot is not None and snapshot.snapshot_id != since:
            summary = snapshot.summary
            if summary.operation.value == "replace":
                rows += int(summary.get("deleted-records") or 0)
            snapshot = table.snapshot_by_id(snapshot.parent_snapshot_id)
        return rows


def maintain(root: Path, spark: Any) -> str:
    """What `tableflow run` does after a refresh: the maintenance due on the table."""
    from tableflow_core.config.loader import load_project
    from tableflow_core.tasks.maintain import MaintainTask

    project = load_project(root)
    (done,) = MaintainTask(project, project.tables, spark=spark).run()
    assert done.ok, done
    if done.report is None:
        return done.note or "nothing due"
    return ", ".join(d.operation for d in done.due)


@dataclass
class Batch:
    """One batch of a table: its snapshots after the batch and after the maintenance."""

    after_batch: int
    after_maintenance: int
    apply_s: float
    maintenance_s: float
    rewritten: int
    ran: str


def run_batches(
    roots: dict[str, Path], topic: Topic, spark: Any, args: Any
) -> dict[str, list[Batch]]:
    batches: dict[str, list[Batch]] = {label: [] for label in roots}
    for seed in range(1, args.batches + 1):
        topic.produce(batch_changes(args.rows, args.batch, seed=seed))
        for label, root in roots.items():
            applied = measured_apply(root, spark)["wall"]
            after_batch, deletes = current_snapshot(root)
            started = time.perf_counter()
            ran = maintain(root, spark)
            took = time.perf_counter() - started
            after, left = current_snapshot(root)
            rewritten = rewritten_rows(root, after_batch)
            batches[label].append(Batch(after_batch, after, applied, took, rewritten, ran))
            print(f"batch {seed} {label:<7} apply {applied:5.1f} s, {deletes} delete files; "
                  f"maintenance {took:5.1f} s ({ran}; {rewritten:,} rows rewritten), "
                  f"{left} delete files; load {os.getloadavg()[0]:.1f}", flush=True)  # fmt: skip
    return batches


def main() -> None:
    from tableflow_core.config.loader import load_project
    from tableflow_core.engine.spark_session import build_spark_session
    from tableflow_core.readers.duckdb_reader import duckdb_connection
    from tableflow_core.targets.catalog import open_catalog

    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--batch", type=int, default=100_000)
    parser.add_argument("--batches", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument(
        "--deletes-rewrite-budget",
        help="the maintained table's `maintenance: deletes_rewrite_budget` (a number or "
        "`unbounded`; default: no block, the budget of 1)",
    )
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="tf-deletes-scan-"))
    with stack(work) as (bootstrap, url):
        name = "bench_deletes_scan"
        broker.create_topics(bootstrap, {name: PARTITIONS})
        topic = Topic(bootstrap, url, name)
        topic.produce_initial(args.rows)
        keys = {"mode": "upsert", "key_columns": ["id"], "key": {"format": "avro"}}
        labels = ("with",)
        budget = args.deletes_rewrite_budget
        block = {"maintenance": {"deletes_rewrite_budget": budget_value(budget)}} if budget else {}
        roots = {
            label: write_project(
                work / label, bootstrap, url, name, args.cores, **keys,
                **block,
            )
            for label in labels
        }  # fmt: skip
        spark = build_spark_session(f"local[{args.cores}]", "tableflow-bench")
        try:
            print(f"{args.rows:,} rows, batches of {args.batch:,} records (10% tombstones); "
                  f"load average {os.getloadavg()[0]:.2f} ({os.cpu_count()} cores)", flush=True)  # fmt: skip
            for root in roots.values():
                measured_apply(root, spark)
            batches = run_batches(roots, topic, spark, args)
            started = time.perf_counter()
            compact(roots["with"], spark)
            compact_s = time.perf_counter() - started
            compacted, left = current_snapshot(roots["with"])
            assert left == 0, left
        finally:
            spark.stop()
        print(f"compacted in full: {compact_s:.1f} s; scans (best of {args.repeats}, each in "
              f"turn with the compacted snapshot's); load average {os.getloadavg()[0]:.2f}", flush=True)  # fmt: skip
        con = duckdb_connection()
        worst: dict[str, list[float]] = {}
        with ExitStack() as handles:
            tables = {
                label: handles.enter_context(open_catalog(load_project(root))).catalog.load_table(
                    "bench.events"
                )
                for label, root in roots.items()
            }
            reference = (tables["with"], compacted)
            for label, table in tables.items():
                print(f"{label}: batch, scan / compacted after the batch: pyiceberg, DuckDB; "
                      f"after its maintenance: pyiceberg, DuckDB (CPU ratios in brackets)")  # fmt: skip
                for i, b in enumerate(batches[label], start=1):
                    before = ratios(table, b.after_batch, reference, args.repeats, con)
                    after = ratios(table, b.after_maintenance, reference, args.repeats, con)
                    for key, value in (("batch", before), ("maintenance", after)):
                        for reader, at in (("py", 0), ("py cpu", 1), ("duck", 2), ("duck cpu", 3)):
                            worst.setdefault(f"{label} {key} {reader}", []).append(value[at])
                    print(f"{i:>5} {before[0]:>6.2f}x ({before[1]:.2f}) {before[2]:>6.2f}x ({before[3]:.2f}) "
                          f"{after[0]:>9.2f}x ({after[1]:.2f}) {after[2]:>6.2f}x ({after[3]:.2f})", flush=True)  # fmt: skip
        done = batches["with"]
        maintenance_s = sum(b.maintenance_s for b in done) / len(done)
        apply_s = sum(b.apply_s for b in done) / len(done)
        rewritten = sum(b.rewritten for b in done) / len(done)
        rate = sum(b.rewritten for b in done) / max(
            1e-9, sum(b.maintenance_s for b in done if b.rewritten)
        )
        print(f"readers after a batch / compacted: worst pyiceberg {max(worst['with batch py']):.2f}x (CPU {max(worst['with batch py cpu']):.2f}x), "
              f"DuckDB {max(worst['with batch duck']):.2f}x (CPU {max(worst['with batch duck cpu']):.2f}x)")  # fmt: skip
        print(f"maintenance per batch: {maintenance_s:.1f} s, {rewritten:,.0f} rows rewritten "
              f"({rate:,.0f} rows per second of the maintenance that compacted); the batch's apply {apply_s:.1f} s")  # fmt: skip
        print(f"readers after maintenance / compacted: pyiceberg {max(worst['with maintenance py']):.2f}x (CPU {max(worst['with maintenance py cpu']):.2f}x), "
              f"DuckDB {max(worst['with maintenance duck']):.2f}x (CPU {max(worst['with maintenance duck cpu']):.2f}x)")  # fmt: skip
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    sys.exit(main())
