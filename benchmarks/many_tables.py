"""Many tables: `tableflow apply` / `tableflow run` on a project of N tables vs one process.

    .venv/bin/python benchmarks/many_tables.py --tables 20 --records 5000
    .venv/bin/python benchmarks/many_tables.py --tables 50 --run-seconds 300 --interval 60
    .venv/bin/python benchmarks/many_tables.py --tables 20 --records 5000 --against REV --rounds 2

Starts its own Apache Kafka broker and dev registry (127.0.0.1, free ports); one topic per
table (`--partitions` each), Confluent-framed Avro (the 10-field event of ingest.py).

Apply mode (default): `--records` records in each of N topics, plus one topic holding
N x `--records`. Measured in the same run, every tableflow figure a CLI process on a
project written to a tmp dir (embedded catalog, Spark local[cores]):
- baseline: one Python process, per topic: watermarks, consume, fastavro decode, Parquet
  write (ingest.py's `baseline`), for the N topics one after the other, then for the one
  big topic;
- `tableflow plan` on the N-table project (nothing exists yet), `tableflow apply
  --auto-approve` (creates and fills the N tables), the same apply again (nothing to do:
  the no-op apply), then apply on a 1-table project of `--records` and on a 1-table
  project of the big topic (N x `--records`).
- per-table overhead = (apply of N tables - apply of 1 table holding the same records) /
  (N - 1): what each extra table costs beyond its records. The slope against a 1-table
  project of `--records` (which also counts the extra records) and the baseline's own
  per-topic overhead are printed beside it.
Targets (issue 13): 20 tables x 5k records applied in <= 20 s, per-table overhead <= 0.5 s.

A/B mode (`--against REV`): the apply of N tables by this tree and by tableflow_core as
of git revision REV (a `git archive` copy, run with PYTHONPATH pointing at it), on the
same topics, each on a fresh project, interleaved for `--rounds` rounds (the order
alternates). Per apply: wall seconds, CPU seconds of the CLI's process tree (user+sys,
sampled from /proc every 0.2 s) and catalog commits per table (the metadata files in
each table's metadata log, CREATE TABLE included). For a loaded machine, where wall
clock is noisy: CPU and commits are the evidence.

Run mode (`--run-seconds S`): `tableflow run` on the N-table project with
`refresh_interval` = `--interval` (60 s), while a producer trickles `--trickle` records/s
into every topic for S seconds (each record's produce time is its Kafka CreateTime, as in
run_latency.py). After the producer stops, the benchmark waits until everything is
committed. Per table, from its snapshot history: commits, the largest gap between two
consecutive commits (when `main` moved), and the largest produce-to-committed latency.
The target is the interval itself (issue 13: keep 50 tables fresh within their 1-minute
intervals). `tableflow run` is fixed-rate: a table is due one interval after its previous
refresh started, so the run keeps up while every cycle (plan + apply of the due tables)
takes less than the interval; a table's commit gap is then the interval plus the
difference between where its commit fell in two consecutive cycles (at most one cycle
time). Both are printed: cycles that fit in the interval, and tables whose gaps stayed
within the interval plus that jitter. As a baseline, one
process then reads, decodes and writes to Parquet every record the run ingested (all N
topics), measured in the same run.
"""

from __future__ import annotations

import argparse
import datetime as dt
import io
import math
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from ingest import (
    baseline,
    cli,
    cli_measured,
    produce,
    run_results,
    stack,
    write_tables_project,
)
from run_latency import (
    Produced,
    RateProducer,
    RunProcess,
    commit_history,
    latencies,
    sql_table_loader,
    wait_committed,
)

from tableflow_core.dev import broker

REPO = Path(__file__).resolve().parent.parent
APPLY_TARGET_S = 20.0  # 20 tables x 5k records
OVERHEAD_TARGET_S = 0.5  # per table


def topic_name(i: int) -> str:
    return f"many_{i:03d}"


def tables_yaml(topics: list[str], interval: str | None = None) -> list[dict[str, Any]]:
    tables: list[dict[str, Any]] = []
    for topic in topics:
        table: dict[str, Any] = {"name": topic, "topic": topic}
        if interval is not None:
            table["refresh_interval"] = interval
        tables.append(table)
    return tables


def baseline_all(bootstrap: str, url: str, topics: list[str], out: Path) -> tuple[float, int]:
    """ingest.py's one-process baseline over each topic in turn: (seconds, rows)."""
    seconds, rows = 0.0, 0
    for topic in topics:
        (out / topic).mkdir(parents=True, exist_ok=True)
        took, written = baseline(bootstrap, url, topic, out / topic)
        seconds += took
        rows += written
    shutil.rmtree(out, ignore_errors=True)
    return seconds, rows


