"""Change data capture: Debezium topics through `tableflow apply` vs the same records as a
plain keyed topic through the upsert path, measured in the same run (issue 44).

    .venv/bin/python benchmarks/cdc.py [--rows 1000000] [--changes 100000] [--cores 2]

Starts its own Apache Kafka, Apicurio Registry 3.3.3, PostgreSQL 15 (a private cluster, as
the tests do) and Debezium 3.6.1.Final on Kafka Connect (pgoutput, 3 partitions a topic;
keys and values as Avro through Apicurio's converter in Confluent's wire format, the
format tableflow reads Debezium envelopes in: docs/cdc.md). Then:

1. snapshot: `--rows` rows (~1/10 customers, ~3/10 orders, ~6/10 order_items) loaded
   with COPY, then Debezium's initial snapshot of them (op `r`; measured: Debezium's
   records/s until every row is on its topic);
2. stream: `--changes` changes of orders in transactions of 1,000: 60% updates, 30%
   deletes (cascading to their items), 10% primary-key moves (`UPDATE ... SET order_id`,
   cascading to the items' keys: Debezium writes a delete, a tombstone and a create for
   each moved row); Debezium's records counted per topic.

For each phase both paths are applied by `tableflow apply` (a new process each, as a cron
would run it; embedded catalog, Spark local[cores]):
- cdc: the three Debezium topics as `mode: upsert` tables with `value.envelope: debezium`;
- plain: the same records copied to three plain keyed topics (same partition, same
  order, the same key bytes; the `after` image as an Avro record of the after schema,
  Debezium's MicroTimestamp longs as `local-timestamp-micros`, registered under the plain
  topic's subject; a delete or tombstone as a tombstone) as `mode: upsert` tables: what a
  user who flattened the envelope upstream would run.
Each prints seconds, records/s and the ratio cdc/plain; the order of the two applies
alternates between phases. At the end every table of both paths equals `SELECT * FROM`
its PostgreSQL table (pyiceberg, value by value). Load average printed per step.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import random
import shutil
import struct
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fastavro
from confluent_kafka import Producer
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from ingest import cli_measured, stack, write_tables_project  # benchmarks/ is on sys.path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tableflow_core.dev import broker  # noqa: E402
from tableflow_core.dev.apicurio_server import (  # noqa: E402
    CCOMPAT_PATH,
    ApicurioSettings,
    start_apicurio,
)
from tests.cdc_model import AvroEnvelopes, first_difference, read_topic  # noqa: E402
from tests.cdc_workload import (  # noqa: E402
    KEYS,
    TABLES,
    create_schema,
    load_snapshot,
    qualified,
    source_rows,
)
from tests.fixtures.postgres import (  # noqa: E402
    connect,
    prepare_capture,
    remove_cluster,
    start_debezium,
    start_postgres_cluster,
)
from tests.support.kafka_connect import (  # noqa: E402
    APICURIO_CONVERTER_LOCK,
    DEBEZIUM_POSTGRES_LOCK,
    apicurio_avro_converters,
)
from tests.support.postgres import PostgresServer  # noqa: E402

PREFIX = "pg"
PARTITIONS = 3
MICRO_TIMESTAMP = "io.debezium.time.MicroTimestamp"


def load() -> str:
    return f"load average {os.getloadavg()[0]:.2f} ({os.cpu_count()} cores)"


def cdc_topic(table: str) -> str:
    return f"{PREFIX}.public.{table}"


def plain_topic(table: str) -> str:
    return f"plain.{table}"


def end_offsets(bootstrap: str, topics: list[str]) -> dict[str, int]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-ends"})
    try:
        totals = {}
        for topic in topics:
            metadata = consumer.list_topics(topic, timeout=30).topics[topic]
            totals[topic] = sum(
                consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1]
                for p in metadata.partitions
            )
        return totals
    finally:
        consumer.close()


def wait_quiet(bootstrap: str, least: int, quiet_s: float = 6.0, timeout: float = 1800) -> int:
    """Until the Debezium topics hold >= `least` records and stop growing for `quiet_s`."""
    topics = [cdc_topic(t) for t in TABLES]
    deadline = time.monotonic() + timeout
    last, since = -1, time.monotonic()
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):
            total = sum(end_offsets(bootstrap, topics).values())
            if total != last:
                last, since = total, time.monotonic()
            elif total >= least and time.monotonic() - since >= quiet_s:
                return total
        time.sleep(0.5)
    raise SystemExit(f"Debezium's topics stopped at {last} records (wanted >= {least})")


class PlainCopier:
    """Debezium's Avro records -> plain keyed Avro records of the same rows (same key bytes)."""

    def __init__(self, registry_url: str) -> None:
        self.registry = SchemaRegistryClient({"url": registry_url, "timeout": 30})
        self.registry_url = registry_url
        self.envelopes = AvroEnvelopes(registry_url)
        self.value_ids: dict[tuple[str, int], tuple[int, Any]] = {}
        self.keys_registered: set[str] = set()

    def _writer(self, data: bytes) -> dict[str, Any]:
        (schema_id,) = struct.unpack(">I", data[1:5])
        with urllib.request.urlopen(
            f"{self.registry_url}/schemas/ids/{schema_id}", timeout=30
        ) as response:
            return dict(json.loads(json.loads(response.read())["schema"]))

    def key(self, table: str, key: bytes) -> bytes:
        subject = f"{plain_topic(table)}-key"
        if subject not in self.keys_registered:  # the same schema: Apicurio gives the same id
            schema = json.dumps(self._writer(key))
            self.registry.register_schema(subject, Schema(schema, "AVRO"))
            self.keys_registered.add(subject)
        return key

    def value(self, table: str, value: bytes | None) -> bytes | None:
        if value is None:
            return None
        (envelope_id,) = struct.unpack(">I", value[1:5])
        if (table, envelope_id) not in self.value_ids:
            row_schema = plain_row_schema(self._writer(value))
            schema_id = self.registry.register_schema(
                f"{plain_topic(table)}-value", Schema(json.dumps(row_schema), "AVRO")
            )
            self.value_ids[(table, envelope_id)] = (schema_id, fastavro.parse_schema(row_schema))
        schema_id, parsed = self.value_ids[(table, envelope_id)]
        envelope, _ = self.envelopes._read(value)
        if envelope["op"] == "d" or envelope["after"] is None:
            return None
        out = io.BytesIO()
        out.write(b"\x00" + struct.pack(">I", schema_id))
        fastavro.schemaless_writer(out, parsed, envelope["after"])
        return out.getvalue()


