"""Publishing a table to other catalogs: its metadata pointer registered, never its data copied.

    pointers = read_published_pointers(project, table)            # I/O
    states = published_state(table, current_location, pointers)   # pure: missing / stale / current
    result = publish_table(project, table, current_location)      # registers or updates each

One module per catalog type (`rest`, `sql`, `glue`), dispatched by `registry.PUBLISHERS`.
"""

from tableflow_core.publish.errors import PublishConflictError, PublishError
from tableflow_core.publish.publish import (
    PublishedEntry,
    PublishResult,
    publish_table,
    read_published_pointers,
)
from tableflow_core.publish.state import PointerState, published_state

__all__ = [
    "PointerState",
    "PublishConflictError",
    "PublishError",
    "PublishResult",
    "PublishedEntry",
    "publish_table",
    "published_state",
    "read_published_pointers",
]
