"""Inside a shared job's Spark task: many tables' ranges read, decoded and written (in
the driver process for a small job of upsert batches, `shared_run.reads_in_driver`).

The task's input rows are ranges tagged with their table (`member`). It reads them with
one consumer (`kafka/range_reader.RangeReader`), one table after the other; decodes each
table's messages with its own decoder (`decode_chunks.ChunkDecoder`, as a table's own
read tasks do); writes the table's good rows as its data files (`data_files.py`); and
yields one report per table: its data files, what it read per partition, its bad records
(the first of them, to name in an error) and the error that stopped it, if any. A range
that cannot be read fails its table, not the task: the other tables still get their
files.

A checked append table's tasks judge its row-local checks on each decoded batch
(`checks/arrow_checks.py`): they count each check's failing rows, keep a few samples, and
take out the rows of failing skip/dlq checks. Rows dead-lettered (those and, with
`on_error: dlq`, the undecodable records) are reported as the dead-letter table's rows,
built from the records the task read (no second read of Kafka); the driver judges the
checks and appends them before the table's publish (pipeline/shared_run.py).

An upsert table's task writes no file: its report carries the decoded good rows and
tombstones with their Kafka positions (Arrow IPC), which the driver merges into the
table (`pipeline/upsert_rows.py`); its runs are small (ingest/sharing.py). Its first load
(a table holding no rows) is written as an append's is: the task reduces its rows to each
key's latest record and writes them; its report carries only each kept record's key,
position and place (`pipeline/first_load.py`).
"""

from __future__ import annotations

import pickle
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import groupby
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from tableflow_core.checks.arrow_checks import CheckTally, judge_batch
from tableflow_core.checks.compile import CompiledCheck
from tableflow_core.checks.report import SAMPLES_PER_CHECK
from tableflow_core.checks.verdict import CHECK_ERROR_CLASS, CHECK_STAGE, failed_message
from tableflow_core.deadletter.originals import bad_record_row
from tableflow_core.engine.test_hooks import crash_session_point
from tableflow_core.errors import FailedRecord, TableflowError
from tableflow_core.ingest.bad_records import (
    BAD_RECORD_SCHEMA,
    SAMPLE_POSITIONS,
    SOURCE_OFFSET_COLUMN,
    SOURCE_PARTITION_COLUMN,
)
from tableflow_core.ingest.columns import (
    BAD_RECORD_COLUMN,
    SOURCE_TIMESTAMP_COLUMN,
    TOMBSTONE_COLUMN,
    is_hidden,
)
from tableflow_core.kafka.messages import MessageChunk
from tableflow_core.kafka.offsets import OffsetRange
from tableflow_core.kafka.range_reader import RangeReader
from tableflow_core.pipeline.data_files import write_data_files
from tableflow_core.pipeline.decode_chunks import ChunkDecoder, KeySpec, fewer_gc_passes
from tableflow_core.pipeline.first_load import PLACE_FILE, write_latest
from tableflow_core.pipeline.vended_credentials import CredentialRefresh

# A shared job's input rows, ranges tagged with their table: Spark's DDL of the job's
# DataFrame, and the same as Arrow for the driver's read (`shared_run._in_driver`).
SHARED_RANGES_SCHEMA = "member int, topic string, partition int, start long, `end` long"
SHARED_RANGES_ARROW = pa.schema(
    [("member", pa.int32()), ("topic", pa.string()), ("partition", pa.int32()),
     ("start", pa.int64()), ("end", pa.int64())]
)  # fmt: skip
REPORT_SCHEMA = "member int, report binary"
MAX_REPORTED_FAILURES = 20  # bad records named per table (route_bad_records' figure)
# A table's good rows a task holds before it writes them as a data file: a large run's
# task writes a file per this many bytes of Arrow instead of holding all its rows.
WRITE_BUFFER_BYTES = 128 * 1024 * 1024
# The hidden columns an upsert table's rows keep on their way to the driver's merge.
UPSERT_SOURCE_COLUMNS = (
    SOURCE_PARTITION_COLUMN,
    SOURCE_OFFSET_COLUMN,
    SOURCE_TIMESTAMP_COLUMN,
    TOMBSTONE_COLUMN,
)


