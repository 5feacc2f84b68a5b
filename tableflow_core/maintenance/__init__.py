"""Table maintenance: what is due (pure) and running it through Spark + Iceberg procedures.

    due = maintenance_due(table, table_state, now)          # plan renders [d.describe() ...]
    report = run_maintenance(spark, "cat.ns.table", due)     # under the table's lock

Committed offsets survive every operation (see `offsets.py`); when each operation
last ran is kept in table properties (see `last_run.py`).
"""

from tableflow_core.maintenance.operations import MaintenanceError
from tableflow_core.maintenance.report import MaintenanceReport, OperationResult
from tableflow_core.maintenance.run import run_maintenance
from tableflow_core.maintenance.schedule import DueOperation, maintenance_due

__all__ = [
    "DueOperation",
    "MaintenanceError",
    "MaintenanceReport",
    "OperationResult",
    "maintenance_due",
    "run_maintenance",
]
