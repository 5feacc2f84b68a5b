"""Reading an observation's figures: one Spark round trip per observation, however often
a run reads them (the counters, per partition, the accounting)."""

from __future__ import annotations

from typing import Any

from tableflow_core.engine.observations import observed_metrics


class CountingObservation:
    """Stands in for pyspark's Observation: `get` (a py4j round trip there) is counted."""

    def __init__(self, figures: dict[str, Any]) -> None:
        self.figures = figures
        self.gets = 0

    @property
    def get(self) -> dict[str, Any]:
        self.gets += 1
        return dict(self.figures)


def test_an_observation_is_read_from_spark_once() -> None:
    first, second = CountingObservation({"records": 3}), CountingObservation({"records": 5})
    for _ in range(4):
        assert observed_metrics(first) == {"records": 3}
    assert observed_metrics(second) == {"records": 5}
    assert (first.gets, second.gets) == (1, 1)
    observed_metrics(first)["records"] = 99  # a caller's copy
    assert observed_metrics(first) == {"records": 3}
