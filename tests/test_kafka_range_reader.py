"""Reading offset ranges with holes (transaction markers, aborted records) from a real broker."""

from __future__ import annotations

from confluent_kafka import Producer

from tableflow_core.kafka.admin import get_watermarks
from tableflow_core.kafka.offsets import OffsetRange
from tableflow_core.kafka.range_reader import read_range
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