def applied(root: Path) -> tuple[int, int]:
    """(tables that succeeded or had nothing to do, records written) of the last apply."""
    tables = run_results(root)["tables"]
    ok = sum(1 for t in tables if t["status"] in ("success", "no_changes"))
    return ok, sum(int(t["records_written"]) for t in tables)


def apply_mode(args: argparse.Namespace, work: Path, bootstrap: str, url: str) -> None:
    n, records = args.tables, args.records
    topics = [topic_name(i) for i in range(n)]
    big = "many_big"
    broker.create_topics(bootstrap, {**{t: args.partitions for t in topics}, big: args.partitions})
    started = time.perf_counter()
    for topic in topics:
        produce(bootstrap, url, topic, records, args.partitions)
    produce(bootstrap, url, big, n * records, args.partitions)
    print(f"produced {n} x {records:,} records and {n * records:,} in one topic "
          f"in {time.perf_counter() - started:.1f}s")  # fmt: skip
    load_before = os.getloadavg()

    base_n, rows = baseline_all(bootstrap, url, topics, work / "baseline")
    assert rows == n * records, rows
    base_big, rows = baseline_all(bootstrap, url, [big], work / "baseline")
    assert rows == n * records, rows

    def project(name: str, project_topics: list[str]) -> Path:
        return write_tables_project(
            work / name, bootstrap, url, args.cores, tables_yaml(project_topics)
        )

    many = project("many", topics)
    parallel = ("--max-parallel", str(args.max_parallel)) if args.max_parallel else ()
    plan_s = cli(many, "plan")
    apply_s = cli(many, "apply", "--auto-approve", *parallel)
    ok, written = applied(many)
    assert (ok, written) == (n, n * records), (ok, written)
    noop_s = cli(many, "apply", "--auto-approve", *parallel)
    one = project("one", topics[:1])
    one_s = cli(one, "apply", "--auto-approve")
    assert applied(one) == (1, records), applied(one)
    one_big = project("one_big", [big])
    big_s = cli(one_big, "apply", "--auto-approve")
    assert applied(one_big) == (1, n * records), applied(one_big)
    load_after = os.getloadavg()

    total = n * records
    scale = "" if (n, records) == (20, 5000) else " (the target is for 20 x 5,000)"
    print(f"load average before measuring: {load_before[0]:.2f}, after: {load_after[0]:.2f} "
          f"({os.cpu_count()} cores)")  # fmt: skip

    def line(name: str, seconds: float, count: int | None, target: str = "") -> None:
        rate = f"{count / seconds:>10,.0f} records/s" if count else " " * 20
        print(f"{name:<55} {seconds:7.2f} s  {rate}  {target}")

    def verdict(value: float, limit: float) -> str:
        return f"target <= {limit:g} s: {'met' if value <= limit else 'NOT met'}{scale}"

    line(f"baseline: 1 process, {n} topics one after the other", base_n, total)
    line(f"baseline: 1 process, 1 topic of {total:,}", base_big, total)
    line(f"tableflow plan ({n} tables, CLI)", plan_s, None)
    line(f"tableflow apply ({n} tables x {records:,}, CLI)", apply_s, total,
         verdict(apply_s, APPLY_TARGET_S))  # fmt: skip
    line(f"tableflow apply, nothing to do ({n} tables, CLI)", noop_s, None)
    line(f"tableflow apply (1 table x {records:,}, CLI)", one_s, records)
    line(f"tableflow apply (1 table x {total:,}, CLI)", big_s, total)
    if n > 1:
        overhead = (apply_s - big_s) / (n - 1)
        slope = (apply_s - one_s) / (n - 1)
        base_overhead = (base_n - base_big) / (n - 1)
        print(f"per-table overhead, tableflow: {overhead:.2f} s "
              f"((apply {n} tables - apply 1 table of the same {total:,} records) / {n - 1}); "
              f"{verdict(overhead, OVERHEAD_TARGET_S)}")  # fmt: skip
        print(f"per-table slope, tableflow: {slope:.2f} s ((apply {n} tables - apply 1 table "
              f"of {records:,}) / {n - 1}, extra records included)")  # fmt: skip
        print(f"per-topic overhead, baseline: {base_overhead:.3f} s")
        print(f"apply ratio baseline/tableflow: {base_n / apply_s:.2f}")


def checkout(rev: str, into: Path) -> Path:
    """tableflow_core as of git revision `rev`, extracted under `into`."""
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", rev, "tableflow_core"], capture_output=True, check=True
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    return into


