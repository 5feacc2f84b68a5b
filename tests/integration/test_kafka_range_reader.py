"""Reading offset ranges with holes (transaction markers, aborted records) from a real broker."""

from __future__ import annotations

import time

from confluent_kafka import Producer

from tableflow_core.kafka.admin import get_watermarks
from tableflow_core.kafka.messages import KafkaMessage, MessageChunk
from tableflow_core.kafka.offsets import OffsetRange
from tableflow_core.kafka.range_reader import RangeReader, read_range
from tests.fixtures.stack import KafkaBroker, unique_name


def test_ranges_end_on_position_not_on_message_count(kafka_broker: KafkaBroker) -> None:
    topic = kafka_broker.create_topic(unique_name("txn"), 1)
    producer = Producer(
        {"bootstrap.servers": kafka_broker.bootstrap, "transactional.id": unique_name("tx")}
    )
    producer.init_transactions(10)
    for values, commit in (([b"a", b"b", b"c"], True), ([b"x", b"y"], False), ([b"d"], True)):
        producer.begin_transaction()
        for value in values:
            producer.produce(topic, value, partition=0)
        producer.flush(10)
        (producer.commit_transaction if commit else producer.abort_transaction)(10)
    kafka_broker.stable_offsets(topic)  # the last marker is written after the commit returns
    conf = {"bootstrap.servers": kafka_broker.bootstrap}
    low, high = get_watermarks(conf, topic)[0]
    assert (low, high) == (0, 9)  # 6 records (2 aborted) + 3 transaction markers
    messages = [
        m for chunk in read_range(conf, OffsetRange(topic, 0, 0, high), chunk_size=2) for m in chunk
    ]
    assert [m.value for m in messages] == [b"a", b"b", b"c", b"d"]  # aborted x, y skipped
    # a range ending inside the log stops there; an empty range yields nothing
    head = [m.value for c in read_range(conf, OffsetRange(topic, 0, 1, 3)) for m in c]
    assert head == [b"b", b"c"]
    assert list(read_range(conf, OffsetRange(topic, 0, 5, 5))) == []


def test_chunks_carry_every_field_as_columns(kafka_broker: KafkaBroker) -> None:
    topic = kafka_broker.create_topic(unique_name("fields"), 2)
    producer = Producer(kafka_broker.producer_config())
    # Recent: the test broker checks retention every second, and records a week old (the
    # default retention) are deleted at once, the range then out of range.
    at = int(time.time() * 1000) - 60_000
    for i in range(7):
        producer.produce(
            topic,
            None if i == 3 else f"v{i}".encode(),  # offset 3: a tombstone
            key=None if i % 2 else f"k{i}".encode(),
            partition=1,
            timestamp=at + i,
            headers=[("h", f"x{i}".encode()), ("n", None)] if i % 3 == 0 else None,
        )
    producer.flush(10)
    conf = {"bootstrap.servers": kafka_broker.bootstrap}
    # As plan does: read up to the high watermark the broker reports.
    deadline = time.monotonic() + 10
    while get_watermarks(conf, topic)[1][1] < 7 and time.monotonic() < deadline:
        time.sleep(0.05)
    chunks = list(read_range(conf, OffsetRange(topic, 1, 1, 7), chunk_size=4))
    assert [type(c) for c in chunks] == [MessageChunk, MessageChunk]
    assert [len(c) for c in chunks] == [4, 2]  # chunk_size bounds each chunk
    first = chunks[0]
    assert first.topics == [topic] * 4 and first.partitions == [1] * 4
    assert first.offsets == [1, 2, 3, 4]
    assert first.timestamps_ms == [at + 1, at + 2, at + 3, at + 4]
    assert first.keys == [None, b"k2", None, b"k4"]
    assert first.values == [b"v1", b"v2", None, b"v4"]
    assert [list(h) if h else None for h in first.headers] == [
        None,
        None,
        [("h", b"x3"), ("n", None)],
        None,
    ]
    messages = [m for c in chunks for m in c]
    assert messages[2] == KafkaMessage(topic, 1, 3, at + 3, None, None, (("h", b"x3"), ("n", None)))
    assert [m.offset for m in messages] == [1, 2, 3, 4, 5, 6]


def test_one_reader_reads_many_topics_ranges_each_exactly(kafka_broker: KafkaBroker) -> None:
    """A shared job's task: one RangeReader over many small topics' ranges, one after the
    other, and a partition read again (two tables of one topic): every range yields
    exactly its own messages, in offset order, and no topic waits for its metadata."""
    topics = [kafka_broker.create_topic(unique_name(f"many-{i}"), 2) for i in range(12)]
    producer = Producer({"bootstrap.servers": kafka_broker.bootstrap})
    for topic in topics:
        for n in range(10):
            producer.produce(topic, f"{topic}/{n % 2}/{n // 2}".encode(), partition=n % 2)
    producer.flush(30)
    conf = {"bootstrap.servers": kafka_broker.bootstrap}
    ranges = [OffsetRange(t, p, 0, 5) for t in topics for p in (0, 1)]
    ranges += [OffsetRange(topics[0], 1, 2, 4)]  # read again, part of it
    started = time.monotonic()
    with RangeReader(conf, topics=topics) as reader:
        for r in ranges:
            got = [(m.topic, m.partition, m.offset, m.value) for c in reader.read(r) for m in c]
            assert got == [
                (r.topic, r.partition, o, f"{r.topic}/{r.partition}/{o}".encode())
                for o in range(r.start, r.end)
            ]
    # ~1 s a topic when librdkafka had to find each new topic's leader on its own
    assert time.monotonic() - started < 0.5 * len(topics), time.monotonic() - started
