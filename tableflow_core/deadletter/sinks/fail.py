"""`on_error: fail`: bad records stop the run, naming the first offsets at fault."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from tableflow_core.deadletter.errors import BadRecordRef, BadRecordsFailure
from tableflow_core.deadletter.sinks.base import SinkContext, SinkResult

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

MAX_LISTED = 5


@dataclass(frozen=True)
class FailSink:
    context: SinkContext

    def write(self, bad: DataFrame) -> SinkResult:
        first = (
            bad.select(
                "source_topic",
                "source_partition",
                "source_offset",
                "stage",
                "error_class",
                "error_message",
            )
            .orderBy("source_partition", "source_offset")
            .limit(MAX_LISTED + 1)
            .collect()
        )
        if not first:
            return SinkResult("skipped", "none", {})
        records = tuple(
            BadRecordRef(
                r["source_topic"],
                r["source_partition"],
                r["source_offset"],
                r["stage"],
                r["error_class"],
                r["error_message"],
            )
            for r in first[:MAX_LISTED]
        )
        listed = "; ".join(record.describe() for record in records)
        more = " (and more)" if len(first) > MAX_LISTED else ""
        raise BadRecordsFailure(
            f"table {self.context.table}: bad record(s) and on_error is fail, nothing was "
            f"committed: {listed}{more}",
            records,
        )
