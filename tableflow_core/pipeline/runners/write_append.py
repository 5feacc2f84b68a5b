"""Append mode: every good row is a new table row; one snapshot holds data and offsets."""

from __future__ import annotations

from tableflow_core.ingest.columns import is_hidden
from tableflow_core.ingest.stages import Write
from tableflow_core.pipeline.batch import Batch, StageContext
from tableflow_core.pipeline.runners.write import commit_properties, write_mode


@write_mode("append")
def append(context: StageContext, spec: Write, batch: Batch) -> Batch:
    assert batch.good is not None
    rows = batch.good.drop(*[c for c in batch.good.columns if is_hidden(c)])
    writer = rows.writeTo(context.branch_identifier)
    for key, value in commit_properties(context, batch).items():
        writer = writer.option(f"snapshot-property.{key}", value)
    writer.append()
    return batch
