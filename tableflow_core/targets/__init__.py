"""Adapters from a target's config to live connections (Kafka, registry, catalog)."""

from tableflow_core.targets.catalog import CatalogHandle, CatalogUnavailableError, open_catalog
from tableflow_core.targets.kafka import kafka_consumer_config
from tableflow_core.targets.registry import registry_settings

__all__ = [
    "CatalogHandle",
    "CatalogUnavailableError",
    "kafka_consumer_config",
    "open_catalog",
    "registry_settings",
]