def catalog_commits(root: Path, topics: list[str]) -> int:
    """Catalog commits of the project's tables: metadata files, CREATE TABLE included."""
    return sum(
        len(sql_table_loader(root / "warehouse", t)().metadata.metadata_log) + 1 for t in topics
    )


def ab_mode(args: argparse.Namespace, work: Path, bootstrap: str, url: str) -> None:
    n, records = args.tables, args.records
    topics = [topic_name(i) for i in range(n)]
    broker.create_topics(bootstrap, {t: args.partitions for t in topics})
    for topic in topics:
        produce(bootstrap, url, topic, records, args.partitions)
    trees = {"this tree": REPO, args.against: checkout(args.against, work / "against")}
    for label, tree in trees.items():  # the CLI must import each tree's own tableflow_core
        where = subprocess.run(
            [sys.executable, "-c", "import tableflow_core; print(tableflow_core.__file__)"],
            cwd=tree, env={**os.environ, "PYTHONPATH": str(tree)},
            capture_output=True, text=True, check=True,
        ).stdout.strip()  # fmt: skip
        assert where.startswith(str(tree)), (label, where)
    figures: dict[str, list[tuple[float, float, int]]] = {label: [] for label in trees}
    load_before = os.getloadavg()
    for round_ in range(args.rounds):
        labels = list(trees) if round_ % 2 == 0 else list(reversed(trees))
        for label in labels:
            root = write_tables_project(
                work / f"ab_{len(figures[label])}_{label.replace(' ', '_')}",
                bootstrap, url, args.cores, tables_yaml(topics),
            )  # fmt: skip
            env = {**os.environ, "PYTHONPATH": str(trees[label])}
            cpu: dict[int, float] = {}
            wall, _ = cli_measured(
                root, "apply", "--auto-approve", env=env, cpu=cpu, cwd=trees[label]
            )
            assert applied(root) == (n, n * records), (label, applied(root))
            figures[label].append((wall, sum(cpu.values()), catalog_commits(root, topics)))
            print(f"round {round_ + 1} {label:<14} apply {wall:6.2f} s wall, "
                  f"{sum(cpu.values()):6.1f} s CPU, {figures[label][-1][2] / n:.1f} commits/table",
                  flush=True)  # fmt: skip
    load_after = os.getloadavg()
    print(f"\n{n} tables x {records:,} records, {args.rounds} round(s), load average "
          f"{load_before[0]:.2f} -> {load_after[0]:.2f} ({os.cpu_count()} cores)")  # fmt: skip
    print(f"{'tree':<14} {'wall s (median)':>15} {'CPU s (median)':>15} {'commits/table':>13}")
    for label, rows in figures.items():
        print(f"{label:<14} {np.median([r[0] for r in rows]):>15.2f} "
              f"{np.median([r[1] for r in rows]):>15.1f} {rows[-1][2] / n:>13.1f}")  # fmt: skip


def run_mode(args: argparse.Namespace, work: Path, bootstrap: str, url: str) -> None:
    n, interval = args.tables, args.interval
    topics = [topic_name(i) for i in range(n)]
    broker.create_topics(bootstrap, {t: args.partitions for t in topics})
    root = write_tables_project(
        work / "run", bootstrap, url, args.cores, tables_yaml(topics, f"{interval}s")
    )
    producer = RateProducer(bootstrap, url, topics, args.partitions)  # registers the schemas
    load_before = os.getloadavg()
    run = RunProcess(root, work / "run.log")
    try:
        run.wait_cycles(1, timeout=1800)  # creates the N tables
        loaders = {t: sql_table_loader(root / "warehouse", t) for t in topics}
        # Warm-up: one record per table, committed, so the measured cycles are warm ones.
        late = wait_all(loaders, producer.run(n, 1.0), 3 * interval + 900)
        if late:
            raise SystemExit(run.failure(f"the warm-up records of {late} were not committed"))
        started = time.monotonic()
        produced = producer.run(args.trickle * n, args.run_seconds)
        print(f"produced {produced.count:,} records into {n} topics in {produced.seconds:.1f}s "
              f"({produced.count / produced.seconds:,.0f}/s)")  # fmt: skip
        late = wait_all(loaders, produced, 3 * interval + 600)
        if late:
            print(f"not every record was committed in time: {late}")
        measured_s = time.monotonic() - started
    finally:
        run.stop()
    load_after = os.getloadavg()
    base_s, rows = baseline_all(bootstrap, url, topics, work / "baseline")
    report_run(args, produced, loaders, run, measured_s)
    cycle_times = run.cycle_seconds(interval, since=started)
    print(f"load average before: {load_before[0]:.2f}, after: {load_after[0]:.2f} "
          f"({os.cpu_count()} cores)")  # fmt: skip
    print(f"baseline: 1 process reads, decodes and writes all {rows:,} records of the "
          f"{n} topics in {base_s:.2f} s")  # fmt: skip
    if cycle_times:
        print(f"tableflow run: {len(run.cycles())} cycles; the {len(cycle_times)} that applied "
              f"something while measured took (plan + apply) median "
              f"{np.median(cycle_times):.1f} s, max {max(cycle_times):.1f} s, "
              f"against the {interval} s interval: "
              f"{sum(1 for c in cycle_times if c < interval)} of {len(cycle_times)} fit")  # fmt: skip


