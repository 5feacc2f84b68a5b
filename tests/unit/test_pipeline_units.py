"""The pipeline's pure parts: stage specs, the registry, the desired shape, and the
in-task chunk decoder (real decoder and serializers, no Spark)."""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa
import pytest

from tableflow_core.ingest import stages
from tableflow_core.ingest.bad_records import (
    BAD_RECORD_SCHEMA,
    SOURCE_OFFSET_COLUMN,
    SOURCE_PARTITION_COLUMN,
)
from tableflow_core.ingest.columns import BAD_RECORD_COLUMN, TOMBSTONE_COLUMN
from tableflow_core.kafka.messages import KafkaMessage
from tableflow_core.pipeline.decode_chunks import ChunkDecoder, KeySpec
from tableflow_core.pipeline.registry import RUNNER_MODULES, STAGE_RUNNERS, runner_for
from tableflow_core.pipeline.runners.write_upsert import (
    BROADCAST_RECORDS,
    broadcasts,
    later,
    merge_sql,
)
from tableflow_core.schemas.decoding import DecoderSpec, build_decoder, serialize_schema
from tableflow_core.schemas.formats import FormatSpec

TABLE = pa.schema([pa.field("id", pa.int64()), pa.field("name", pa.string())])


def plain_json_decoder(schema: pa.Schema) -> Any:
    value = FormatSpec(
        format="json",
        json_columns=(
            {"name": "id", "type": "long"},  # type: ignore[arg-type]
            {"name": "name", "type": "string"},  # type: ignore[arg-type]
        ),
    )
    return build_decoder(DecoderSpec("t", value, None, (), None, serialize_schema(schema)))


def message(offset: int, key: bytes | None, value: dict[str, Any] | bytes | None) -> KafkaMessage:
    payload = json.dumps(value).encode() if isinstance(value, dict) else value
    return KafkaMessage("t", 1, offset, 1_700_000_000_000, key, payload, (("h", b"v"),))


def rows(batches: list[pa.RecordBatch]) -> list[dict[str, Any]]:
    return pa.Table.from_batches(batches).to_pylist() if batches else []


def test_every_stage_kind_has_a_runner_module() -> None:
    kinds = [
        stages.ReadRanges(),
        stages.Decode(value_format="avro"),
        stages.Transform(steps=(stages.StepLine(kind="filter", text="filter where x > 0"),)),
        stages.Check(checks=(stages.StepLine(kind="not_null", text="check not_null(x)"),)),
        stages.RouteBadRecords(),
        stages.Write(),
        stages.Publish(),
    ]
    for spec in kinds:
        assert runner_for(spec) is STAGE_RUNNERS[type(spec)]
    assert len(RUNNER_MODULES) == len(kinds)


def test_append_chunk_carries_position_and_bad_records_as_data() -> None:
    chunks = ChunkDecoder(plain_json_decoder(TABLE), TABLE, None, "run1")
    out = list(
        chunks.decode(
            [
                message(10, None, {"id": 1, "name": "a"}),
                message(11, None, b"{not json"),
                message(12, None, None),  # tombstone: counted by decode, never written
                message(13, None, {"id": 2, "name": "b"}),
            ]
        )
    )
    assert all(b.schema == chunks.output_schema for b in out)
    good = [r for r in rows(out) if r[BAD_RECORD_COLUMN] is None and not r[TOMBSTONE_COLUMN]]
    (tombstone,) = [r for r in rows(out) if r[TOMBSTONE_COLUMN]]
    assert (tombstone["id"], tombstone[SOURCE_OFFSET_COLUMN]) == (None, 12)
    bad = [r for r in rows(out) if r[BAD_RECORD_COLUMN] is not None]
    assert [(r["id"], r[SOURCE_PARTITION_COLUMN], r[SOURCE_OFFSET_COLUMN]) for r in good] == [
        (1, 1, 10),
        (2, 1, 13),
    ]
    (record,) = [r[BAD_RECORD_COLUMN] for r in bad]
    assert set(record) == set(BAD_RECORD_SCHEMA.names)
    assert (record["source_topic"], record["source_partition"], record["source_offset"]) == (
        "t",
        1,
        11,
    )
    assert record["value"] == b"{not json" and record["stage"] == "decode"
    assert record["headers"] == [{"key": "h", "value": b"v"}] and record["run_id"] == "run1"
    assert bad[0]["id"] is None and bad[0][SOURCE_OFFSET_COLUMN] == 11


