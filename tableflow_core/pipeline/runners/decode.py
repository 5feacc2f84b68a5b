"""decode: read each range with confluent-kafka inside its Spark task and decode it.

Reading and decoding are fused in one mapInArrow (a separate read stage would ship every
raw record through one more Arrow round trip). The output carries good rows and bad
records side by side (`pipeline/decode_chunks.py`); this stage splits them lazily. A Spark
observation counts both during the write's single pass, so nothing is cached and Kafka is
read once (the bad records are read again only when there are some and a stage needs
them, e.g. to name them in an error or send them to a dead-letter target).

An append table's dedup may run in the read tasks (`pipeline/transforms/read_task_dedup.py`): each
task flags the rows it superseded (`__tf_duplicate`, counted here and dropped from the
good rows) and reports digests of the keys it kept to an accumulator; the stage's first
audit checks, after the write, that no key was kept by two tasks.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

import pyarrow as pa

from tableflow_core.engine.ddl import spark_schema_for
from tableflow_core.engine.observations import observe_counts
from tableflow_core.ingest.bad_records import SOURCE_PARTITION_COLUMN
from tableflow_core.ingest.columns import (
    BAD_RECORD_COLUMN,
    DUPLICATE_COLUMN,
    TOMBSTONE_COLUMN,
    decoded_schema,
)
from tableflow_core.ingest.spec import IngestSpec
from tableflow_core.ingest.stages import Decode
from tableflow_core.kafka.offsets import OffsetRange
from tableflow_core.kafka.range_reader import read_range
from tableflow_core.pipeline.batch import Batch, DecodeCounts, StageContext
from tableflow_core.pipeline.decode_chunks import ChunkDecoder, KeySpec, fewer_gc_passes
from tableflow_core.pipeline.registry import stage_runner
from tableflow_core.pipeline.runners.read_task_keys import (
    DedupAcrossReadTasks,
    start_reports,
    task_keys_of,
)
from tableflow_core.pipeline.task_keys import TaskKeys, TaskKeysRun
from tableflow_core.schemas.decoding import build_decoder
from tableflow_core.schemas.formats import FormatSpec
from tableflow_core.sql_text import quote_ident
from tableflow_core.transforms.arrow_masks import DecodeMasks

DecoderFactory = Callable[[Any], Any]


def _default_decoder_factory(spec: Any) -> Any:

    return build_decoder(spec)


def _mapper(
    kafka_conf: dict[str, str],
    decoder_spec: Any,
    decoder_factory: DecoderFactory,
    chunk_size: int,
    key: KeySpec | None,
    run_id: str,
    masks: DecodeMasks,
    task_keys: TaskKeys | None = None,
    key_report: Any = None,
    decoded_rows: pa.Schema | None = None,
) -> Callable[[Iterable[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The mapInArrow function: each input row is a range; output rows are decoded rows.
    With `task_keys`, the task also runs the dedup or digests keys (`pipeline/task_keys.py`)
    and adds its report to `key_report` (an accumulator); `decoded_rows` is the decoder's
    output schema (`columns.decoded_schema`)."""

    def decoded(range_batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:

        chunks = ChunkDecoder(
            decoder_factory(decoder_spec),
            decoder_spec.target_schema,
            key,
            run_id,
            masks,
            decoder_spec.masked_columns,
        )
        for range_batch in range_batches:
            for row in range_batch.to_pylist():
                offset_range = OffsetRange(row["topic"], row["partition"], row["start"], row["end"])
                for messages in read_range(kafka_conf, offset_range, chunk_size=chunk_size):
                    yield from chunks.decode(messages)

    def run(range_batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        with fewer_gc_passes():
            if not task_keys:
                yield from decoded(range_batches)
                return
            from pyspark import TaskContext

            task = TaskContext.get()
            assert task is not None and decoded_rows is not None
            keys = TaskKeysRun(task_keys, decoded_rows, chunk_size)
            yield from keys.batches(decoded(range_batches))
            key_report.add({task.partitionId(): keys.report()})

    return run


def decode_masks(context: StageContext) -> DecodeMasks:
    """The table's masks that run while decoding (transforms/decode_masks.py); the
    transform stage runs the rest of its chain."""
    compiled = context.spec.compiled
    if compiled is None:
        return DecodeMasks()
    masks: DecodeMasks = compiled.decode_masks(context.spec.key_columns)
    return masks


def key_spec_of(context: StageContext) -> KeySpec | None:
    return key_spec(context.spec)


def key_spec(spec: IngestSpec) -> KeySpec | None:
    """How an upsert table's Kafka keys become its key columns (None: an append table)."""
    if spec.mode != "upsert":
        return None
    key_format = spec.decoder.key or FormatSpec(format="string")
    return KeySpec(key_format, spec.key_columns, spec.decoder.registry)


@stage_runner(Decode)
def decode(context: StageContext, spec: Decode, batch: Batch) -> Batch:
    assert batch.good is not None, "decode needs the read_ranges stage before it"
    key = key_spec_of(context)
    table_schema = context.spec.decoded_schema
    output_schema = decoded_schema(table_schema, upsert=key is not None)
    task_keys = task_keys_of(context)
    reports = start_reports(context.spark, context, task_keys) if task_keys else None
    mapper = _mapper(
        dict(context.kafka_conf),
        context.spec.decoder,
        context.decoder_factory or _default_decoder_factory,
        context.spec.decode_chunk_size,
        key,
        context.run_id,
        decode_masks(context),
        task_keys,
        reports.accumulator if reports is not None else None,
        output_schema,
    )
    flagged = task_keys.flags
    spark_schema = output_schema
    if flagged:
        spark_schema = output_schema.append(pa.field(DUPLICATE_COLUMN, pa.bool_(), nullable=False))
    decoded = batch.good.mapInArrow(mapper, spark_schema_for(spark_schema))
    bad_record = quote_ident(BAD_RECORD_COLUMN)
    source_partition = quote_ident(SOURCE_PARTITION_COLUMN)
    tombstone = quote_ident(TOMBSTONE_COLUMN)
    counts = {
        "records": "count(1)",
        "bad_records": f"count({bad_record})",
        "tombstones": f"count(CASE WHEN {tombstone} THEN 1 END)",
    }
    if flagged:
        counts["duplicates"] = f"count(CASE WHEN {quote_ident(DUPLICATE_COLUMN)} THEN 1 END)"
    # Per partition, for the run's accounting (deadletter/accounting.py).
    partitions = sorted({r.partition for r in context.ranges})
    for p in partitions:
        in_p = f"{source_partition} = {p}"
        counts[f"records_p{p}"] = f"count(CASE WHEN {in_p} THEN 1 END)"
        counts[f"bad_p{p}"] = f"count(CASE WHEN {bad_record} IS NOT NULL AND {in_p} THEN 1 END)"
        counts[f"tombstones_p{p}"] = f"count(CASE WHEN {tombstone} AND {in_p} THEN 1 END)"
    observed, observation = observe_counts(decoded, "decode", counts)
    good = observed.where(f"{bad_record} IS NULL").drop(BAD_RECORD_COLUMN)
    bad = observed.where(f"{bad_record} IS NOT NULL").select(f"{BAD_RECORD_COLUMN}.*")
    if key is None:
        # A null value on an append table: counted (`tombstones`), never a row of NULLs.
        good = good.where(f"NOT {tombstone}").drop(TOMBSTONE_COLUMN)
    if flagged:
        good = good.where(f"NOT {quote_ident(DUPLICATE_COLUMN)}").drop(DUPLICATE_COLUMN)

    audits = batch.audits
    if reports is not None and task_keys.dedup is not None:
        audits = (*audits, DedupAcrossReadTasks(reports))
    return batch.evolve(
        good=good,
        bad=bad,
        decode=DecodeCounts(observation, tuple(partitions), upsert=key is not None),
        audits=audits,
        key_reports=reports,
    )
