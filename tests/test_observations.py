"""Reading Spark observations: a failed read raises (never counts of zero), and a
table's counters read the JVM once."""

from __future__ import annotations

import pytest

from tableflow_core.engine.observations import observed_metrics, observed_once


class CountingObservation:
    """Stands in for pyspark's `Observation`: `get` is a property that reads the JVM."""

    def __init__(self, figures: dict[str, int] | None = None, error: str | None = None) -> None:
        self.figures = figures or {}
        self.error = error
        self.reads = 0

    @property
    def get(self) -> dict[str, int]:
        self.reads += 1
        if self.error is not None:
            raise ValueError(self.error)
        return self.figures


def test_a_failed_read_raises_instead_of_reporting_no_counts() -> None:
    observation = CountingObservation(error="gateway closed")
    with pytest.raises(RuntimeError, match="the decode stage's counts could not be read"):
        observed_metrics(observation)


def test_counts_are_read_once_and_kept() -> None:
    observation = CountingObservation({"records": 5, "bad_records": 1})
    figures = observed_once(observation)
    assert figures()["records"] == 5
    assert figures()["bad_records"] == 1
    assert observation.reads == 1


def test_counts_that_never_arrive_name_the_stage() -> None:
    class Never:
        @property
        def get(self) -> dict[str, int]:
            import time

            time.sleep(5)
            return {}

    with pytest.raises(RuntimeError, match="the transform stage's counts never arrived"):
        observed_metrics(Never(), timeout_s=0.1, what="the transform stage")