def plain_row_schema(envelope: dict[str, Any]) -> dict[str, Any]:
    """The envelope's `after` record as a top-level schema; MicroTimestamp longs become
    `local-timestamp-micros` (what the envelope's reader makes of them)."""
    before = next(f for f in envelope["fields"] if f["name"] == "before")
    record = next(t for t in before["type"] if isinstance(t, dict))
    record = json.loads(json.dumps(record))
    record["namespace"] = "plain"
    for field in record["fields"]:
        branches = field["type"] if isinstance(field["type"], list) else [field["type"]]
        for branch in branches:
            if isinstance(branch, dict) and branch.get("connect.name") == MICRO_TIMESTAMP:
                branch["logicalType"] = "local-timestamp-micros"
    return dict(record)


def copy_to_plain(
    bootstrap: str, copier: PlainCopier, starts: dict[tuple[str, int], int]
) -> dict[tuple[str, int], int]:
    """Copy every Debezium record from `starts` on to the plain topics (same partition);
    returns the new starts (the ends read)."""
    producer = Producer(broker.producer_config(bootstrap))
    ends = dict(starts)
    for table in TABLES:
        for partition, offset, key, value in read_topic(
            {"bootstrap.servers": bootstrap}, cdc_topic(table)
        ):
            if offset < starts.get((table, partition), 0):
                continue
            record_key, record_value = copier.key(table, key), copier.value(table, value)
            while True:
                try:
                    producer.produce(
                        plain_topic(table), record_value, key=record_key, partition=partition
                    )
                    break
                except BufferError:
                    producer.poll(0.05)
            ends[(table, partition)] = max(ends.get((table, partition), 0), offset + 1)
    producer.flush(600)
    return ends


def project_tables(paths: list[str]) -> list[dict[str, Any]]:
    def table_config(name: str, topic: str, table: str, envelope: bool) -> dict[str, Any]:
        value: dict[str, Any] = {"format": "avro"}
        if envelope:
            value["envelope"] = "debezium"
        return {
            "name": name,
            "topic": topic,
            "mode": "upsert",
            "key_columns": list(KEYS[table]),
            "key": {"format": "avro"},
            "value": value,
        }

    cdc = [table_config(t, cdc_topic(t), t, True) for t in TABLES]
    plain = [table_config(f"plain_{t}", plain_topic(t), t, False) for t in TABLES]
    return (cdc if "cdc" in paths else []) + plain


def apply_path(root: Path, path: str, records: int) -> float:
    select = ",".join(TABLES) if path == "cdc" else ",".join(f"plain_{t}" for t in TABLES)
    seconds, peak = cli_measured(root, "apply", "--auto-approve", "--select", select)
    print(
        f"  {path:5s} apply: {seconds:7.1f} s, {records / seconds:9.0f} records/s, "
        f"peak RSS {peak / 1e9:.2f} GB; {load()}",
        flush=True,
    )
    return seconds


def stream_changes(db: Any, changes: int, seed: int) -> dict[str, int]:
    """`changes` order changes: 60% updates, 30% deletes, 10% key moves, 1,000 a transaction."""
    rng = random.Random(seed)
    order_ids = [r[0] for r in db.execute("SELECT order_id FROM orders ORDER BY order_id")]
    rng.shuffle(order_ids)
    picked = order_ids[:changes]
    moves, deletes = changes // 10, changes * 3 // 10
    kinds = [
        ("move", picked[:moves]),
        ("delete", picked[moves : moves + deletes]),
        ("update", picked[moves + deletes :]),
    ]
    batches = [(kind, ids[i : i + 1000]) for kind, ids in kinds for i in range(0, len(ids), 1000)]
    rng.shuffle(batches)
    statements = {
        "update": "UPDATE orders SET status = 'updated', amount = amount + 1 WHERE order_id = ANY(%s)",
        "delete": "DELETE FROM orders WHERE order_id = ANY(%s)",
        "move": "UPDATE orders SET order_id = order_id + 1000000000 WHERE order_id = ANY(%s)",
    }
    for kind, ids in batches:
        db.execute(statements[kind], (ids,))
        db.commit()
    return {"updates": changes - moves - deletes, "deletes": deletes, "key_moves": moves}