@dataclass(frozen=True)
class TableWork:
    """What a task needs to read and write one table of the job (shipped to the tasks)."""

    member: int
    decoder: Any  # schemas.decoding.DecoderSpec
    run_id: str
    chunk_size: int
    metadata: Any  # pyiceberg TableMetadata, slim (data_files.slim_metadata)
    io_properties: Mapping[str, str]
    credentials: CredentialRefresh | None = None  # vended ones that expire: fetched anew
    key: KeySpec | None = None  # an upsert table: its rows go to the driver, not to files
    # An upsert table: the Arrow bytes of rows this task may send to the driver; past it
    # the task sends none and says so (`TableReport.too_large`): the run goes to Spark.
    max_upsert_bytes: int | None = None
    # An upsert table holding no rows: its rows are written here, reduced to each key's
    # latest record, and only their keys and places go to the driver (first_load.py);
    # `cdc`: a change stream's, ordered by source position first.
    first_load: bool = False
    cdc: bool = False
    # A checked append table: its row-local checks (checks/arrow_checks.py), judged here.
    checks: tuple[CompiledCheck, ...] = ()
    # `on_error: dlq`: undecodable records become dead-letter rows instead of failures.
    dead_letter_bad: bool = False


@dataclass
class TableReport:
    """What one task did for one table."""

    member: int
    read: dict[int, int] = field(default_factory=dict)  # rows decoded, per partition
    bad: dict[int, int] = field(default_factory=dict)  # bad records, per partition
    written: dict[int, int] = field(default_factory=dict)  # rows in its data files
    # Null values: an append table's are never written, an upsert table's are its deletes.
    tombstones: dict[int, int] = field(default_factory=dict)
    failures: list[FailedRecord] = field(default_factory=list)  # the first bad records
    data_files: list[Any] = field(default_factory=list)  # pyiceberg DataFiles
    # An upsert table's decoded good rows and tombstones (UPSERT_SOURCE_COLUMNS kept), as
    # an Arrow IPC stream: the driver merges them (pipeline/upsert_rows.py).
    upsert_rows: bytes | None = None
    # An upsert table's first load: each kept record's key, order columns, tombstone
    # flag and place (first_load.PLACE_FILE: an index of `data_files`), Arrow IPC.
    placed: bytes | None = None
    # The upsert rows (a first load's places) outgrew `TableWork.max_upsert_bytes`: none
    # are sent.
    too_large: bool = False
    error: str | None = None  # the table's ranges could not all be read or written
    # A checked table: its checks' tally, and the rows its skip and dlq checks took out.
    checks: CheckTally | None = None
    skipped: dict[int, int] = field(default_factory=dict)
    dead_lettered: dict[int, int] = field(default_factory=dict)
    # Dead-letter rows (BAD_RECORD_SCHEMA, Arrow IPC): the rows dlq checks took out and,
    # with `on_error: dlq`, the undecodable records.
    dead_letters: bytes | None = None

    def encode(self) -> bytes:
        return pickle.dumps(self, protocol=pickle.HIGHEST_PROTOCOL)

    @staticmethod
    def decode(data: bytes) -> TableReport:
        report = pickle.loads(data)  # written by our own tasks, this run
        assert isinstance(report, TableReport)
        return report


def _add(counts: dict[int, int], partitions: pa.Array) -> None:
    if len(partitions) == 0:
        return
    for entry in pc.value_counts(partitions).to_pylist():
        partition, count = int(entry["values"]), int(entry["counts"])
        counts[partition] = counts.get(partition, 0) + count


