"""Memory of `tableflow apply` per process kind, with the Kafka client's buffers apart
(issue 13: peak <= 1.5 GB for 1M records, bounded <= 2 GB for a 10M backlog).

    .venv/bin/python benchmarks/memory.py --records 1000000 [--partitions 4] [--cores 2]
        [--variants default,...] [--rounds 1]

Starts its own Apache Kafka 4.4 and dev registry (127.0.0.1, free ports), produces N framed Avro
records (benchmarks/ingest.py's 10-field event; `--pool K` frames K distinct records and
cycles them, which makes 10M quick to produce), then runs `python -m tableflow_core apply
--auto-approve` as users run it, once per variant and round, interleaved (A B A B ...),
each on a new project and table so every run reads all N records. While a run lasts, the
process tree is sampled every `--interval` s from /proc (`smaps_rollup`, what psutil's
`memory_full_info` reads): PSS (shared pages split between sharers, so the sum is what
the tree really holds), USS (private pages) and RSS, per process kind:

- driver: the CLI's Python (plan, embedded REST catalog, the Spark driver's Python side);
- jvm: the Spark driver JVM (heap, metaspace, code cache, Arrow/Netty direct buffers);
- daemon: Spark's Python worker daemon (pipeline/worker_daemon.py), which workers fork from;
- worker: each Python worker (a task's Kafka reader, decoder and Arrow output);

and the tree's peak sum. CPU seconds (user + sys) of the whole tree come from
/proc/PID/stat, kept per process at its last sample.

The client's buffers: Apache Kafka honours `fetch.max.bytes` and
`max.partition.fetch.bytes`, so librdkafka holds at most what `kafka.admin.BOUNDED_FETCH`
lets it queue (noida-db, the broker before round 3, ignored them: one fetch returned the
rest of the partition's log, ~2 GB over a 10M backlog). A probe process reads the apply's
largest task range with the same consumer settings (`read_range`, nothing kept) and
reports its memory growth and librdkafka's own statistics (`statistics.interval.ms`:
bytes received, bytes queued for the application); with `--cores` tasks at once, the
apply's Python workers hold about `cores` x that. The engine's own memory is the tree's
peak minus it.

Variants (`--variants`, comma-separated): default (the shipped settings), and the names
in VARIANTS below, each a set of Kafka consumer or Spark conf overrides, or additions to
the table's config (`dedup`).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ingest import produce, stack, tableflow_command, write_tables_project

from tableflow_core.dev import broker
from tableflow_core.pipeline.runners.read_ranges import MIN_RECORDS_PER_TASK
from tableflow_core.schemas.formats import METADATA_COLUMNS

PAGE = os.sysconf("SC_PAGE_SIZE")
TICKS = os.sysconf("SC_CLK_TCK")
MB = 1e6
TARGET_1M_GB = 1.5
TARGET_BOUND_GB = 2.0


@dataclass(frozen=True)
class Variant:
    kafka: Mapping[str, str] = field(default_factory=dict)
    spark: Mapping[str, str] = field(default_factory=dict)
    pythonpath: str | None = None  # another checkout's tableflow_core (--baseline-src)
    env: Mapping[str, str] = field(default_factory=dict)  # the CLI's (and so Spark's) environment
    table: Mapping[str, Any] = field(default_factory=dict)  # added to the table's config


VARIANTS: dict[str, Variant] = {
    "default": Variant(),
    # librdkafka's pre-fetch queue bounded (a real broker honours the fetch limits).
    "small-fetch": Variant(
        kafka={
            "queued.max.messages.kbytes": "8192",
            "fetch.max.bytes": "8388608",
            "max.partition.fetch.bytes": "1048576",
        }
    ),
    "arrow-50k": Variant(spark={"spark.sql.execution.arrow.maxRecordsPerBatch": "50000"}),
    "xmx-1g": Variant(spark={"spark.driver.memory": "1g"}),
    # Spark's execution memory (sort pages, hash maps) outside the garbage-collected heap.
    "offheap-512m": Variant(
        spark={"spark.memory.offHeap.enabled": "true", "spark.memory.offHeap.size": "512m"}
    ),
    "one-task": Variant(spark={"spark.master": "local[1]"}),
    # glibc's per-thread malloc arenas (8 x cores by default) in the JVM and the workers.
    "arena-2": Variant(env={"MALLOC_ARENA_MAX": "2"}),
    # The dedup in the read tasks: each task holds its decoded records until it has read
    # them all (pipeline/transforms/read_task_dedup.py).
    "dedup": Variant(table={"transforms": [{"type": "dedup", "keys": ["id"], "keep": "last"}]}),
}


# -- sampling ----------------------------------------------------------------------------


def smaps_rollup(pid: int) -> dict[str, int]:
    """/proc/PID/smaps_rollup in bytes: Rss, Pss, Private_Clean, Private_Dirty, ..."""
    fields: dict[str, int] = {}
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()[1:]:
        name, _, rest = line.partition(":")
        parts = rest.split()
        if parts and parts[-1] == "kB":
            fields[name] = int(parts[0]) * 1024
    return fields


def cpu_seconds(pid: int) -> float:
    stat = Path(f"/proc/{pid}/stat").read_text()
    after_comm = stat[stat.rindex(")") + 2 :].split()
    return (int(after_comm[11]) + int(after_comm[12])) / TICKS  # utime, stime


def children(pid: int) -> list[int]:
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        found.extend(int(c) for c in (task / "children").read_text().split())
    return found


@dataclass
class Proc:
    pid: int
    kind: str
    peak_pss: int = 0
    peak_uss: int = 0
    peak_rss: int = 0
    cpu_s: float = 0.0


class TreeSampler:
    """Samples a process tree's memory by kind until stopped (a thread)."""

    def __init__(self, root: int, interval: float) -> None:
        self.root, self.interval = root, interval
        self.procs: dict[int, Proc] = {}
        self.peak_pss = self.peak_rss = 0
        self.peak_kind: dict[str, int] = {}  # peak over time of the kind's summed PSS
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _kind(self, pid: int, parent: Proc | None) -> str:
        if parent is None:
            return "driver"
        if parent.kind == "jvm":  # (a fork not yet exec'd still says java)
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            return "daemon" if b"worker_daemon" in cmdline else "jvm-child"
        if Path(f"/proc/{pid}/comm").read_text().strip() == "java":
            return "jvm"
        if parent.kind == "daemon":
            return "worker"
        return f"{parent.kind}-child"

    def sample(self) -> None:
        pss_total = rss_total = 0
        by_kind: dict[str, int] = {}
        pending: list[tuple[int, Proc | None]] = [(self.root, None)]
        while pending:
            pid, parent = pending.pop()
            try:
                # Classified at every sample: spark-submit's shell execs into the JVM.
                kind = self._kind(pid, parent)
                proc = self.procs.get(pid) or Proc(pid, kind)
                proc.kind = kind
                mem = smaps_rollup(pid)
                proc.cpu_s = max(proc.cpu_s, cpu_seconds(pid))
                kids = children(pid)
            except (OSError, ValueError, IndexError):
                continue
            self.procs[pid] = proc
            uss = mem.get("Private_Clean", 0) + mem.get("Private_Dirty", 0)
            proc.peak_pss = max(proc.peak_pss, mem.get("Pss", 0))
            proc.peak_uss = max(proc.peak_uss, uss)
            proc.peak_rss = max(proc.peak_rss, mem.get("Rss", 0))
            pss_total += mem.get("Pss", 0)
            rss_total += mem.get("Rss", 0)
            by_kind[proc.kind] = by_kind.get(proc.kind, 0) + mem.get("Pss", 0)
            pending.extend((kid, proc) for kid in kids)
        self.peak_pss = max(self.peak_pss, pss_total)
        self.peak_rss = max(self.peak_rss, rss_total)
        for kind, pss in by_kind.items():
            self.peak_kind[kind] = max(self.peak_kind.get(kind, 0), pss)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def cpu_by_kind(self) -> dict[str, float]:
        cpu: dict[str, float] = {}
        for proc in self.procs.values():
            cpu[proc.kind] = cpu.get(proc.kind, 0.0) + proc.cpu_s
        return cpu


