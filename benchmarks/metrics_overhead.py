"""What `--metrics-port` costs `tableflow run`: the same runs with and without it.

    .venv/bin/python benchmarks/metrics_overhead.py --records 200000 --rounds 4

Starts its own Apache Kafka broker and dev registry (127.0.0.1, free ports; benchmarks/
ingest.py's `stack`) and a one-table project (embedded catalog, Spark local[cores]). Each
round produces `--records` Avro records (the 10-field event of ingest.py) and runs
`tableflow run --once` on them, as its own process, alternately without and with
`--metrics-port 0` (a round's order is swapped every other round, so neither side always
runs first). Per run: the wall seconds of the command, and the apply's own duration from
target/run_results.json (the same JVM start is in both; the apply's figure leaves it out).
With `--metrics-port` the run also serves /metrics and reads the table's lag and freshness
after its cycle, in its own thread; `--once` waits for nothing of it. The figures printed
are the medians per side and their ratio (metrics / baseline); the load average is
printed before and after.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
from pathlib import Path

from ingest import cli_measured, produce, run_results, stack, write_project

from tableflow_core.dev import broker

PARTITIONS = 4


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000, help="records per run")
    parser.add_argument("--rounds", type=int, default=4, help="runs per side")
    parser.add_argument("--cores", type=int, default=os.cpu_count() or 2)
    args = parser.parse_args()
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
            figures: dict[str, list[tuple[float, float]]] = {"baseline": [], "metrics": []}
            for round_ in range(args.rounds):
                order = ["baseline", "metrics"] if round_ % 2 == 0 else ["metrics", "baseline"]
                for side in order:
                    produce(bootstrap, url, topic, args.records, PARTITIONS, pool=10_000)
                    extra = ("--metrics-port", "0") if side == "metrics" else ()
                    wall, _peak = cli_measured(root, "run", "--once", *extra)
                    result = run_results(root)
                    written = result["tables"][0]["records_written"]
                    assert written == args.records, (side, written)
                    figures[side].append((wall, float(result["duration_s"])))
                    print(f"round {round_ + 1} {side:>8}: wall {wall:6.2f} s, "
                          f"apply {result['duration_s']:6.2f} s")  # fmt: skip
    print(f"load average after: {os.getloadavg()}")
    base = figures["baseline"]
    with_metrics = figures["metrics"]
    for index, name in ((0, "wall"), (1, "apply")):
        b = statistics.median(x[index] for x in base)
        m = statistics.median(x[index] for x in with_metrics)
        spread = max(x[index] for x in base) - min(x[index] for x in base)
        print(f"{name:>5}: baseline median {b:.2f} s (spread {spread:.2f} s), "
              f"with --metrics-port {m:.2f} s, ratio {m / b:.3f}")  # fmt: skip


if __name__ == "__main__":
    main()
