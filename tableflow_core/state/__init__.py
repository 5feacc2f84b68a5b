"""Ingestion state kept in the Iceberg table itself (committed offsets)."""