def sampled_run(
    command: list[str], what: str, interval: float, **popen: Any
) -> tuple[float, TreeSampler]:
    """Run `command` to its end, its process tree sampled every `interval` s: (wall
    seconds, the sampler). A failure exits naming `what`, with the end of its output."""
    started = time.perf_counter()
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(command, stdout=out, stderr=err, **popen)
        sampler = TreeSampler(proc.pid, interval)
        proc.wait()
        seconds = time.perf_counter() - started
        sampler.stop()
        if proc.returncode != 0:
            out.seek(0)
            err.seek(0)
            raise SystemExit(f"{what} failed:\n{out.read()[-3000:]}\n{err.read()[-3000:]}")
    return seconds, sampler


@dataclass
class ApplyRun:
    variant: str
    seconds: float
    cpu_s: float
    cpu_kind: dict[str, float]
    peak_pss: int
    peak_rss: int
    peak_kind: dict[str, int]
    workers: list[Proc]
    records: int
    procs: list[Proc]


def apply_measured(root: Path, variant: str, interval: float, settings: Variant) -> ApplyRun:
    """`tableflow apply --auto-approve` in a new process, its tree sampled."""
    env = {**os.environ, **settings.env}
    if settings.pythonpath:
        env["PYTHONPATH"] = settings.pythonpath
    command = tableflow_command(root, "apply", "--auto-approve")
    seconds, sampler = sampled_run(command, f"apply ({variant})", interval, env=env)
    results = json.loads((root / "target" / "run_results.json").read_text())
    cpu = sampler.cpu_by_kind()
    return ApplyRun(
        variant, seconds, sum(cpu.values()), cpu, sampler.peak_pss, sampler.peak_rss,
        dict(sampler.peak_kind), [p for p in sampler.procs.values() if p.kind == "worker"],
        int(results["tables"][0]["records_written"]), list(sampler.procs.values()),
    )  # fmt: skip