class _TableRun:
    """One table's ranges in this task: decoded batches split into good rows and bad."""

    def __init__(self, work: TableWork, decoder_factory: Callable[[Any], Any]) -> None:
        self.work = work
        self._io_properties = work.io_properties
        self.report = TableReport(work.member)
        self._chunks = ChunkDecoder(
            decoder_factory(work.decoder), work.decoder.target_schema, work.key, work.run_id
        )
        self._upsert = work.key is not None
        # A first load's rows are written here, as an append's (the places to the driver).
        self._writes = not self._upsert or work.first_load
        self._placed: list[pa.Table] = []
        self._good: list[pa.RecordBatch] = []
        self._buffered = 0  # bytes in _good
        self._dead_letters: list[pa.Table] = []  # BAD_RECORD_SCHEMA
        if work.checks:
            self.report.checks = CheckTally()

    def add(self, decoded: pa.RecordBatch, messages: Sequence[Any] = ()) -> None:
        """One decoded batch of `messages` (the records it was decoded from)."""
        partitions = decoded.column(SOURCE_PARTITION_COLUMN)
        _add(self.report.read, partitions)
        bad_rows = decoded.column(BAD_RECORD_COLUMN).is_valid()
        if pc.any(bad_rows).as_py():
            bad = decoded.filter(bad_rows)
            _add(self.report.bad, bad.column(SOURCE_PARTITION_COLUMN))
            self._keep_failures(bad.column(BAD_RECORD_COLUMN).to_pylist())
            if self.work.dead_letter_bad:
                records = pa.Table.from_struct_array(bad.column(BAD_RECORD_COLUMN))
                self._dead_letters.append(records.cast(BAD_RECORD_SCHEMA))
            decoded = decoded.filter(pc.invert(bad_rows))
        # Null values: rows of NULLs the decoder marks; counted as tombstones, not written.
        # An upsert table's tombstones (its key columns filled) go on to the merge.
        null_values = pc.fill_null(decoded.column(TOMBSTONE_COLUMN), False)
        has_null_values = pc.any(null_values).as_py()
        if has_null_values:
            _add(
                self.report.tombstones, decoded.column(SOURCE_PARTITION_COLUMN).filter(null_values)
            )
            if not self._upsert:
                decoded = decoded.filter(pc.invert(null_values))
        if self.work.checks and not self._upsert and decoded.num_rows:
            decoded = self._judge(decoded, messages)
        if decoded.num_rows:
            # The written rows counted on the partition column alone: an upsert table's
            # batch keeps its tombstones, and a filter of every column costs ~0.2 CPU s
            # a million rows (more than a first load's reduction in its task).
            written = decoded.column(SOURCE_PARTITION_COLUMN)
            if self._upsert and has_null_values:
                written = written.filter(pc.invert(null_values))
            _add(self.report.written, written)
            columns = [
                n
                for n in decoded.schema.names
                if not is_hidden(n) or (self._upsert and n in UPSERT_SOURCE_COLUMNS)
            ]
            good = decoded.select(columns)
            if self.report.too_large:
                return
            self._good.append(good)
            self._buffered += good.nbytes
            if self._buffered >= WRITE_BUFFER_BYTES and self._writes:
                self.write()
            limit = self.work.max_upsert_bytes
            if not self._writes and limit is not None and self._buffered > limit:
                self.report.too_large = True  # counted on, sent to nobody
                self._good, self._buffered = [], 0

    def _judge(self, good: pa.RecordBatch, messages: Sequence[Any]) -> pa.RecordBatch:
        """The good rows the checks leave in the batch; the tally and the rows taken out
        go to the report (checks/arrow_checks.py)."""
        started = time.perf_counter()
        verdict = judge_batch(self.work.checks, good, _samples, SAMPLES_PER_CHECK)
        verdict.tally.seconds = time.perf_counter() - started
        assert self.report.checks is not None
        self.report.checks.add(verdict.tally, SAMPLES_PER_CHECK)
        taken = pc.or_(verdict.dead_lettered, verdict.skipped)
        if not pc.any(taken).as_py():
            return good
        _add(self.report.skipped, good.filter(verdict.skipped).column(SOURCE_PARTITION_COLUMN))
        dead = good.filter(verdict.dead_lettered)
        if dead.num_rows:
            _add(self.report.dead_lettered, dead.column(SOURCE_PARTITION_COLUMN))
            reasons = verdict.reasons.filter(verdict.dead_lettered)
            self._dead_letters.append(
                _check_dead_letters(dead, reasons, MessageChunk.of(messages), self.work.run_id)
            )
        return good.filter(pc.invert(taken))

    def _keep_failures(self, records: list[dict[str, Any]]) -> None:
        found = self.report.failures + [
            FailedRecord(
                r["source_topic"], int(r["source_partition"]), int(r["source_offset"]),
                str(r["error_message"]),
            )
            for r in records
        ]  # fmt: skip
        found.sort(key=lambda f: (f.partition, f.offset))
        self.report.failures = found[:MAX_REPORTED_FAILURES]

    def read(self, reader: RangeReader, offset_range: OffsetRange) -> None:
        for messages in reader.read(offset_range, self.work.chunk_size):
            for decoded in self._chunks.decode(messages):
                self.add(decoded, messages)

    def finish(self) -> None:
        """Every row read reported: the good rows written, the dead-letter rows as the
        report's `dead_letters`."""
        self.write()
        if self._placed:
            placed = pa.concat_tables(self._placed)
            self._placed = []
            limit = self.work.max_upsert_bytes
            if limit is not None and placed.nbytes > limit:
                self.report.too_large = True
            else:
                self.report.placed = _ipc(placed.to_batches(), placed.schema, "zstd")
        if self._dead_letters:
            rows = pa.concat_tables(self._dead_letters)
            self.report.dead_letters = _ipc(rows.to_batches(), BAD_RECORD_SCHEMA)
            self._dead_letters = []

    def write(self) -> None:
        """The rows held so far as data files of the table (none published yet); an
        upsert table's, as the report's `upsert_rows`, but for its first load's: each
        key's latest record of them written, its place kept for the report."""
        if not self._writes:
            if not self.report.too_large:
                self.report.upsert_rows = _ipc(self._good, self._chunks.output_schema)
            self._good = []
            return
        if self._good:
            rows = pa.Table.from_batches(self._good)
            self._good = []
            self._buffered = 0
            if self.work.credentials is not None:
                self._io_properties = self.work.credentials.current(self._io_properties)
            if self.work.first_load:
                assert self.work.key is not None
                written = write_latest(
                    self.work.metadata, self._io_properties, rows, self.work.key.columns,
                    self.work.cdc, len(self.report.data_files),
                )  # fmt: skip
                self.report.data_files.extend(written.data_files)
                self._placed.append(written.placed)
                return
            self.report.data_files.extend(
                write_data_files(self.work.metadata, self._io_properties, rows)
            )


