"""Bad records: skip, dead-letter queues, accounting and suspension (issue #11).

Entry points (import them from their modules; this package imports nothing heavy):
- `originals.fetch_originals(spark, rejected_df, topic, kafka_conf, run_id)`: rejected
  rows (REJECTED_ROW_SCHEMA) -> BAD_RECORD_SCHEMA rows with their original bytes.
- `sinks.route_bad_records(bad_df, on_error, dlq, SinkContext(...))`: fail / skip /
  dead-letter to a Kafka topic or an Iceberg table; returns counts per partition.
- `table_plan.dlq_table_actions(...)` (pure, for plan) and
  `sinks.iceberg_table.create_dlq_table(...)` (for apply).
- `topic_plan.dlq_topic_actions(...)` (pure, for plan: a missing Kafka dead-letter
  topic), `topics.topic_partitions(...)` (plan's broker read) and
  `topics.create_dlq_topic(...)` (for apply).
- `accounting.RunAccounting`: read = written + filtered + skipped + dead_lettered +
  tombstones per partition, its snapshot-summary and run_results encodings, `check()`.
- `suspension`: `suspend` / `clear_suspension` (catalog table property) and
  `describe_suspension(properties)` (pure, for plan).
"""
