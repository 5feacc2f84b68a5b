"""A table's transforms and checks compiled against its decoded schema (pure, no Spark).

`plan` compiles them to validate the table (compile errors are plan blockers at
file:line), to show the output schema and one line per step, and puts the result in the
ingest action's spec (`ingest/compiled.py`): apply runs what plan compiled.
"""

from __future__ import annotations

import pyarrow as pa

from tableflow_core.checks import compile_checks
from tableflow_core.config.project import Table
from tableflow_core.ingest.compiled import CompiledTable
from tableflow_core.transforms.compile import CompiledTransforms, compile_transforms
from tableflow_core.transforms.locations import table_locator

__all__ = ["CompiledTable", "compile_table", "compile_table_transforms"]


def compile_table_transforms(table: Table, decoded_schema: pa.Schema) -> CompiledTransforms:
    """Raises ConfigError naming file:line of every transform that cannot run."""
    return compile_transforms(table.transforms, decoded_schema, table_locator(table))


def compile_table(table: Table, decoded_schema: pa.Schema) -> CompiledTable:
    """Transforms over the decoded schema, checks over the schema after them.

    Raises ConfigError (the transforms' problems first: checks are only compiled over a
    valid output schema)."""
    transforms = compile_table_transforms(table, decoded_schema)
    checks = compile_checks(
        table.checks,
        transforms.output_schema,
        table_locator(table),
        default_on_failure=table.on_error,
        dead_letter_configured=table.dlq is not None,
    )
    return CompiledTable(transforms=transforms, checks=checks)
