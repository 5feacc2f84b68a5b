"""The table pipeline: per table, typed stages from Kafka ranges to a published commit."""
