"""The one place that says which configured features are not built yet.

Config parses and validates every key; the planner refuses the ones listed here with
"not supported yet" and the key's file:line (`plan/capabilities.py`), so nothing is
silently ignored, and the configuration reference marks them (`config/reference.py`).
When a feature lands, its issue deletes its entry below (and nothing else).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tableflow_core.config.project import Table


@dataclass(frozen=True)
class TableGate:
    key: str
    applies: Callable[[Table], bool]
    what: str


TABLE_GATES: tuple[TableGate, ...] = ()

# Catalog types `apply` cannot write to from Spark yet (plan can read them with pyiceberg).
UNSUPPORTED_SPARK_CATALOGS: frozenset[str] = frozenset({"glue", "hive"})
