"""Cost of transforms and checks as a user sees it: `tableflow apply` of one table, three ways.

    .venv/bin/python benchmarks/transforms_checks_apply.py [--records 1000000] [--cores 2]

Produces N of the ingest benchmark's Avro events (benchmarks/ingest.py) and, in the same
run, applies three one-table projects reading that topic into new tables (each its own
CLI process, as `tableflow apply --auto-approve` runs): no transforms or checks; 3 masks
(hash `user`, partial `city`, redact `kind`) + dedup on `id` (last by offset); 5 checks
(not_null, unique, accepted_values, range, expression; one Spark aggregate).
Each scenario is applied `--rounds` times (3 by default), interleaved round by round so
that a slow spell of the machine hits every scenario, and the best of each is printed:
the command's wall time, the table's run time (run_results.json), the CPU seconds
(user+sys of the CLI's process tree), the Spark jobs and stages (counted in a Spark event
log) and the table run time added over the plain table of the same run, against issue
10's targets (masks + dedup <= +25%, 5 checks <= +30%), with the range of each round
against the plain table of the same round. The best of the rounds also drops the
machine's cold start (the first apply of a run was up to 2 s slower), which a single run
would charge to the plain table (it runs first).

    [--scenarios plain,masks,dedup,"3 masks + dedup"] [--rounds 3] [--against main]

`--scenarios` picks scenarios (also `masks`: the 3 masks alone, `dedup`: the dedup
alone, `4 checks`: the five but `unique`, `unique`: that one alone, `dedup on user`: a
dedup whose every key is in one partition, `dedup on day`: one whose keys are in every
partition, so a new table's read-task dedup is redone with the shuffle); `--against REV`
also applies each scenario with tableflow_core as of git revision REV (a `git archive`
copy), interleaved with this tree's runs; `--variant` runs this tree with extra Spark
conf.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path
from typing import Any

import yaml
from ingest import (
    cli_measured,
    produce,
    run_results,
    stack,
    write_project,
)
from many_tables import checkout  # benchmarks/ is on sys.path

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
CHECKED = {"5 checks", "4 checks", "unique"}
SCENARIOS: dict[str, dict[str, Any]] = {
    "plain": {},
    "masks": {"transforms": MASKS_AND_DEDUP["transforms"][:3]},
    "dedup": {"transforms": MASKS_AND_DEDUP["transforms"][3:]},
    "3 masks + dedup": MASKS_AND_DEDUP,
    "5 checks": FIVE_CHECKS,
    # What the unique check's shuffle, sort and window cost within the five.
    "4 checks": {"checks": [c for c in FIVE_CHECKS["checks"] if c["type"] != "unique"]},
    "unique": {"checks": [c for c in FIVE_CHECKS["checks"] if c["type"] == "unique"]},
    # Each user's records in one partition (user i % 5000, partition i % 4), as with a
    # topic keyed by user: the read tasks' dedup is exact.
    "dedup on user": {"transforms": [{"type": "dedup", "keys": ["user"], "keep": "last"}]},
    # Each day's records in every partition (day i % 365): a new table's first run has
    # its read-task dedup redone with the shuffle (the worst case).
    "dedup on day": {"transforms": [{"type": "dedup", "keys": ["day"], "keep": "last"}]},
}
ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--scenarios", help="comma-separated, from: " + ", ".join(SCENARIOS))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--against", metavar="REV", help="also run tableflow_core of REV")
    parser.add_argument(
        "--variant", action="append", default=[], metavar='LABEL={"spark.x": "v"}',
        help="also run this tree with extra Spark conf (JSON) in the project",
    )  # fmt: skip
    args = parser.parse_args()
    os.environ[SALT_ENV] = "bench-salt"
    compare(args)


def _event_log_counts(events: Path) -> tuple[int, int, float]:
    """(Spark jobs, stages run, the tasks' JVM GC seconds) in the event logs under `events`."""
    jobs = stages = 0
    gc_ms = 0
    for log in events.iterdir():
        for line in log.read_text().splitlines():
            entry = json.loads(line)
            event = entry.get("Event")
            jobs += event == "SparkListenerJobStart"
            stages += event == "SparkListenerStageCompleted"
            if event == "SparkListenerTaskEnd":
                gc_ms += (entry.get("Task Metrics") or {}).get("JVM GC Time", 0)
    return jobs, stages, gc_ms / 1000


def _apply_once(
    work: Path, name: str, tree: str, tree_root: Path, bootstrap: str, url: str, topic: str,
    cores: int, run: int, conf: dict[str, str],
) -> dict[str, float]:  # fmt: skip
    root = write_project(work / f"{name.replace(' ', '_')}-{tree}-{run}", bootstrap, url, topic,
                         cores, **SCENARIOS[name])  # fmt: skip
    events = root / "events"
    events.mkdir()
    project_file = root / "tableflow_project.yml"
    project = yaml.safe_load(project_file.read_text())
    project["targets"]["bench"]["spark"]["conf"] = {
        "spark.eventLog.enabled": "true", "spark.eventLog.dir": events.as_uri(), **conf,
    }  # fmt: skip
    project_file.write_text(yaml.safe_dump(project, sort_keys=False))
    env = {**os.environ, "PYTHONPATH": str(tree_root)}
    cpu: dict[int, float] = {}
    seconds, _ = cli_measured(root, "apply", "--auto-approve", env=env, cpu=cpu, cwd=tree_root)
    table = run_results(root)["tables"][0]
    jobs, stages, gc = _event_log_counts(events)
    return {
        "apply": seconds, "table": float(table["duration_s"]), "cpu": sum(cpu.values()),
        "jobs": jobs, "stages": stages, "task_gc": gc, "written": float(table["records_written"]),
        "check": float((table.get("checks") or {}).get("duration_s", 0.0)),
    }  # fmt: skip


def compare(args: argparse.Namespace) -> None:
    """Each scenario with this tree (and `--against`'s), interleaved, best of `--rounds`."""
    names = args.scenarios.split(",") if args.scenarios else ["plain", *TARGETS]
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown:
        raise SystemExit(f"unknown scenarios {unknown}; known: {', '.join(SCENARIOS)}")
    work = Path(tempfile.mkdtemp(prefix="tf-bench-tc-"))
    trees: dict[str, tuple[Path, dict[str, str]]] = {"this": (ROOT, {})}
    if args.against:
        trees[args.against] = (checkout(args.against, work / "against"), {})
    for variant in args.variant:
        label, conf = variant.split("=", 1)
        trees[label] = (ROOT, json.loads(conf))
    with stack(work) as (bootstrap, url):
        topic = "bench_orders"
        broker.create_topics(bootstrap, {topic: args.partitions})
        produce(bootstrap, url, topic, args.records, args.partitions)
        load_before = os.getloadavg()
        runs: dict[tuple[str, str], list[dict[str, float]]] = {}
        for run in range(args.rounds):
            order = list(trees.items()) if run % 2 == 0 else list(reversed(trees.items()))
            for name in names:
                for tree, (tree_root, conf) in order:
                    figures = _apply_once(work, name, tree, tree_root, bootstrap, url, topic,
                                          args.cores, run, conf)  # fmt: skip
                    assert figures["written"] == args.records or name != "plain", figures
                    runs.setdefault((name, tree), []).append(figures)
                    print(f"  round {run + 1} {name} [{tree}]: " + ", ".join(
                        f"{k} {v:.2f}" for k, v in figures.items()), flush=True)  # fmt: skip
        load_after = os.getloadavg()
    print(f"{args.records:,} records, local[{args.cores}], best of {args.rounds}; load average "
          f"before {load_before[0]:.2f}, after {load_after[0]:.2f}")  # fmt: skip
    for tree in trees:
        plain = min(r["table"] for r in runs.get(("plain", tree), [{"table": float("nan")}]))
        for name in names:
            best = runs[(name, tree)]
            table_s = min(r["table"] for r in best)
            line = (f"{name:<16} [{tree:<8}] apply {min(r['apply'] for r in best):6.2f} s  "
                    f"table run {table_s:6.2f} s  CPU {min(r['cpu'] for r in best):6.1f} s  "
                    f"task GC {min(r['task_gc'] for r in best):5.1f} s  "
                    f"jobs {best[0]['jobs']:.0f} stages {best[0]['stages']:.0f}")  # fmt: skip
            if name in CHECKED:
                line += f"  check stage {min(r['check'] for r in best):5.2f} s"
            if name != "plain":
                line += f"  added {table_s - plain:+.2f} s ({table_s / plain - 1:+.0%})"
                # Each round against the plain table of the same round: the spread.
                plain_runs = runs.get(("plain", tree))
                if plain_runs:
                    paired = [r["table"] / p["table"] - 1
                              for r, p in zip(best, plain_runs, strict=True)]  # fmt: skip
                    line += f" [rounds {min(paired):+.0%}..{max(paired):+.0%}]"
            if name in TARGETS and ("plain", tree) in runs:
                met = table_s / plain - 1 <= TARGETS[name]
                line += f" target <= +{TARGETS[name]:.0%}: {'met' if met else 'NOT met'}"
            print(line)


if __name__ == "__main__":
    main()