# -- the client's buffers ----------------------------------------------------------------


def probe_main(conf_json: str, topic: str, partition: int, start: int, end: int) -> None:
    """In its own process: read [start, end) as a task does, keep nothing, print JSON of
    the memory growth and librdkafka's statistics."""
    import pyarrow  # noqa: F401  (what a worker has imported before reading)

    from tableflow_core.kafka.offsets import OffsetRange
    from tableflow_core.kafka.range_reader import read_range

    stats: dict[str, int] = {"rx_bytes": 0, "fetchq_bytes": 0, "fetchq_msgs": 0}

    def on_stats(raw: str) -> None:
        data = json.loads(raw)
        stats["rx_bytes"] = max(
            stats["rx_bytes"], sum(b.get("rxbytes", 0) for b in data["brokers"].values())
        )
        for t in data.get("topics", {}).values():
            for p in t.get("partitions", {}).values():
                if p.get("partition", -1) >= 0:
                    stats["fetchq_bytes"] = max(stats["fetchq_bytes"], p.get("fetchq_size", 0))
                    stats["fetchq_msgs"] = max(stats["fetchq_msgs"], p.get("fetchq_cnt", 0))

    conf: dict[str, Any] = {
        **json.loads(conf_json),
        "statistics.interval.ms": 100,
        "stats_cb": on_stats,
    }
    before = smaps_rollup(os.getpid())["Pss"]
    peak = [before]
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], smaps_rollup(os.getpid())["Pss"])
            done.wait(0.02)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    started = time.perf_counter()
    count = 0
    for chunk in read_range(conf, OffsetRange(topic, partition, start, end), chunk_size=10_000):
        count += len(chunk.offsets)
        peak[0] = max(peak[0], smaps_rollup(os.getpid())["Pss"])
    seconds = time.perf_counter() - started
    done.set()
    watcher.join()
    print(json.dumps({"records": count, "growth": peak[0] - before, "seconds": seconds, **stats}))