def decoded_by_offset(chunks: ChunkDecoder, *messages: KafkaMessage) -> dict[int, dict[str, Any]]:
    """The rows `chunks` decodes from `messages`, by source offset."""
    return {r[SOURCE_OFFSET_COLUMN]: r for r in rows(list(chunks.decode(list(messages))))}


def test_upsert_chunk_key_rows_tombstones_and_value_precedence() -> None:
    table = TABLE.append(pa.field("order_key", pa.string()))
    key = KeySpec(FormatSpec(format="string"), ("order_key",), None)
    chunks = ChunkDecoder(plain_json_decoder(table), table, key, "run2")
    by_offset = decoded_by_offset(
        chunks,
        message(0, b"k1", {"id": 1, "name": "a"}),
        message(1, b"k1", None),  # tombstone: a key row
        message(2, None, {"id": 3, "name": "c"}),  # no key: bad record
    )
    assert by_offset[0]["order_key"] == "k1" and by_offset[0][TOMBSTONE_COLUMN] is False
    assert by_offset[1]["order_key"] == "k1" and by_offset[1][TOMBSTONE_COLUMN] is True
    assert by_offset[1]["id"] is None
    assert "needs a key" in by_offset[2][BAD_RECORD_COLUMN]["error_message"]

    # the value carries the key column: it must agree with the record's Kafka key, else
    # the row would be stored under a key no tombstone of the record's key deletes
    valued = TABLE
    key_id = KeySpec(FormatSpec(format="string"), ("name",), None)
    chunks = ChunkDecoder(plain_json_decoder(valued), valued, key_id, "run3")
    by_offset = decoded_by_offset(
        chunks,
        message(5, b"same", {"id": 1, "name": "same"}),
        message(6, b"from-key", {"id": 2, "name": "from-value"}),
        message(7, b"from-key", {"id": 3}),  # no key column in the value
    )
    assert by_offset[5]["name"] == "same" and by_offset[5][BAD_RECORD_COLUMN] is None
    assert by_offset[7]["name"] == "from-key" and by_offset[7][BAD_RECORD_COLUMN] is None
    mismatch = by_offset[6][BAD_RECORD_COLUMN]
    assert mismatch["error_class"] == "KeyMismatchError"
    assert "'from-value' in the value, 'from-key' in the key" in mismatch["error_message"]
    (tomb,) = rows(list(chunks.decode([message(8, b"from-key", None)])))
    assert tomb["name"] == "from-key" and tomb[TOMBSTONE_COLUMN] is True

    # a masked key column: the reason never quotes its values
    masked = ChunkDecoder(
        plain_json_decoder(valued), valued, key_id, "run4", masked=frozenset({"name"})
    )
    (row,) = rows(list(masked.decode([message(9, b"k@x.com", {"id": 4, "name": "v@x.com"})])))
    reason = row[BAD_RECORD_COLUMN]["error_message"]
    assert "masked column" in reason and "@x.com" not in reason


def test_merge_sql_deletes_on_tombstones_and_quotes_names() -> None:
    sql = merge_sql("`c`.`ns`.`t`.`branch_x`", "v", ["id", "we`ird"], ("id",))
    assert "ON t.`id` = s.`id`" in sql
    # a record is applied only when it comes after the row's own record (its position)
    newer = later("s", "t")
    assert "t.`_kafka_offset` IS NULL OR" in newer
    assert "named_struct('t', coalesce(s.`_kafka_timestamp`" in newer
    assert "'p', s.`_kafka_partition`, 'o', s.`_kafka_offset`" in newer
    assert f"WHEN MATCHED AND s.`__tf_tombstone` AND {newer} THEN DELETE" in sql
    assert f"WHEN MATCHED AND NOT s.`__tf_tombstone` AND {newer} THEN UPDATE" in sql
    assert "WHEN NOT MATCHED AND NOT s.`__tf_tombstone` THEN INSERT (`id`, `we``ird`)" in sql


