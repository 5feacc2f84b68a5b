"""Reading an observation's figures: one Spark round trip per observation, however often
a run reads them (the counters, per partition, the accounting); a failed read raises
(never counts of zero)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from tableflow_core.engine.observations import observed_metrics


class CountingObservation:
    """Stands in for pyspark's Observation: `get` (a py4j round trip there) is counted."""

    def __init__(self, figures: dict[str, Any], error: str | None = None) -> None:
        self.figures = figures
        self.error = error
        self.gets = 0

    @property
    def get(self) -> dict[str, Any]:
        self.gets += 1
        if self.error is not None:
            raise ValueError(self.error)
        return dict(self.figures)


def test_an_observation_is_read_from_spark_once() -> None:
    first, second = CountingObservation({"records": 3}), CountingObservation({"records": 5})
    for _ in range(4):
        assert observed_metrics(first) == {"records": 3}
    assert observed_metrics(second) == {"records": 5}
    assert (first.gets, second.gets) == (1, 1)
    observed_metrics(first)["records"] = 99  # a caller's copy
    assert observed_metrics(first) == {"records": 3}


def test_a_failed_read_raises_instead_of_reporting_no_counts() -> None:
    observation = CountingObservation({}, error="gateway closed")
    with pytest.raises(RuntimeError, match="the decode stage's counts could not be read"):
        observed_metrics(observation)


def test_counts_that_never_arrive_name_the_stage() -> None:
    class Never:
        @property
        def get(self) -> dict[str, int]:
            time.sleep(5)
            return {}

    with pytest.raises(RuntimeError, match="the transform stage's counts never arrived"):
        observed_metrics(Never(), timeout_s=0.1, what="the transform stage")
