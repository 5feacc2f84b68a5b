"""What one table's ingestion run needs to know (IngestSpec and friends)."""