def test_a_matched_only_merge_has_no_insert_and_batches_broadcast_up_to_the_limit() -> None:
    sql = merge_sql("`c`.`ns`.`t`.`branch_x`", "v", ["id", "name"], ("id",), insert=False)
    assert "WHEN MATCHED AND s.`__tf_tombstone`" in sql and "THEN UPDATE SET" in sql
    assert "NOT MATCHED" not in sql and "INSERT" not in sql
    assert broadcasts(100_000) and broadcasts(BROADCAST_RECORDS)
    assert not broadcasts(BROADCAST_RECORDS + 1)


@pytest.mark.parametrize("mode", ["append", "upsert"])
def test_stage_specs_round_trip_through_json(mode: str) -> None:
    from pydantic import TypeAdapter

    adapter = TypeAdapter(tuple[stages.Stage, ...])
    specs = (
        stages.ReadRanges(),
        stages.Decode(value_format="avro", key_format="string"),
        stages.RouteBadRecords(on_error="fail"),
        stages.Write(mode=mode, key_columns=("id",) if mode == "upsert" else ()),  # type: ignore[arg-type]
        stages.Publish(),
    )
    assert adapter.validate_json(adapter.dump_json(specs)) == specs


def test_small_ranges_share_tasks_and_large_ones_get_their_own() -> None:
    from tableflow_core.kafka.offsets import OffsetRange
    from tableflow_core.pipeline.runners.read_ranges import task_groups

    small = [OffsetRange("t", p, 0, 500) for p in range(4)]
    assert [len(g) for g in task_groups(small)] == [4]  # 2,000 records: one task
    large = [OffsetRange("t", p, 0, 250_000) for p in range(4)]
    assert [len(g) for g in task_groups(large)] == [1, 1, 1, 1]
    mixed = [OffsetRange("t", 0, 0, 90_000), *(OffsetRange("t", p, 0, 5_000) for p in (1, 2, 3))]
    groups = task_groups(mixed)  # 105k records: 3 tasks, the big range alone
    assert len(groups) == 3
    assert [OffsetRange("t", 0, 0, 90_000)] in groups
    assert sorted(r.partition for g in groups for r in g) == [0, 1, 2, 3]
    assert task_groups([]) == []


def test_run_stages_times_each_stage_by_kind() -> None:
    from tableflow_core.pipeline import registry
    from tableflow_core.pipeline.batch import Batch, StageContext

    seen: list[str] = []

    def runner(context: Any, spec: Any, batch: Batch) -> Batch:
        seen.append(spec.kind)
        context.timings["part"] = 0.5  # a runner may time parts of its own
        return batch.evolve(snapshot_properties={**batch.snapshot_properties, spec.kind: "1"})

    saved = dict(registry.STAGE_RUNNERS)
    registry.STAGE_RUNNERS.update({stages.ReadRanges: runner, stages.Publish: runner})
    try:
        context = StageContext(
            spark=None,  # type: ignore[arg-type]
            spec=None,  # type: ignore[arg-type]
            run_id="r",
            branch="b",
            ranges=(),
            offsets_after={},
            expected_start={},
            kafka_conf={},
            timings={"start_run": 0.25},
        )
        batch = registry.run_stages(context, (stages.ReadRanges(), stages.Publish()), Batch())
    finally:
        registry.STAGE_RUNNERS.clear()
        registry.STAGE_RUNNERS.update(saved)
    assert seen == ["read_ranges", "publish"]
    assert batch.snapshot_properties == {"read_ranges": "1", "publish": "1"}
    assert set(context.timings) == {"start_run", "part", "read_ranges", "publish"}
    assert all(context.timings[k] >= 0 for k in ("read_ranges", "publish"))