def wait_all(
    loaders: dict[str, Callable[[], Any]], produced: Produced, timeout: float
) -> list[str]:
    """Wait until every table committed what was produced; the tables that did not."""
    deadline = time.monotonic() + timeout
    return [
        topic
        for topic, load in loaders.items()
        if not wait_committed(
            load, topic, produced.next_offsets(topic), max(0.0, deadline - time.monotonic())
        )
    ]


def report_run(
    args: argparse.Namespace,
    produced: Produced,
    loaders: dict[str, Callable[[], Any]],
    run: RunProcess,
    measured_s: float,
) -> None:
    interval = args.interval
    rows: list[tuple[str, int, float, float, int]] = []
    for topic, load in loaders.items():
        commits = commit_history(load(), topic)
        lat = latencies(produced, topic, commits)
        gaps = np.diff([c.at_ms for c in commits]) / 1000.0
        rows.append((
            topic, lat.commits, float(gaps.max()) if len(gaps) else math.nan,
            float(lat.seconds.max()) if len(lat.seconds) else math.nan, lat.uncommitted,
        ))  # fmt: skip
    print(f"\n{args.tables} tables, refresh_interval {interval}s, trickle {args.trickle} "
          f"records/s per table for {args.run_seconds:g} s ({measured_s:.0f} s until all "
          f"committed, after a warm-up); issue 13 target: every table fresh within its {interval} s interval")  # fmt: skip
    print(f"{'table':<12} {'commits':>7} {'max gap s':>9} {'max latency s':>13}")
    worst = sorted(rows, key=lambda r: math.inf if math.isnan(r[2]) else r[2], reverse=True)
    for topic, count, gap, latency, uncommitted in worst[: args.show]:
        missing = f"  ! {uncommitted} records not committed" if uncommitted else ""
        print(f"{topic:<12} {count:>7} {gap:>9.1f} {latency:>13.1f}{missing}")
    jitter = max(run.cycle_seconds(interval, since=0.0), default=0.0)
    within = sum(1 for r in rows if r[2] <= interval + jitter)
    max_gap = max((r[2] for r in rows if not math.isnan(r[2])), default=math.nan)
    max_latency = max((r[3] for r in rows if not math.isnan(r[3])), default=math.nan)
    print(f"tables whose commits were never more than {interval} s + the longest cycle "
          f"({jitter:.1f} s) apart: {within} of "
          f"{len(rows)}; largest gap {max_gap:.1f} s, largest latency {max_latency:.1f} s "
          f"(a record produced just after a cycle read its topic waits up to interval + "
          f"2 cycle times)")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tables", type=int, default=20)
    parser.add_argument(
        "--max-parallel", type=int, default=0, help="apply's --max-parallel (default: its own)"
    )
    parser.add_argument("--records", type=int, default=5000, help="per table (apply mode)")
    parser.add_argument("--partitions", type=int, default=1, help="per topic")
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--run-seconds", type=float, default=0.0, help="run mode: produce for S s")
    parser.add_argument("--interval", type=int, default=60, help="run mode: refresh_interval, s")
    parser.add_argument("--trickle", type=float, default=2.0, help="run mode: records/s per table")
    parser.add_argument("--show", type=int, default=10, help="run mode: tables listed")
    parser.add_argument("--against", help="A/B mode: a git revision to compare with")
    parser.add_argument("--rounds", type=int, default=2, help="A/B mode: interleaved rounds")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="tf-bench-many-"))
    print(f"work dir {work}; started {dt.datetime.now(dt.UTC):%H:%M:%S} UTC")
    with stack(work) as (bootstrap, url):
        if args.against:
            ab_mode(args, work, bootstrap, url)
        elif args.run_seconds > 0:
            run_mode(args, work, bootstrap, url)
        else:
            apply_mode(args, work, bootstrap, url)


if __name__ == "__main__":
    main()
