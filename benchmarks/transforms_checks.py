"""Cost of transforms and checks: one table's batch written to Iceberg, side by side in one run.

    .venv/bin/python benchmarks/transforms_checks.py [--records 1000000] [--cores 2] [--rounds 2]

A batch of N sample orders (tableflow_core.dev.sample_data, 10 columns with a struct
and a list, plus the hidden source partition/offset columns) is generated in Spark
tasks and cached first, so generation is not timed. Then, per round, each scenario
writes the batch to a new Iceberg table (Hadoop catalog in a tmp dir):

- baseline: write only;
- masks + dedup: 3 masks (hash customer_id, partial order_id, redact coupon) and a
  dedup on order_id keeping the last by offset, then write;
- 5 checks: not_null, unique, accepted_values, range, expression (one Spark
  aggregate), then write.

It prints each scenario's best time and its overhead over the baseline (targets:
masks + dedup <= +25%, 5 checks <= +30%). The first validation (JVM classes, code
generation) is timed apart, once per process. These figures
time the two libraries around a write; once the pipeline calls them, the figure to
keep is the one measured through `tableflow apply` (Kafka read and decode included,
which makes the relative overhead smaller; `benchmarks/transforms_checks_apply.py`).
The masks here run as Spark expressions: `tableflow apply` runs masks of text columns
in its decode tasks instead (transforms/decode_masks.py), as this benchmark has no
decode.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa

from tableflow_core.checks.compile import CompiledChecks, compile_checks
from tableflow_core.config.models.checks import Check
from tableflow_core.config.models.transforms import Transform
from tableflow_core.config.project import SourceLocation
from tableflow_core.dev.sample_data import generate_orders, orders_schema
from tableflow_core.engine.spark_session import build_spark_session
from tableflow_core.ingest.bad_records import SOURCE_OFFSET_COLUMN, SOURCE_PARTITION_COLUMN
from tableflow_core.schemas.avro_types import map_avro_schema
from tableflow_core.transforms import compile_transforms
from tableflow_core.transforms.compile import CompiledTransforms
from tableflow_core.transforms.sql import spark_type

CATALOG = "bench"
HIDDEN = [
    pa.field(SOURCE_PARTITION_COLUMN, pa.int32(), nullable=False),
    pa.field(SOURCE_OFFSET_COLUMN, pa.int64(), nullable=False),
]
TRANSFORMS: list[dict[str, Any]] = [
    {"type": "mask", "columns": ["customer_id"], "method": "hash", "salt": "bench-salt"},
    {"type": "mask", "columns": ["order_id"], "method": "partial", "keep_last": 4},
    {"type": "mask", "columns": ["coupon"], "method": "redact"},
    {"type": "dedup", "keys": ["order_id"], "keep": "last"},
]
CHECKS: list[dict[str, Any]] = [
    {"type": "not_null", "columns": ["order_id"]},
    {"type": "unique", "columns": ["order_id"]},
    {"type": "accepted_values", "column": "status",
     "values": ["PLACED", "PAID", "SHIPPED", "DELIVERED", "CANCELLED"]},
    {"type": "range", "column": "quantity", "min": 1, "max": 10},
    {"type": "expression", "name": "positive_amount", "expression": "amount > 0"},
]  # fmt: skip


def here(key: str) -> SourceLocation:
    return SourceLocation(Path(__file__), None)


def table_schema() -> pa.Schema:
    return pa.schema(list(map_avro_schema(json.dumps(orders_schema())).arrow_type))


def source_frame(spark: Any, records: int, slices: int) -> Any:
    """N orders generated in `slices` Spark tasks, read round-robin from 4 partitions."""
    schema = pa.schema([*table_schema(), *HIDDEN])
    per_slice = records // slices

    def emit(iterator: Any) -> Any:
        for part in iterator:
            for index in part.column(0).to_pylist():
                rows = [dict(r.value) for r in generate_orders(per_slice, seed=index) if r.value]
                for offset, row in enumerate(rows):
                    row[SOURCE_PARTITION_COLUMN] = index % 4
                    row[SOURCE_OFFSET_COLUMN] = offset
                yield from pa.Table.from_pylist(rows, schema=schema).to_batches(50_000)

    ddl = ", ".join(f"`{f.name}` {spark_type(f.type)}" for f in schema)
    return spark.range(slices, numPartitions=slices).mapInArrow(emit, ddl)


def write(spark: Any, df: Any, name: str) -> None:
    columns = [c for c in df.columns if not c.startswith("__tf_")]
    df.select(*columns).writeTo(f"{CATALOG}.db.{name}").using("iceberg").create()


def timed(action: Callable[[], None]) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--slices", type=int, default=4)
    args = parser.parse_args()

    from pydantic import TypeAdapter

    transforms: CompiledTransforms = compile_transforms(
        TypeAdapter(list[Transform]).validate_python(TRANSFORMS), table_schema(), here
    )
    checks: CompiledChecks = compile_checks(
        TypeAdapter(list[Check]).validate_python(CHECKS), table_schema(), here
    )
    warehouse = tempfile.mkdtemp(prefix="tableflow-bench-")
    spark = build_spark_session(
        master=f"local[{args.cores}]",
        app_name="bench-transforms-checks",
        catalogs={CATALOG: {"type": "hadoop", "warehouse": warehouse}},
    )
    from pyspark import StorageLevel

    from tableflow_core.pipeline.checks.run import run_checks
    from tableflow_core.pipeline.transforms.spark import apply_transforms

    started = time.perf_counter()
    source = source_frame(spark, args.records, args.slices).persist(StorageLevel.MEMORY_AND_DISK)
    rows = source.count()
    print(f"generated and cached {rows:,} orders in {time.perf_counter() - started:.1f}s")

    counter = iter(range(1_000_000))

    def baseline() -> None:
        write(spark, source, f"t{next(counter)}")

    def masks_dedup() -> None:
        result = apply_transforms(source, transforms, spark=spark)
        write(spark, result.df, f"t{next(counter)}")

    def five_checks() -> None:
        run = run_checks(source, checks, spark, table="bench.orders")
        if run.report.blocks_publish:
            raise SystemExit(run.report.failure_message())
        write(spark, run.passing_df, f"t{next(counter)}")

    warmup = timed(baseline)
    print(f"warm-up write (JIT, Iceberg classes): {warmup:.2f}s")
    first = timed(lambda: run_checks(source.limit(1000), checks, spark, table="warmup"))
    print(f"first validation (once per process): {first:.2f}s")

    scenarios = {"baseline": baseline, "masks + dedup": masks_dedup, "5 checks": five_checks}
    times: dict[str, list[float]] = {name: [] for name in scenarios}
    for _ in range(args.rounds):
        for name, scenario in scenarios.items():
            times[name].append(timed(scenario))
    base = min(times["baseline"])
    targets = {"masks + dedup": 25.0, "5 checks": 30.0}
    print(f"\n{rows:,} rows, local[{args.cores}], best of {args.rounds} (all runs in seconds)")
    for name, runs in times.items():
        best = min(runs)
        overhead = (best / base - 1) * 100
        target = f"  target <= +{targets[name]:.0f}%" if name in targets else ""
        verdict = "" if name not in targets else ("  OK" if overhead <= targets[name] else "  OVER")
        shown = ", ".join(f"{t:.2f}" for t in runs)
        print(
            f"  {name:<14} {best:6.2f}s  ({shown})  median {statistics.median(runs):.2f}s"
            f"  overhead {overhead:+.0f}%{target}{verdict}"
        )
    source.unpersist()
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
