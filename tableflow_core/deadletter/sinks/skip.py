"""`on_error: skip`: bad records are counted per partition and stored nowhere."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from tableflow_core.deadletter.frames import count_by_partition
from tableflow_core.deadletter.sinks.base import SinkContext, SinkResult

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


@dataclass(frozen=True)
class SkipSink:
    context: SinkContext

    def write(self, bad: DataFrame) -> SinkResult:
        return SinkResult("skipped", "skipped", count_by_partition(bad))