def probe(
    conf: Mapping[str, str], topic: str, partition: int, start: int, end: int
) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, __file__, "--probe", json.dumps(dict(conf)), topic, str(partition), str(start), str(end)],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


# -- the run -----------------------------------------------------------------------------


def project_for(
    work: Path, name: str, bootstrap: str, url: str, topic: str, cores: int, variant: Variant
) -> Path:
    root = write_tables_project(
        work / name, bootstrap, url, cores,
        [{"name": "events", "topic": topic, "metadata_columns": list(METADATA_COLUMNS),
          **variant.table}],
    )  # fmt: skip
    project_file = root / "tableflow_project.yml"
    import yaml

    project = yaml.safe_load(project_file.read_text())
    target = project["targets"]["bench"]
    if variant.kafka:
        target["kafka"].setdefault("config", {}).update(variant.kafka)
    spark = dict(variant.spark)
    if "spark.master" in spark:
        target["spark"]["master"] = spark.pop("spark.master")
    if spark:
        target["spark"]["conf"] = spark
    project_file.write_text(yaml.safe_dump(project, sort_keys=False))
    return root


def gb(n: float) -> str:
    return f"{n / 1e9:.2f}"


def report(runs: list[ApplyRun]) -> None:
    print()
    print(f"{'variant':<12} {'wall s':>7} {'CPU s':>7} {'tree PSS':>9} {'tree RSS':>9}  "
          "peak PSS by kind (GB; worker: largest one)        CPU s by kind")  # fmt: skip
    for run in runs:
        kinds = "  ".join(
            f"{k} {gb(v)}" for k, v in sorted(run.peak_kind.items()) if k != "worker" and v >= 5e6
        )
        worker = max((w.peak_pss for w in run.workers), default=0)
        cpu = "  ".join(f"{k} {v:.1f}" for k, v in sorted(run.cpu_kind.items()) if v >= 0.05)
        print(f"{run.variant:<12} {run.seconds:7.1f} {run.cpu_s:7.1f} {gb(run.peak_pss):>9} "
              f"{gb(run.peak_rss):>9}  {kinds}  workers {gb(run.peak_kind.get('worker', 0))} "
              f"({len(run.workers)}, max {gb(worker)})   {cpu}")  # fmt: skip
    print("\nper process (last run of each variant): peak PSS / USS / RSS MB, CPU s")
    last = {run.variant: run for run in runs}
    for run in last.values():
        for p in sorted(run.procs, key=lambda p: (p.kind, p.pid)):
            if p.peak_pss > 5e6 or p.cpu_s > 0.5:
                print(f"  {run.variant:<12} {p.kind:<8} pid {p.pid:<7} {p.peak_pss / MB:6.0f} "
                      f"{p.peak_uss / MB:6.0f} {p.peak_rss / MB:6.0f}  {p.cpu_s:6.1f}")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument(
        "--variants", default="default", help=f"comma-separated: {', '.join(VARIANTS)}"
    )
    parser.add_argument("--rounds", type=int, default=1, help="runs of each variant, interleaved")
    parser.add_argument(
        "--pool", type=int, default=0, help="distinct records to frame and cycle (0: all)"
    )
    parser.add_argument("--interval", type=float, default=0.2, help="sampling interval, s")
    parser.add_argument(
        "--max-records-per-task", type=int, default=250_000, help="as the plan splits"
    )
    parser.add_argument(
        "--baseline-src", type=Path,
        help="a directory holding another version's tableflow_core (e.g. `git archive main "
        "tableflow_core | tar -x -C DIR`): adds variant `baseline-src`, default settings on "
        "that code (and `dedup-baseline-src`, the `dedup` variant on it, when `dedup` is run)",
    )  # fmt: skip
    args = parser.parse_args()
    names = args.variants.split(",")
    if args.baseline_src:
        baseline = str(args.baseline_src.resolve())
        VARIANTS["baseline-src"] = Variant(pythonpath=baseline)
        names.append("baseline-src")
        if "dedup" in names:
            VARIANTS["dedup-baseline-src"] = Variant(pythonpath=baseline,
                                                     table=VARIANTS["dedup"].table)  # fmt: skip
            names.append("dedup-baseline-src")
    unknown = [n for n in names if n not in VARIANTS]
    if unknown:
        raise SystemExit(f"unknown variant(s) {unknown}; known: {', '.join(VARIANTS)}")
    work = Path(tempfile.mkdtemp(prefix="tf-mem-"))
    try:
        measure(args, names, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)  # 10M records leave ~1 GB of broker data


