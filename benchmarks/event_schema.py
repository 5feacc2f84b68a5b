"""The 10-field Avro record both throughput benchmarks (decode.py, ingest.py) measure."""

SCHEMA = {
    "type": "record",
    "name": "Event",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "user", "type": "string"},
        {"name": "amount", "type": "double"},
        {"name": "qty", "type": "int"},
        {"name": "active", "type": "boolean"},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "city", "type": ["null", "string"], "default": None},
        {"name": "score", "type": "float"},
        {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["A", "B", "C"]}},
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
    ],
}
