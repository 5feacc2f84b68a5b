"""Publisher per catalog config type (`targets.<t>.publish_catalogs.<name>.type`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tableflow_core.publish.base import CatalogPublisher
from tableflow_core.publish.errors import PublishError
from tableflow_core.publish.glue import GluePublisher
from tableflow_core.publish.nessie import NessiePublisher
from tableflow_core.publish.rest import RestPublisher
from tableflow_core.publish.sql import SqlPublisher

PUBLISHERS: dict[str, Callable[[str, Any], CatalogPublisher]] = {
    "rest": RestPublisher,
    "sql": SqlPublisher,
    "glue": GluePublisher,
    "nessie": NessiePublisher,
}


def open_publisher(name: str, config: Any) -> CatalogPublisher:
    factory = PUBLISHERS.get(config.type)
    if factory is None:
        raise PublishError(
            f"publish catalog {name}: cannot publish to a {config.type} catalog "
            f"(supported: {', '.join(sorted(PUBLISHERS))})"
        )
    return factory(name, config)