def measure(args: argparse.Namespace, names: list[str], work: Path) -> None:
    with stack(work) as (bootstrap, url):
        topic = "bench_events"
        broker.create_topics(bootstrap, {topic: args.partitions})
        started = time.perf_counter()
        payload = produce(bootstrap, url, topic, args.records, args.partitions, args.pool)
        print(f"produced {args.records:,} records, {payload / MB:.1f} MB payload in "
              f"{time.perf_counter() - started:.1f}s")  # fmt: skip

        per_partition = args.records // args.partitions
        task_range = min(per_partition, args.max_records_per_task)
        probes: dict[str, dict[str, Any]] = {}
        for name in dict.fromkeys(names):
            conf = {"bootstrap.servers": bootstrap, **VARIANTS[name].kafka}
            probes[name] = probe(conf, topic, 0, 0, task_range)
            found = probes[name]
            print(f"client probe ({name}): one task range of {found['records']:,} records "
                  f"(partition of {per_partition:,}): process grew {found['growth'] / MB:.0f} MB "
                  f"reading it in {found['seconds']:.2f}s; librdkafka received "
                  f"{found['rx_bytes'] / MB:.0f} MB, queued at most {found['fetchq_bytes'] / MB:.0f} MB "
                  f"/ {found['fetchq_msgs']:,} messages")  # fmt: skip

        runs: list[ApplyRun] = []
        load_before = os.getloadavg()
        for round_ in range(args.rounds):
            for name in names:
                root = project_for(
                    work, f"{name}-{round_}", bootstrap, url, topic, args.cores, VARIANTS[name]
                )
                run = apply_measured(root, name, args.interval, VARIANTS[name])
                if run.records != args.records:
                    raise SystemExit(f"{name}: apply wrote {run.records}, not {args.records}")
                runs.append(run)
                print(f"  {name} round {round_ + 1}: {run.seconds:.1f} s, CPU {run.cpu_s:.1f} s, "
                      f"peak PSS {gb(run.peak_pss)} GB", flush=True)  # fmt: skip
        load_after = os.getloadavg()
        print(
            f"load average before: {load_before[0]:.2f}, after: {load_after[0]:.2f} ({os.cpu_count()} cores)"
        )
        report(runs)
        print()
        target = TARGET_1M_GB if args.records <= 1_000_000 else TARGET_BOUND_GB
        for name in dict.fromkeys(names):
            mine = [r for r in runs if r.variant == name]
            ranges = args.partitions * -(-per_partition // task_range)
            concurrent = min(args.cores, ranges, -(-args.records // MIN_RECORDS_PER_TASK))
            client = probes[name]["growth"] * concurrent
            peak = max(r.peak_pss for r in mine)
            print(f"{name}: tree peak PSS {gb(peak)} GB (target <= {target:g} GB: "
                  f"{'met' if peak <= target * 1e9 else 'NOT met'}); client buffers ~{gb(client)} GB "
                  f"({concurrent} concurrent task ranges x probe); engine without them ~{gb(peak - client)} GB")  # fmt: skip


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--probe":
        probe_main(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6]))
    else:
        main()