def check_equal(root: Path, server: PostgresServer, paths: list[str]) -> None:
    """Every table of `paths` equals `SELECT * FROM` its PostgreSQL table, value by value."""
    from tableflow_core.config.loader import load_project
    from tableflow_core.targets.catalog import open_catalog

    with open_catalog(load_project(root)) as handle, connect(server) as db:
        for table in TABLES:
            expected = {tuple(r[c] for c in KEYS[table]): r for r in source_rows(db, table)}
            for path in paths:
                name = table if path == "cdc" else f"plain_{table}"
                rows = handle.catalog.load_table(f"bench.{name}").scan().to_arrow().to_pylist()
                got = {tuple(r[c] for c in KEYS[table]): r for r in rows}
                difference = first_difference(got, expected)
                status = "equal" if difference is None else f"DIFFERS: {difference}"
                print(f"  {name}: {len(got)} rows vs {len(expected)} in PostgreSQL: {status}")


@contextlib.contextmanager
def apicurio(work: Path) -> Iterator[str]:
    """Apicurio Registry 3.3.3 (in memory): its Confluent-compatible URL."""
    server = start_apicurio(ApicurioSettings(data_dir=work / "apicurio"))
    try:
        yield server.url
    finally:
        server.stop()


@contextlib.contextmanager
def postgres() -> Iterator[PostgresServer]:
    server = start_postgres_cluster()
    try:
        yield server
    finally:
        server.stop()
        remove_cluster(server)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--changes", type=int, default=100_000)
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--seed", type=int, default=44)
    parser.add_argument("--skip-cdc", action="store_true", help="plain path only")
    parser.add_argument("--keep", action="store_true", help="keep the work folder")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="tableflow-bench-cdc-"))
    print(f"work folder {work}; {load()}", flush=True)
    try:
        run(args, work)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


def run(args: argparse.Namespace, work: Path) -> None:
    with stack(work) as (bootstrap, _), apicurio(work) as url, postgres() as server:
        broker.create_topics(bootstrap, {plain_topic(t): PARTITIONS for t in TABLES})
        started = time.perf_counter()
        with connect(server) as db:
            create_schema(db)
            counts = load_snapshot(db, max(1, args.rows // 10), seed=args.seed)
        rows = sum(counts.values())
        print(f"snapshot: {rows} rows loaded by COPY {counts} in "
              f"{time.perf_counter() - started:.1f} s; {load()}", flush=True)  # fmt: skip
        password = prepare_capture(server, qualified())
        started = time.perf_counter()
        worker = start_debezium(
            work,
            bootstrap,
            server,
            qualified(),
            PREFIX,
            password,
            PARTITIONS,
            extra=apicurio_avro_converters(url.replace(CCOMPAT_PATH, "/apis/registry/v2")),
            plugin_extras=((DEBEZIUM_POSTGRES_LOCK, APICURIO_CONVERTER_LOCK),),
        )
        copier = PlainCopier(url)
        try:
            captured = wait_quiet(bootstrap, rows)
            seconds = time.perf_counter() - started
            print(f"  Debezium snapshot: {captured} records in {seconds:.1f} s "
                  f"({captured / seconds:.0f} records/s, worker start included); {load()}",
                  flush=True)  # fmt: skip
            starts = copy_to_plain(bootstrap, copier, {})
            order = ["plain"] if args.skip_cdc else ["cdc", "plain"]
            root = write_tables_project(
                work / "project", bootstrap, url, args.cores, project_tables(order)
            )
            seconds_by = {path: apply_path(root, path, captured) for path in order}
            if "cdc" in seconds_by:
                print(f"  snapshot cdc/plain records/s: "
                      f"{seconds_by['plain'] / seconds_by['cdc']:.2f}x", flush=True)  # fmt: skip

            started = time.perf_counter()
            with connect(server) as db:
                kinds = stream_changes(db, args.changes, args.seed + 1)
            total = wait_quiet(bootstrap, captured + args.changes)
            stream_records = total - captured
            print(f"stream: {kinds} -> {stream_records} Debezium records in "
                  f"{time.perf_counter() - started:.1f} s (SQL and capture); {load()}",
                  flush=True)  # fmt: skip
            copy_to_plain(bootstrap, copier, starts)
            seconds_by = {path: apply_path(root, path, stream_records) for path in reversed(order)}
            if "cdc" in seconds_by:
                print(f"  stream cdc/plain records/s: "
                      f"{seconds_by['plain'] / seconds_by['cdc']:.2f}x", flush=True)  # fmt: skip
        finally:
            worker.stop()
        check_equal(root, server, order)


if __name__ == "__main__":
    main()
