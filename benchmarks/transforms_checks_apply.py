"""Cost of transforms and checks as a user sees it: `tableflow apply` of one table, three ways.

    .venv/bin/python benchmarks/transforms_checks_apply.py [--records 1000000] [--cores 2]
    .venv/bin/python benchmarks/transforms_checks_apply.py --against main [--against REV]
        [--rounds 3] [--scenarios "plain,5 checks"]

Produces N of the ingest benchmark's Avro events (benchmarks/ingest.py) and, in the same
run, applies three one-table projects reading that topic into new tables (each its own
CLI process, as `tableflow apply --auto-approve` runs): no transforms or checks; 3 masks
(hash `user`, partial `city`, redact `kind`) + dedup on `id` (last by offset); 5 checks
(not_null, unique, accepted_values, range, expression; great-expectations on Spark).
Prints the command's wall time and the table's run time (run_results.json) of each, and
the table run time added over the plain table against issue 10's targets (masks + dedup
<= +25%, 5 checks <= +30%).

A/B mode (`--against REV`, repeatable): the same applies by this tree and by
tableflow_core as of each git revision REV (a `git archive` copy run with PYTHONPATH
pointing at it), `--rounds` times, interleaved (the order of the trees alternates each
round), so a loaded machine slows every tree alike. Prints each apply's table run time,
the check report's own duration, and the CPU seconds of the CLI's process tree (the JVM
and Spark's Python workers included), then medians per tree and scenario.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from ingest import (  # benchmarks/ is on sys.path
    cli_apply,
    cli_measured,
    produce,
    run_results,
    stack,
    write_project,
)
from many_tables import REPO, checkout

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
SCENARIOS: dict[str, dict[str, Any]] = {
    "plain": {},
    "3 masks + dedup": MASKS_AND_DEDUP,
    "5 checks": FIVE_CHECKS,
}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument(
        "--against", action="append", metavar="REV", help="A/B mode: a git revision (repeatable)"
    )
    parser.add_argument("--rounds", type=int, default=3, help="A/B rounds")
    parser.add_argument(
        "--scenarios", default="plain,5 checks", help="A/B mode: comma-separated scenarios"
    )
    args = parser.parse_args()
    os.environ[SALT_ENV] = "bench-salt"
    work = Path(tempfile.mkdtemp(prefix="tf-bench-tc-"))
    with stack(work) as (bootstrap, url):
        topic = "bench_orders"
        broker.create_topics(bootstrap, {topic: args.partitions})
        produce(bootstrap, url, topic, args.records, args.partitions)
        if args.against:
            ab_mode(args, work, bootstrap, url, topic)
            return
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


def ab_mode(args: argparse.Namespace, work: Path, bootstrap: str, url: str, topic: str) -> None:
    scenarios = [name.strip() for name in args.scenarios.split(",")]
    unknown = [name for name in scenarios if name not in SCENARIOS]
    if unknown:
        raise SystemExit(f"unknown scenarios {unknown}; known: {list(SCENARIOS)}")
    trees = {"this tree": REPO}
    for index, rev in enumerate(args.against):
        trees[rev] = checkout(rev, work / f"against_{index}")
    for label, tree in trees.items():  # the CLI must import each tree's own tableflow_core
        where = subprocess.run(
            [sys.executable, "-c", "import tableflow_core; print(tableflow_core.__file__)"],
            cwd=tree, env={**os.environ, "PYTHONPATH": str(tree)},
            capture_output=True, text=True, check=True,
        ).stdout.strip()  # fmt: skip
        assert where.startswith(str(tree)), (label, where)
    figures: dict[tuple[str, str], list[tuple[float, float, float, float]]] = {}
    load_before = os.getloadavg()
    for round_ in range(args.rounds):
        labels = list(trees) if round_ % 2 == 0 else list(reversed(trees))
        for label in labels:
            for scenario in scenarios:
                rows = figures.setdefault((label, scenario), [])
                root = write_project(
                    work / f"ab_{round_}_{label}_{scenario}".replace(" ", "_").replace("/", "_"),
                    bootstrap, url, topic, args.cores, **SCENARIOS[scenario],
                )  # fmt: skip
                cpu: dict[int, float] = {}
                wall, _ = cli_measured(
                    root, "apply", "--auto-approve", cpu=cpu, cwd=trees[label],
                    env={**os.environ, "PYTHONPATH": str(trees[label])},
                )  # fmt: skip
                table = run_results(root)["tables"][0]
                assert table["records_written"] == args.records, table
                checks_s = float((table.get("checks") or {}).get("duration_s") or 0.0)
                rows.append((float(table["duration_s"]), checks_s, sum(cpu.values()), wall))
                print(f"round {round_ + 1} {label:<12} {scenario:<16} table run "
                      f"{rows[-1][0]:6.2f} s  checks {checks_s:5.2f} s  CPU {rows[-1][2]:6.1f} s  "
                      f"apply {wall:6.2f} s  load {os.getloadavg()[0]:.1f}", flush=True)  # fmt: skip
    load_after = os.getloadavg()
    print(f"\n{args.records:,} records, local[{args.cores}], {args.rounds} round(s); load average "
          f"{load_before[0]:.2f} -> {load_after[0]:.2f}; medians:")  # fmt: skip
    print(f"{'tree':<12} {'scenario':<16} {'table run s':>11} {'checks s':>9} {'CPU s':>7} "
          f"{'apply s':>8} {'added':>7}")  # fmt: skip
    for label in trees:
        plain = figures.get((label, "plain"))
        for scenario in scenarios:
            rows = figures[(label, scenario)]
            run_s = statistics.median(r[0] for r in rows)
            added = (
                f"{run_s / statistics.median(r[0] for r in plain) - 1:+.0%}"
                if plain and scenario != "plain"
                else ""
            )
            print(f"{label:<12} {scenario:<16} {run_s:>11.2f} "
                  f"{statistics.median(r[1] for r in rows):>9.2f} "
                  f"{statistics.median(r[2] for r in rows):>7.1f} "
                  f"{statistics.median(r[3] for r in rows):>8.2f} {added:>7}")  # fmt: skip


if __name__ == "__main__":
    main()
