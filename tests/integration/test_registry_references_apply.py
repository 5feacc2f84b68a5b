"""Schemas with references, produced with confluent-kafka's serializers and applied by
tableflow (plan + apply) through Apicurio Registry 3.3.3 and tableflow's dev registry:
Avro (a record from another subject, which takes an enum from a third), JSON Schema (a
`$ref` to another subject's `$id`) and Protobuf (a file importing another). Each table
is compared, row by row, with the values the test produced (docs/environment.md, Apicurio).
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.schema_registry import Schema, SchemaReference, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from tests.avro_records import avro_record, nullable
from tests.fixtures.apicurio import CLIENT_TIMEOUT_S
from tests.fixtures.apply_env import Env, apply
from tests.fixtures.catalog import unique_namespace
from tests.fixtures.kafka_server import ApacheKafka
from tests.fixtures.lake import Lake
from tests.fixtures.projects import StackProject, project_writer
from tests.protobuf_orders import FIELD, order_importing_address

pytestmark = pytest.mark.slow

COUNT = 12


@pytest.fixture(params=["dev", "apicurio"])
def registry_url(request: pytest.FixtureRequest) -> str:
    name = "apicurio_registry" if request.param == "apicurio" else "schema_registry"
    return str(request.getfixturevalue(name).url)


@dataclass
class References:
    """A test's registry client and unique tag, and the way from produced values to rows
    read back from a table applied by tableflow."""

    client: SchemaRegistryClient
    tag: str
    kafka: ApacheKafka
    lake: Lake
    spark: Any
    write: StackProject

    def produce(self, topic: str, payloads: list[bytes]) -> None:
        self.kafka.create_topic(topic)
        producer = Producer(self.kafka.producer_config(**{"linger.ms": 0}))
        for payload in payloads:
            producer.produce(topic, value=payload)
        assert producer.flush(10) == 0

    def applied_rows(self, topic: str, value_format: str) -> list[dict[str, Any]]:
        """`topic`'s values in `value_format`, applied (all COUNT records land) and read back."""
        root = self.write(namespace="x", tables=[], name=f"refs-{topic}")
        env = Env(root, topic, unique_namespace("refs"), self.lake.server, self.write)
        env.configure(value={"format": value_format}, metadata_columns=["offset"])
        assert apply(self.spark, env).records_written == COUNT
        rows = env.pyiceberg_table().scan().to_arrow().sort_by("_kafka_offset").to_pylist()
        for row in rows:
            row.pop("_kafka_offset")
        return rows


@pytest.fixture
def refs(
    registry_url: str, kafka_broker: ApacheKafka, lake: Lake, spark: Any, tmp_path: Path
) -> References:
    client = SchemaRegistryClient({"url": registry_url, "timeout": CLIENT_TIMEOUT_S})
    write = project_writer(tmp_path, kafka_broker, registry_url, lake)
    return References(client, uuid.uuid4().hex[:8], kafka_broker, lake, spark, write)


def test_avro_with_nested_references(refs: References) -> None:
    tag, client = refs.tag, refs.client
    country = {"type": "enum", "name": "Country", "namespace": "geo", "symbols": ["NL", "DE"]}
    address = avro_record(
        "Address", namespace="shop", street="string", country="geo.Country", zip=nullable("string")
    )
    order = avro_record(
        "Order",
        namespace="shop",
        id="long",
        ship_to="Address",  # namespace-relative: shop.Address
        bill_to=nullable("shop.Address"),
    )
    client.register_schema(f"geo.Country-{tag}", Schema(json.dumps(country), "AVRO"))
    address_refs = [SchemaReference("geo.Country", f"geo.Country-{tag}", 1)]
    client.register_schema(f"shop.Address-{tag}", Schema(json.dumps(address), "AVRO", address_refs))
    order_refs = [SchemaReference("shop.Address", f"shop.Address-{tag}", 1)]
    topic = f"aorders-{tag}"
    serializer = AvroSerializer(client, Schema(json.dumps(order), "AVRO", order_refs))
    context = SerializationContext(topic, MessageField.VALUE)
    model = [
        {
            "id": i,
            "ship_to": {"street": f"s{i}", "country": ["NL", "DE"][i % 2], "zip": None if i % 3 else f"z{i}"},
            "bill_to": None if i % 2 else {"street": f"b{i}", "country": "DE", "zip": None},
        }
        for i in range(COUNT)
    ]  # fmt: skip
    refs.produce(topic, [serializer(v, context) for v in model])

    assert refs.applied_rows(topic, "avro") == model


def test_json_schema_with_a_reference(refs: References) -> None:
    tag, client = refs.tag, refs.client
    address = {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "$id": f"https://example.com/{tag}/address.json",
        "type": "object",
        "properties": {
            "street": {"type": "string"},
            "zip": {"type": "string"},
            "geo": {"$ref": "#/definitions/point"},
        },
        "required": ["street"],
        "definitions": {
            "point": {
                "type": "object",
                "properties": {"lat": {"type": "number"}, "lon": {"type": "number"}},
            }
        },
    }
    order = {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "type": "object",
        "properties": {
            "id": {"type": "integer"},
            "ship_to": {"$ref": f"https://example.com/{tag}/address.json"},
        },
        "required": ["id", "ship_to"],
    }
    subject = f"address.json-{tag}"
    client.register_schema(subject, Schema(json.dumps(address), "JSON"))
    references = [SchemaReference(f"https://example.com/{tag}/address.json", subject, 1)]
    topic = f"jorders-{tag}"
    serializer = JSONSerializer(Schema(json.dumps(order), "JSON", references), client)
    context = SerializationContext(topic, MessageField.VALUE)
    produced = [
        {"id": i, "ship_to": {"street": f"s{i}", **({"zip": f"z{i}"} if i % 2 else {}), **({"geo": {"lat": i / 4, "lon": -i / 8}} if i % 3 == 0 else {})}}
        for i in range(COUNT)
    ]  # fmt: skip
    refs.produce(topic, [serializer(v, context) for v in produced])

    model = [
        {
            "id": v["id"],
            "ship_to": {
                "street": v["ship_to"]["street"],
                "zip": v["ship_to"].get("zip"),
                "geo": v["ship_to"].get("geo"),
            },
        }
        for v in produced
    ]
    assert refs.applied_rows(topic, "json_schema") == model


def test_protobuf_with_an_import(refs: References) -> None:
    tag, client = refs.tag, refs.client
    order_class, address_class, address_file = order_importing_address(
        tag, FIELD.TYPE_INT64, floor=True, stops=True
    )
    serializer = ProtobufSerializer(order_class, client, {"use.deprecated.format": False})
    topic = f"porders-{tag}"
    context = SerializationContext(topic, MessageField.VALUE)
    messages = [
        order_class(
            id=i,
            ship_to=address_class(street=f"s{i}", floor=i),
            stops=[address_class(street=f"stop{i}-{j}", floor=j) for j in range(i % 3)],
        )
        for i in range(COUNT)
    ]
    refs.produce(topic, [serializer(m, context) for m in messages])
    latest = client.get_latest_version(f"{topic}-value")
    assert [r.name for r in latest.schema.references] == [address_file]

    model = [
        {
            "id": m.id,
            "ship_to": {"street": m.ship_to.street, "floor": m.ship_to.floor},
            "stops": [{"street": s.street, "floor": s.floor} for s in m.stops],
        }
        for m in messages
    ]
    assert refs.applied_rows(topic, "protobuf") == model
