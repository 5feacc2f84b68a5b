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
from tableflow_core.transforms.arrow_masks import DecodeMasks
from tableflow_core.transforms.decode_masks import decode_masks, masks_at_decode


@dataclass(frozen=True)
class CompiledTable:
    transforms: CompiledTransforms
    checks: CompiledChecks

    @property
    def output_schema(self) -> pa.Schema:
        return self.transforms.output_schema

    def decode_masks(self, key_columns: tuple[str, ...] = ()) -> DecodeMasks:
        """The masks the decode stage runs (never on `key_columns`, filled from the Kafka
        key after decoding); the transform stage runs the rest of the chain
        (`transforms_in_spark`)."""
        return decode_masks(masks_at_decode(self.transforms, key_columns))

    def transforms_in_spark(self, key_columns: tuple[str, ...] = ()) -> CompiledTransforms:
        return self.transforms.without(masks_at_decode(self.transforms, key_columns))


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
