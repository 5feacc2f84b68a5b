"""Target schema registry settings -> DECODING's RegistrySettings."""

from __future__ import annotations

from tableflow_core.config.models.targets import SchemaRegistryConnection
from tableflow_core.schemas.registry import RegistrySettings


def registry_settings(registry: SchemaRegistryConnection | None) -> RegistrySettings | None:
    if registry is None:
        return None
    auth = registry.basic_auth
    return RegistrySettings(
        url=registry.url,
        basic_auth_user=auth.username if auth else None,
        basic_auth_password=auth.password if auth else None,
    )
