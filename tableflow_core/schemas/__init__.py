"""Schema resolution, record decoding and the registry -> Arrow -> Iceberg type mapping.

Modules:
- `formats`: FormatSpec (how a topic's keys/values are encoded) and metadata columns.
- `registry`: RegistrySettings and the per-process Schema Registry client cache.
- `wire_format`: the Confluent framing (magic byte, schema id, Protobuf message indexes).
- `avro_types`, `json_schema_types`, `protobuf_types`, `plain_json`: one module per
  format, each mapping its schema language to Arrow and its values to Arrow-ready Python.
- `arrow_values`: the "storage" representation decoders fill before one vectorised cast.
- `resolve`: `resolve_schema` (used by `plan` and `apply`, no JVM).
- `decoding`: `build_decoder` -> RecordDecoder turning Kafka messages into RecordBatches.
- `changes`: `SchemaChange`, one in-place schema change (also what plan actions carry).
- `evolution`: `diff_schemas` and `iceberg_schema_for`.
- `write_schema`: `table_write_schema`, the union of the resolved schema and the table's
  columns that plan and apply both write with (columns a writer dropped are kept).

See docs/type-mapping.md for the type mapping table.
"""
