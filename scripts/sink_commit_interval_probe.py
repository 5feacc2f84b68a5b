"""How short can the Iceberg Kafka Connect sink's commit interval be and still run stably?

For each interval: a fresh sink (Connect 4.3.1 + Iceberg 1.12.0 plugin) on Apache Kafka
4.4, our REST catalog and s3proxy; JSON records produced at a steady rate for a while;
then it reports the snapshots committed, the gap between commits, freshness (produce ->
visible in the table) sampled once a second, task failures, and whether exactly the
produced records landed. Run: `PYTHONPATH=. .venv/bin/python scripts/sink_commit_interval_probe.py
--intervals 500,1000,2000 --rate 1000 --seconds 40`. Prints one JSON line per interval.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import tempfile
import threading
import time
import uuid
from pathlib import Path

from confluent_kafka import Producer

from tableflow_core.dev.s3_server import S3ServerSettings, start_s3_server
from tests.fixtures.kafka_connect import start_iceberg_sink
from tests.fixtures.kafka_server import ApacheKafka, start_apache_kafka
from tests.fixtures.s3_catalog import start_s3_catalog_server


def probe(
    base: Path, kafka: ApacheKafka, catalog, interval_ms: int, rate: int, seconds: int
) -> dict:  # type: ignore[no-untyped-def]
    topic = f"probe-{uuid.uuid4().hex[:8]}"
    kafka.create_topic(topic, partitions=2)
    ns = f"probe_{uuid.uuid4().hex[:8]}"
    pyiceberg = catalog.pyiceberg_catalog()
    pyiceberg.create_namespace(ns)
    # A connector name of its own: Connect's consumer group is `connect-<name>`, and a
    # group shared with the previous (stopped) sink rebalanced mid-run and stalled it.
    name = f"sink-{interval_ms}-{uuid.uuid4().hex[:6]}"
    worker = start_iceberg_sink(
        base / str(interval_ms), kafka, catalog, topic, f"{ns}.t", interval_ms, name=name
    )
    produced = 0
    stop = threading.Event()

    def produce() -> None:
        nonlocal produced
        producer = Producer(kafka.producer_config())
        started = time.monotonic()
        while not stop.is_set():
            due = int((time.monotonic() - started) * rate)
            while produced < due:
                value = {"id": produced, "sent_ms": int(time.time() * 1000)}
                producer.produce(topic, value=json.dumps(value).encode())
                produced += 1
            producer.poll(0)
            time.sleep(0.01)
        producer.flush(30)

    thread = threading.Thread(target=produce)
    thread.start()
    freshness: list[float] = []
    failures = 0
    began = time.monotonic()
    while time.monotonic() - began < seconds:
        time.sleep(1.0)
        if worker.connector_status(name)["tasks"][0]["state"] != "RUNNING":
            failures += 1
        try:
            table = pyiceberg.load_table((ns, "t"))
            newest = table.scan(selected_fields=("sent_ms",)).to_arrow()["sent_ms"]
            if len(newest):
                freshness.append(time.time() - max(newest.to_pylist()) / 1000)
        except Exception:
            pass
    stop.set()
    thread.join()
    deadline = time.monotonic() + 60
    rows = 0
    while time.monotonic() < deadline:
        table = pyiceberg.load_table((ns, "t"))
        rows = table.scan().count()
        if rows >= produced:
            break
        time.sleep(0.5)
    time.sleep(max(2.0, 3 * interval_ms / 1000))
    table = pyiceberg.load_table((ns, "t"))
    ids = table.scan(selected_fields=("id",)).to_arrow()["id"].to_pylist()
    commits = sorted(s.timestamp_ms for s in table.snapshots())
    gaps = [(b - a) / 1000 for a, b in itertools.pairwise(commits)]
    rss_kb = int(
        Path(f"/proc/{worker.process.pid}/status").read_text().split("VmRSS:")[1].split()[0]
    )
    worker.stop()
    return {
        "interval_ms": interval_ms,
        "rate": rate,
        "seconds": seconds,
        "produced": produced,
        "rows": len(ids),
        "exact": sorted(ids) == list(range(produced)),
        "snapshots": len(commits),
        "commit_gap_s_median": round(statistics.median(gaps), 2) if gaps else None,
        "commit_gap_s_max": round(max(gaps), 2) if gaps else None,
        "freshness_s_p50": round(statistics.median(freshness), 2) if freshness else None,
        "freshness_s_p95": round(sorted(freshness)[int(0.95 * (len(freshness) - 1))], 2)
        if freshness
        else None,
        "task_not_running_samples": failures,
        "worker_rss_mb": rss_kb // 1024,
        "worker_start_s": round(worker.startup_seconds, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--intervals", default="500,1000,2000")
    parser.add_argument("--rate", type=int, default=1000)
    parser.add_argument("--seconds", type=int, default=40)
    parser.add_argument("--work-dir", help="keep the servers' folders and logs here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="sink-probe-") as work:
        base = Path(args.work_dir or work)
        s3 = start_s3_server(S3ServerSettings(data_dir=base / "s3"))
        catalog = start_s3_catalog_server(base, s3)
        kafka = start_apache_kafka(base)
        try:
            for interval in (int(i) for i in args.intervals.split(",")):
                print(
                    json.dumps(probe(base, kafka, catalog, interval, args.rate, args.seconds)),
                    flush=True,
                )
        finally:
            kafka.stop()
            catalog.process.stop()
            s3.stop()


if __name__ == "__main__":
    main()
