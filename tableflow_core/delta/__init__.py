"""Delta Lake over the Iceberg table's own Parquet files (no data copy).

`sync_delta_log(table)` writes `_delta_log/` in the Iceberg table's location so that
Delta readers (deltalake, DuckDB's delta extension, Spark with delta) see exactly the
rows of the Iceberg table's current snapshot. `delta_refusal(table)` says, without
I/O, why a table cannot have the `delta` format (for the planner). See docs/delta.md.
"""

from tableflow_core.delta.errors import DeltaSyncError
from tableflow_core.delta.refusal import delta_refusal
from tableflow_core.delta.storage import storage_options_of
from tableflow_core.delta.sync import (
    APP_ID,
    SNAPSHOT_ID_KEY,
    DeltaSyncResult,
    mirrored_snapshot_id,
    sync_delta_log,
)

__all__ = [
    "APP_ID",
    "SNAPSHOT_ID_KEY",
    "DeltaSyncError",
    "DeltaSyncResult",
    "delta_refusal",
    "mirrored_snapshot_id",
    "storage_options_of",
    "sync_delta_log",
]
