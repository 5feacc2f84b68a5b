"""First load of an upsert topic vs an append table's apply of the same records, same run.

    .venv/bin/python benchmarks/upsert_first_load.py [--records 1000000] [--cores 2]

Starts its own Apache Kafka and dev registry; produces `--records` Avro records keyed by
an Avro key {id} to a 4-partition topic (`benchmarks/upsert.py`'s `Topic`: one record per
id, plus `--repeats` of them again later, some in another partition, so keys move
between partitions and the load must keep each key's latest record), then runs
`tableflow apply --auto-approve` (the CLI, a new process each) on two new projects
reading that topic: an append table and an upsert table (`key_columns: [id]`), the order
alternating over `--rounds` rounds (each round a new pair of tables). Per apply: the
command's wall seconds and the table's run seconds (`run_results.json`'s `duration_s`:
the ingest without the interpreter's and Spark's start-up), records/s of both.

Last line: `first load vs append: X.XXx` (the upsert table's records/s over the append
table's, by the tables' run seconds, the mean of the rounds). With `--spark-way`, each
round also loads a third table with the driver's first load turned off (Spark's window,
then an append), for the line `first load on Spark (window + append) vs append`. The
upsert tables are checked
against an independent model of each key's latest record (count and sum of amounts).

`first_load_vs_append(bootstrap, url, work, records, cores)` is the same measurement on
a broker and registry that the caller started (benchmarks/upsert.py calls it).
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from ingest import cli_measured, record, run_results, stack, write_project
from upsert import PARTITIONS, Change, Topic

from tableflow_core.dev import broker


def repeats(records: int, count: int, seed: int = 7) -> list[tuple[int, int, dict[str, Any]]]:
    """`count` later records of existing ids: (id, partition, value), a third of them in
    another partition than the id's first record (a key that moved)."""
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        key = rng.randrange(records)
        partition = key % PARTITIONS
        if rng.random() < 1 / 3:
            partition = (partition + 1) % PARTITIONS
        out.append((key, partition, {**record(key), "amount": key * 0.5 + 1.0}))
    return out


def produce_topic(
    bootstrap: str, url: str, name: str, records: int, repeated: int
) -> dict[int, float]:
    """The topic's records; the model: each id's latest amount."""
    broker.create_topics(bootstrap, {name: PARTITIONS})
    topic = Topic(bootstrap, url, name)
    topic.produce_initial(records)
    time.sleep(0.01)  # the repeats' timestamps after every first record's
    later = repeats(records, repeated)
    by_partition: dict[int, list[Change]] = {p: [] for p in range(PARTITIONS)}
    for key, partition, value in later:
        by_partition[partition].append((key, value))
    for partition, changes in by_partition.items():
        topic.produce_partition(partition, changes)
    # Produced after the first records (later timestamps): each repeat is its key's latest.
    amounts = {i: i * 0.25 for i in range(records)}
    for key, _, value in later:
        amounts[key] = float(value["amount"])
    return amounts


# `--spark-way`: the CLI with the driver's first load off, so the load takes Spark's way
# (the window, then an append), measured beside the driver's.
SPARK_WAY = (
    "import sys; from tableflow_core.ingest import sharing; "
    "sharing.FIRST_LOAD_DRIVER_MAX_RECORDS = 0; "
    "from tableflow_core.cli.main import main; sys.argv[0] = 'tableflow'; main()"
)


def apply_once(root: Path, spark_way: bool = False) -> tuple[float, float, int, str]:
    """`tableflow apply --auto-approve`: (command wall s, the table's run s, records read,
    the run's main timings and the process tree's peak memory as words)."""
    peak = 0
    if spark_way:
        started = time.perf_counter()
        subprocess.run(
            [sys.executable, "-c", SPARK_WAY, "--project-dir", str(root), "apply", "--auto-approve"],
            check=True, capture_output=True,
        )  # fmt: skip
        wall = time.perf_counter() - started
    else:
        wall, peak = cli_measured(root, "apply", "--auto-approve")
    table = run_results(root)["tables"][0]
    if spark_way:
        assert "shared_job" not in (table.get("timings") or {}), table
    timings = table.get("timings") or {}
    parts = ", ".join(f"{name} {timings[name]:.2f}" for name in TIMINGS if name in timings)
    if peak:
        parts += f"; peak RSS {peak / 2**30:.2f} GiB"
    return wall, float(table["duration_s"]), int(table["records_read"]), parts


