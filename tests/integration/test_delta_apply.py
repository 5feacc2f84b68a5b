"""apply keeps a Delta log over a `formats: [iceberg, delta]` table after every commit
(real broker, registry, Spark, catalog); Delta readers (deltalake, DuckDB's delta_scan)
read exactly the Iceberg rows. plan refuses delta on an upsert table, with the reason.
"""

from __future__ import annotations

from typing import Any

import pytest

from tableflow_core.delta import mirrored_snapshot_id
from tableflow_core.tasks.plan import PlanTask
from tests.fixtures.apply_env import PaymentTopics, apply, payments
from tests.fixtures.lake import LAKES, Lake
from tests.integration.test_delta_sync import deltalake_rows, duckdb_rows, iceberg_rows

pytestmark = pytest.mark.slow


@LAKES
def test_apply_syncs_the_delta_log_after_each_commit(
    spark: Any,
    make_env: Any,
    payment_topics: PaymentTopics,
    lake: Lake,
) -> None:
    topic = payment_topics.create("delta", payments(0, 12), 2)
    env = make_env(topic, formats=["iceberg", "delta"])

    for expected_ids, more in ((list(range(12)), 7), (list(range(19)), 0)):
        result = apply(spark, env)
        assert result.delta_version is not None
        table = env.pyiceberg_table()
        expected = iceberg_rows(table)
        assert [r["id"] for r in expected] == expected_ids
        location = table.metadata.location
        options = lake.storage_options(table)
        assert deltalake_rows(location, options) == expected
        assert duckdb_rows(location, options) == expected
        snapshot = table.current_snapshot()
        assert snapshot is not None
        assert mirrored_snapshot_id(location, options) == snapshot.snapshot_id
        if more:
            payment_topics.produce(topic, payments(12, more), 2)


def test_plan_refuses_delta_on_an_upsert_table(
    make_env: Any, payment_topics: PaymentTopics
) -> None:
    topic = payment_topics.create("deltaup", payments(0, 3), 1)
    env = make_env(topic, formats=["iceberg", "delta"], mode="upsert", key_columns=["id"])
    project = env.project
    plan = PlanTask(project, project.tables).run()
    (blocker,) = [b for b in plan.blockers if b.key == "formats"]
    table = project.table("t")
    assert blocker.location == f"{table.source.file}:{table.key_lines['formats']}"
    assert "format delta is not available for mode upsert" in blocker.message
    assert "use mode append" in blocker.message