def _samples(rows: pa.RecordBatch) -> list[dict[str, Any]]:
    """Failing rows as a check's result shows them: the table's columns and the record's
    Kafka partition and offset (pipeline/checks/run.py's samples)."""
    visible = [n for n in rows.schema.names if not is_hidden(n)]
    samples = rows.select([*visible, *SAMPLE_POSITIONS]).to_pylist()
    return [{SAMPLE_POSITIONS.get(k, k): v for k, v in sample.items()} for sample in samples]


def _check_dead_letters(
    rows: pa.RecordBatch, reasons: pa.Array, chunk: MessageChunk, run_id: str
) -> pa.Table:
    """The dead-letter rows of `rows` taken out by the checks named in `reasons`: each
    with its original record, found in `chunk` (the records the batch was decoded from)."""
    at = {(p, o): i for i, (p, o) in enumerate(zip(chunk.partitions, chunk.offsets, strict=True))}
    failed_at_us = int(time.time() * 1_000_000)
    out = []
    for partition, offset, name in zip(
        rows.column(SOURCE_PARTITION_COLUMN).to_pylist(),
        rows.column(SOURCE_OFFSET_COLUMN).to_pylist(),
        reasons.to_pylist(),
        strict=True,
    ):
        index = at.get((partition, offset))
        if index is None:
            raise ValueError(
                f"partition {partition} offset {offset}: a row taken out by check {name} is "
                "not among the records its batch was decoded from"
            )
        rejected = {
            "stage": CHECK_STAGE,
            "error_class": CHECK_ERROR_CLASS,
            "error_message": failed_message(name),
        }
        out.append(bad_record_row(chunk.message(index), rejected, run_id, failed_at_us))
    return pa.Table.from_pylist(out, schema=BAD_RECORD_SCHEMA)


