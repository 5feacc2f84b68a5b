"""Bad records: skip, dead-letter queues, accounting and suspension (issue #11).

Entry points (import them from their modules; this package imports nothing heavy):
- `originals.fetch_originals(spark, rejected_df, topic, kafka_conf, run_id)`: rejected
  rows (REJECTED_ROW_SCHEMA) -> BAD_RECORD_SCHEMA rows with their original bytes.
- `sinks.route_bad_records(bad_df, on_error, dlq, SinkContext(...))`: fail / skip /
  dead-letter to a Kafka topic or an Iceberg table; returns counts per partition.
- `sinks.iceberg_table.create_dlq_table(...)`: what apply runs for the plan's
  create-dead-letter-table action (the plan builds it: `plan/dead_letter_table.py`).
- `topics.topic_partitions(...)` (plan's broker read) and `topics.create_dlq_topic(...)`
  (apply, for the plan's create-topic action, `plan/dead_letter_topic.py`).
- `accounting.RunAccounting`: read = written + filtered + skipped + dead_lettered +
  tombstones per partition, its snapshot-summary and run_results encodings, `check()`.
- `suspension`: `suspend` / `clear_suspension` (catalog table property) and
  `describe_suspension(properties)` (pure, for plan).
"""
