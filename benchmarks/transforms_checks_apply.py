"""Cost of transforms and checks as a user sees it: `tableflow apply` of one table, three ways.

    .venv/bin/python benchmarks/transforms_checks_apply.py [--records 1000000] [--cores 2]

Produces N of the ingest benchmark's Avro events (benchmarks/ingest.py) and, in the same
run, applies three one-table projects reading that topic into new tables (each its own
CLI process, as `tableflow apply --auto-approve` runs): no transforms or checks; 3 masks
(hash `user`, partial `city`, redact `kind`) + dedup on `id` (last by offset); 5 checks
(not_null, unique, accepted_values, range, expression; great-expectations on Spark).
Prints the command's wall time and the table's run time (run_results.json) of each, and
the table run time added over the plain table against issue 10's targets (masks + dedup
<= +25%, 5 checks <= +30%).
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path
from typing import Any

from ingest import cli_apply, produce, stack, write_project  # benchmarks/ is on sys.path

from tableflow_core.dev import broker

SALT_ENV = "TABLEFLOW_BENCH_SALT"

MASKS_AND_DEDUP: dict[str, Any] = {
    "transforms": [
        {"type": "mask", "columns": ["user"], "method": "hash",
         "salt": "{{ env_var('" + SALT_ENV + "') }}"},
        {"type": "mask", "columns": ["city"], "method": "partial", "keep_first": 2,
         "keep_last": 0},
        {"type": "mask", "columns": ["kind"], "method": "redact", "replacement": "*"},
        {"type": "dedup", "keys": ["id"], "keep": "last"},
    ]
}  # fmt: skip
FIVE_CHECKS: dict[str, Any] = {
    "checks": [
        {"type": "not_null", "columns": ["id"]},
        {"type": "unique", "columns": ["id"]},
        {"type": "accepted_values", "column": "kind", "values": ["A", "B", "C"]},
        {"type": "range", "column": "qty", "min": 0, "max": 99},
        {"type": "expression", "name": "amount_not_negative", "expression": "amount >= 0"},
    ]
}
TARGETS = {"3 masks + dedup": 0.25, "5 checks": 0.30}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--cores", type=int, default=2)
    args = parser.parse_args()
    os.environ[SALT_ENV] = "bench-salt"
    work = Path(tempfile.mkdtemp(prefix="tf-bench-tc-"))
    with stack(work) as (bootstrap, url):
        topic = "bench_orders"
        broker.create_topics(bootstrap, {topic: args.partitions})
        produce(bootstrap, url, topic, args.records, args.partitions)
        load_before = os.getloadavg()
        results: dict[str, tuple[float, float]] = {}
        for name, keys in (("plain", {}), ("3 masks + dedup", MASKS_AND_DEDUP),
                           ("5 checks", FIVE_CHECKS)):  # fmt: skip
            root = write_project(work / name.replace(" ", "_"), bootstrap, url, topic,
                                 args.cores, **keys)  # fmt: skip
            seconds, table, _ = cli_apply(root)
            assert table["records_written"] == args.records, table
            results[name] = (seconds, float(table["duration_s"]))
        load_after = os.getloadavg()
    print(f"{args.records:,} records, local[{args.cores}]; load average before "
          f"{load_before[0]:.2f}, after {load_after[0]:.2f}")  # fmt: skip
    plain = results["plain"][1]
    for name, (seconds, table_s) in results.items():
        line = f"{name:<18} apply {seconds:7.2f} s   table run {table_s:7.2f} s"
        if name in TARGETS:
            added = table_s / plain - 1
            verdict = "met" if added <= TARGETS[name] else "NOT met"
            line += f"   added {added:+.0%} (target <= +{TARGETS[name]:.0%}: {verdict})"
        print(line)


if __name__ == "__main__":
    main()