def read_dead_letters(reports: Iterable[TableReport]) -> pa.Table | None:
    """The dead-letter rows of a table's reports as one table (None: none had any)."""
    return _concat_streams(r.dead_letters for r in reports)


def _ipc(
    batches: list[pa.RecordBatch], decoded: pa.Schema, compression: str | None = None
) -> bytes:
    """The batches as one Arrow IPC stream (the decoded schema's kept columns).
    `compression`: zstd for a first load's places (keys, positions, places: a quarter of
    their size, ~0.05 s a 700k rows; their transfer costs more than that)."""
    schema = batches[0].schema if batches else _kept(decoded)
    sink = pa.BufferOutputStream()
    options = pa.ipc.IpcWriteOptions(compression=compression)
    with pa.ipc.new_stream(sink, schema, options=options) as stream:
        for batch in batches:
            stream.write_batch(batch)
    return bytes(sink.getvalue().to_pybytes())


def _kept(decoded: pa.Schema) -> pa.Schema:
    return pa.schema(
        [f for f in decoded if not is_hidden(f.name) or f.name in UPSERT_SOURCE_COLUMNS]
    )


def read_upsert_rows(reports: Iterable[TableReport]) -> pa.Table | None:
    """The upsert rows of a table's reports as one table (None: no report held any)."""
    return _concat_streams(r.upsert_rows for r in reports)


def read_placed(reports: Sequence[TableReport]) -> tuple[pa.Table | None, list[Any]]:
    """A first load's places over the table's reports as one table, and the data files
    they point into (`PLACE_FILE` renumbered into that list)."""
    tables: list[pa.Table] = []
    data_files: list[Any] = []
    for report in reports:
        if report.placed is not None:
            placed = pa.ipc.open_stream(report.placed).read_all()
            if data_files:
                files = placed.column(PLACE_FILE)
                moved = pc.if_else(
                    pc.greater_equal(files, 0),
                    pc.add(files, pa.scalar(len(data_files), pa.int32())),
                    files,
                )
                placed = placed.set_column(
                    placed.schema.get_field_index(PLACE_FILE), PLACE_FILE, moved
                )
            tables.append(placed)
        data_files.extend(report.data_files)
    if not tables:
        return None, data_files
    return (pa.concat_tables(tables) if len(tables) > 1 else tables[0]), data_files


def _concat_streams(streams: Iterable[bytes | None]) -> pa.Table | None:
    tables = [pa.ipc.open_stream(s).read_all() for s in streams if s is not None]
    if not tables:
        return None
    return pa.concat_tables(tables) if len(tables) > 1 else tables[0]


def table_reports(
    kafka_conf: Mapping[str, str],
    works: Mapping[int, TableWork],
    decoder_factory: Callable[[Any], Any],
) -> Callable[[Iterable[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The mapInArrow function of a shared job: input rows are tagged ranges
    (SHARED_RANGES_SCHEMA), output rows one report per table (REPORT_SCHEMA)."""

    def run(range_batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        rows = [row for batch in range_batches for row in batch.to_pylist()]
        rows.sort(key=lambda r: (r["member"], r["topic"], r["partition"], r["start"]))
        topics = {r["topic"] for r in rows}
        with fewer_gc_passes(), RangeReader(kafka_conf, topics=topics) as reader:
            for member, ranges in groupby(rows, key=lambda r: int(r["member"])):
                table = _TableRun(works[member], decoder_factory)
                try:
                    for r in ranges:
                        offset_range = OffsetRange(r["topic"], r["partition"], r["start"], r["end"])
                        table.read(reader, offset_range)
                    table.finish()
                    crash_session_point("shared_mid_write")  # tests: files written, none published
                except (TableflowError, ValueError, OSError, pa.ArrowException) as exc:
                    table.report = TableReport(member, error=f"{type(exc).__name__}: {exc}")
                yield pa.RecordBatch.from_pydict(
                    {"member": [member], "report": [table.report.encode()]},
                    schema=pa.schema([("member", pa.int32()), ("report", pa.binary())]),
                )

    return run
