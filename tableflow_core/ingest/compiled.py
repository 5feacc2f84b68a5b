"""A table's transforms and checks as `plan` compiled them (data: the ingest action
carries them; `plan/compiled.py` compiles them)."""

from __future__ import annotations

from collections.abc import Iterable

import pyarrow as pa
from pydantic.dataclasses import dataclass

from tableflow_core.checks.compile import CompiledChecks
from tableflow_core.ingest.placement import spark_chain
from tableflow_core.transforms.arrow_masks import DecodeMasks
from tableflow_core.transforms.compile import CompiledTransforms
from tableflow_core.transforms.decode_masks import decode_masks, masks_at_decode


@dataclass(frozen=True)
class CompiledTable:
    transforms: CompiledTransforms
    checks: CompiledChecks

    @property
    def output_schema(self) -> pa.Schema:
        return self.transforms.output_schema

    def decode_masks(self, key_columns: Iterable[str] = ()) -> DecodeMasks:
        """The masks the decode stage runs (never on `key_columns`, filled from the Kafka
        key after decoding); the transform stage runs the rest of the chain
        (`transforms_in_spark`)."""
        return decode_masks(masks_at_decode(self.transforms, key_columns))

    def transforms_in_spark(self, key_columns: Iterable[str] = ()) -> CompiledTransforms:
        return spark_chain(self.transforms, key_columns)
