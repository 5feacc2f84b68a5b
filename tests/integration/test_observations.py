"""Reading an observation's figures: one Spark round trip per observation, however often
a run reads them (the counters, per partition, the accounting); a failed read raises
(never counts of zero)."""

from __future__ import annotations

from typing import Any

import pytest

from tableflow_core.engine.observations import observed_metrics


@pytest.mark.slow
def test_counts_observed_as_one_metric_are_read_back_by_name(spark: Any) -> None:
    from tableflow_core.engine.observations import observe_counts

    frame = spark.range(1000).selectExpr("id", "id % 4 AS p", "IF(id % 10 = 0, 'x', NULL) AS b")
    observed, observation = observe_counts(
        frame,
        "test",
        {
            "records": "count(1)",
            "bad": "count(b)",
            "records_p3": "count(CASE WHEN p = 3 THEN 1 END)",
            "it's": "count(CASE WHEN p = 0 THEN 1 END)",
            "none": "sum(CASE WHEN false THEN 1 END)",
        },
    )
    observed.write.format("noop").mode("overwrite").save()
    figures = observed_metrics(observation)
    assert figures == {"records": 1000, "bad": 100, "records_p3": 250, "it's": 250}
    assert all(isinstance(v, int) for v in figures.values())
