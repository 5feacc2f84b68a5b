"""Reading Kafka: messages, offset planning, broker metadata and range readers."""
