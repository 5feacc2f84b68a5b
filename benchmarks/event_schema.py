"""The 10-field Avro record both throughput benchmarks (decode.py, ingest.py) measure."""

from repo_root import ROOT  # noqa: F401  (tests.avro_records below)

from tests.avro_records import EVENT_FIELDS, avro_record

SCHEMA = avro_record("Event", **EVENT_FIELDS)
