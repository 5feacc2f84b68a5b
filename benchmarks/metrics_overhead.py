"""What `--metrics-port` costs `tableflow run`: the same runs with and without it.

    .venv/bin/python benchmarks/metrics_overhead.py --records 200000 --rounds 4

Starts its own Apache Kafka broker and dev registry (127.0.0.1, free ports; benchmarks/
ingest.py's `stack`) and a one-table project (embedded catalog, Spark local[cores]). Each
round produces `--records` Avro records (the 10-field event of ingest.py) and runs
`tableflow run --once` on them, as its own process, alternately without and with
`--metrics-port 0` (a round's order is swapped every other round, so neither side always
runs first). Per run: the wall seconds of the command, the apply's own duration from
target/run_results.json (the same JVM start is in both; the apply's figure leaves it out),
and the CPU seconds of the command's process tree (sampled every 0.2 s by pid: the figure
a loaded machine disturbs least).
With `--metrics-port` the run also serves /metrics and reads the table's lag and freshness
after its cycle, in its own thread; `--once` waits for nothing of it. The figures printed
are the medians per side and their ratio (metrics / baseline); the load average is
printed before and after.

    .venv/bin/python benchmarks/metrics_overhead.py --micro --tables 1000

`--micro` measures, in this process and without a stack, what the metrics themselves
cost in CPU: counting one cycle's report of `--tables` tables (`RunMetrics.observe_cycle`,
in the scheduler's thread) and rendering one scrape of them (`/metrics`), each the median
of 20 repetitions, CPU seconds of this thread (not wall: the machine's load does not
enter them).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from ingest import cli_measured, produce, run_results, stack, write_project

from tableflow_core.dev import broker

PARTITIONS = 4


def micro(tables: int) -> None:
    """CPU of counting a cycle and rendering a scrape, for `tables` tables."""
    from types import SimpleNamespace
    from typing import Any

    from prometheus_client import generate_latest

    from tableflow_core.observability.metrics import RunMetrics
    from tableflow_core.runner.results import RunResults, TableResult
    from tableflow_core.tasks.run import CycleReport

    declared: Any = tuple(
        SimpleNamespace(name=f"t{i}", topic=f"topic.{i}", refresh_interval_s=60.0)
        for i in range(tables)
    )
    totals = {"read": 1000, "written": 990, "filtered": 5, "skipped": 1,
              "dead_lettered": 2, "tombstones": 2}  # fmt: skip
    results = RunResults(
        project="p", target="t", started_at="s", finished_at="f", duration_s=1.0,
        status="success", plan_summary="",
        tables=tuple(
            TableResult(
                table=t.name, identifier=f"bench.{t.name}", status="success",
                records_read=1000, records_written=990, snapshot_id=i + 1,
                offsets_before={0: 0}, offsets_after={0: 1000}, duration_s=1.0,
                accounting={"totals": totals}, timings={"publish_commit": 0.05},
            )
            for i, t in enumerate(declared)
        ),
    )  # fmt: skip
    report = CycleReport(tuple(t.name for t in declared), results=results)
    metrics = RunMetrics(declared)

    def cpu(action: Any) -> float:
        samples = []
        for _ in range(20):
            started = time.thread_time()
            action()
            samples.append(time.thread_time() - started)
        return statistics.median(samples)

    cycle_s = cpu(lambda: metrics.observe_cycle(report, 1.0, time.time()))
    scrape = generate_latest(metrics.registry)
    scrape_s = cpu(lambda: generate_latest(metrics.registry))
    print(f"load average: {os.getloadavg()}")
    print(f"{tables} tables: counting a cycle {cycle_s * 1000:.1f} ms CPU "
          f"({cycle_s / tables * 1e6:.0f} us a table); a scrape {scrape_s * 1000:.1f} ms CPU, "
          f"{len(scrape) / 1024:.0f} KiB")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000, help="records per run")
    parser.add_argument("--rounds", type=int, default=4, help="runs per side")
    parser.add_argument("--cores", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--micro", action="store_true", help="the metrics' own CPU only")
    parser.add_argument("--tables", type=int, default=1000, help="tables (--micro)")
    args = parser.parse_args()
    if args.micro:
        micro(args.tables)
        return
    print(f"load average before: {os.getloadavg()}")
    with tempfile.TemporaryDirectory(prefix="metrics-overhead-") as tmp:
        work = Path(tmp)
        with stack(work) as (bootstrap, url):
            topic = "events"
            broker.create_topics(bootstrap, {topic: PARTITIONS})
            root = write_project(work / "project", bootstrap, url, topic, args.cores)
            # Warm-up (not timed): the table exists, the JVM's class archive is written.
            produce(bootstrap, url, topic, 1000, PARTITIONS)
            cli_measured(root, "run", "--once")
            figures: dict[str, list[tuple[float, float, float]]] = {"baseline": [], "metrics": []}
            for round_ in range(args.rounds):
                order = ["baseline", "metrics"] if round_ % 2 == 0 else ["metrics", "baseline"]
                for side in order:
                    produce(bootstrap, url, topic, args.records, PARTITIONS, pool=10_000)
                    extra = ("--metrics-port", "0") if side == "metrics" else ()
                    cpu: dict[int, float] = {}
                    wall, _peak = cli_measured(root, "run", "--once", *extra, cpu=cpu)
                    result = run_results(root)
                    written = result["tables"][0]["records_written"]
                    assert written == args.records, (side, written)
                    tree_cpu = sum(cpu.values())
                    figures[side].append((wall, float(result["duration_s"]), tree_cpu))
                    print(f"round {round_ + 1} {side:>8}: wall {wall:6.2f} s, "
                          f"apply {result['duration_s']:6.2f} s, CPU {tree_cpu:6.2f} s")  # fmt: skip
    print(f"load average after: {os.getloadavg()}")
    base = figures["baseline"]
    with_metrics = figures["metrics"]
    # CPU: the command's process tree (CLI, JVM, Python workers), user + system seconds:
    # what the metrics add to the work, whatever else the machine runs meanwhile.
    for index, name in ((0, "wall"), (1, "apply"), (2, "CPU")):
        b = statistics.median(x[index] for x in base)
        m = statistics.median(x[index] for x in with_metrics)
        spread = max(x[index] for x in base) - min(x[index] for x in base)
        print(f"{name:>5}: baseline median {b:.2f} s (spread {spread:.2f} s), "
              f"with --metrics-port {m:.2f} s, ratio {m / b:.3f}")  # fmt: skip


if __name__ == "__main__":
    main()
