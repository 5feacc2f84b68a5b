"""A table's transforms and checks compiled against its decoded schema (pure, no Spark).

`plan` compiles them to validate the table (compile errors are plan blockers at
file:line) and to show the output schema and one line per transform and check; `apply`
compiles them again from the same config and schema, so both run the same steps.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from tableflow_core.checks import CompiledChecks, compile_checks
from tableflow_core.config.project import Table
from tableflow_core.transforms import CompiledTransforms, compile_transforms, table_locator


@dataclass(frozen=True)
class CompiledTable:
    transforms: CompiledTransforms
    checks: CompiledChecks

    @property
    def output_schema(self) -> pa.Schema:
        return self.transforms.output_schema


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