# The run's timings printed per apply (run_results.json): where the seconds went.
TIMINGS = ("shared_job", "merge", "index_advance", "publish_commit")


def table_figures(root: Path) -> tuple[int, float]:
    import pyarrow.compute as pc

    from tableflow_core.config.loader import load_project
    from tableflow_core.targets.catalog import open_catalog

    with open_catalog(load_project(root)) as handle:
        arrow = (
            handle.catalog.load_table("bench.events").scan(selected_fields=("amount",)).to_arrow()
        )
        return arrow.num_rows, round(pc.sum(arrow["amount"]).as_py(), 2)


def first_load_vs_append(
    bootstrap: str,
    url: str,
    work: Path,
    records: int,
    cores: int = 2,
    rounds: int = 2,
    repeated: int | None = None,
    spark_way: bool = False,
) -> float:
    """Upsert first load records/s over an append table's, same records, same run (the
    tables' run seconds; the mean over `rounds` pairs, the order alternating). Prints a
    line per apply and the ratio line."""
    repeated = records // 10 if repeated is None else repeated
    name = f"bench_first_load_{records}"
    amounts = produce_topic(bootstrap, url, name, records, repeated)
    total = records + repeated
    expected = (len(amounts), round(sum(amounts.values()), 2))
    print(f"\n== first load: {total:,} records ({repeated:,} repeats of {records:,} ids, a third "
          f"in another partition), {PARTITIONS} partitions, local[{cores}]; load average "
          f"{os.getloadavg()[0]:.2f} ({os.cpu_count()} cores)", flush=True)  # fmt: skip
    ratios: list[float] = []
    spark_ratios: list[float] = []
    for n in range(rounds):
        kinds = ["append", "upsert"] if n % 2 == 0 else ["upsert", "append"]
        if spark_way:
            kinds.insert(1, "upsert on Spark")
        per_kind: dict[str, float] = {}
        for kind in kinds:
            keys: dict[str, Any] = (
                {"mode": "upsert", "key_columns": ["id"], "key": {"format": "avro"}}
                if kind.startswith("upsert")
                else {}
            )
            folder = f"first_load_{records}_{n}_{kind.replace(' ', '_')}"
            root = write_project(work / folder, bootstrap, url, name, cores, **keys)
            wall, run_s, read, timings = apply_once(root, spark_way=kind == "upsert on Spark")
            assert read == total, (kind, read, total)
            per_kind[kind] = total / run_s
            print(f"round {n + 1} {kind:<15}: apply {wall:6.2f} s ({total / wall:9,.0f} records/s), "
                  f"table run {run_s:6.2f} s ({total / run_s:9,.0f} records/s); load average "
                  f"{os.getloadavg()[0]:.2f}; s: {timings}", flush=True)  # fmt: skip
            if kind.startswith("upsert"):
                got = table_figures(root)
                assert got == expected, f"upsert table {got} != model {expected}"
        ratios.append(per_kind["upsert"] / per_kind["append"])
        if spark_way:
            spark_ratios.append(per_kind["upsert on Spark"] / per_kind["append"])
    ratio = sum(ratios) / len(ratios)
    print(f"  upsert table = model: {expected[0]:,} rows, sum of amounts {expected[1]}")
    if spark_ratios:
        print(f"first load on Spark (window + append) vs append: "
              f"{sum(spark_ratios) / len(spark_ratios):.2f}x")  # fmt: skip
    print(f"first load vs append: {ratio:.2f}x")
    return ratio


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=1_000_000, help="ids in the topic")
    parser.add_argument("--repeats", type=int, help="later records of existing ids (10%%)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument(
        "--spark-way", action="store_true", help="also the first load on Spark (the window)"
    )
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="tf-first-load-"))
    with stack(work) as (bootstrap, url):
        first_load_vs_append(
            bootstrap,
            url,
            work,
            args.records,
            args.cores,
            args.rounds,
            args.repeats,
            args.spark_way,
        )
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    sys.exit(main())
