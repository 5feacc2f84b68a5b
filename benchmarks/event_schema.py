"""The 10-field Avro record both throughput benchmarks (decode.py, ingest.py) measure."""

from repo_root import ROOT  # noqa: F401  (tests.avro_records below)

from tests.avro_records import avro_record, nullable

SCHEMA = avro_record(
    "Event",
    id="long",
    user="string",
    amount="double",
    qty="int",
    active="boolean",
    at={"type": "long", "logicalType": "timestamp-millis"},
    city=nullable("string"),
    score="float",
    kind={"type": "enum", "name": "Kind", "symbols": ["A", "B", "C"]},
    day={"type": "int", "logicalType": "date"},
)
