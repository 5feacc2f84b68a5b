"""apply publishes every commit to the catalogs of `publish_to` (real broker, registry,
Spark, a second tableflow catalog server and a SQL catalog on SQLite).

After each apply, each published pointer is the table's current metadata location and
pyiceberg and DuckDB read the same rows through it. A pointer moved back by hand is
shown by plan as stale and apply fixes it with nothing to ingest. A catalog that cannot
be reached fails the table (exit non-zero) but never undoes its Iceberg commit.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
import yaml
from pyiceberg.catalog import load_catalog

from tableflow_core.dev.processes import free_port
from tableflow_core.plan.actions import PublishTable
from tableflow_core.tasks.apply import ApplyTask
from tableflow_core.tasks.plan import PlanTask
from tests.fixtures.apply_env import Env, PaymentTopics, apply, payments
from tests.fixtures.catalog import CatalogServer
from tests.integration.test_publish_catalogs import (
    duckdb_rows,
    rest_catalog_config,
    second_catalog,  # noqa: F401  (module fixture: the second catalog server)
)

pytestmark = pytest.mark.slow


def add_publish_catalogs(env: Env, catalogs: dict[str, Any]) -> None:
    config_file = env.root / "tableflow_project.yml"
    document = yaml.safe_load(config_file.read_text())
    document["targets"]["test"]["publish_catalogs"] = catalogs
    config_file.write_text(yaml.safe_dump(document, sort_keys=False))


def rows(table: Any) -> list[tuple[int, str]]:
    arrow = table.scan(selected_fields=("id", "name")).to_arrow()
    return sorted(zip(arrow["id"].to_pylist(), arrow["name"].to_pylist(), strict=True))


def test_apply_publishes_each_commit_and_fixes_a_stale_pointer(
    spark: Any,
    tmp_path: Path,
    make_env: Any,
    payment_topics: PaymentTopics,
    second_catalog: CatalogServer,  # noqa: F811
) -> None:
    topic = payment_topics.create("pub", payments(0, 10), 2)
    env = make_env(topic, publish_to=["second", "sqlite"])
    sql_uri = f"sqlite:///{tmp_path / 'published.db'}"
    warehouse = (tmp_path / "wh").as_uri()
    add_publish_catalogs(
        env,
        {
            "second": rest_catalog_config(second_catalog),
            "sqlite": {"type": "sql", "uri": sql_uri, "warehouse": warehouse},
        },
    )
    ident = f"{env.namespace}.t"
    readers = {
        "second": lambda: second_catalog.pyiceberg_catalog("second"),
        "sqlite": lambda: load_catalog("sqlite", type="sql", uri=sql_uri, warehouse=warehouse),
    }

    def assert_published(expected_ids: list[int]) -> str:
        source = env.pyiceberg_table()
        expected = rows(source)
        assert [i for i, _ in expected] == expected_ids
        for name, reader in readers.items():
            published = reader().load_table(ident)
            assert published.metadata_location == source.metadata_location, name
            assert rows(published) == expected, name
            assert duckdb_rows(published.metadata_location) == expected, name
        return str(source.metadata_location)

    def apply_and_publish(written: int, how: str, expected_ids: list[int]) -> str:
        """An apply writes `written` records and publishes to both catalogs (`how`)."""
        result = apply(spark, env)
        assert result.records_written == written
        assert sorted(result.published) == [
            f"{ident} in second: {how}",
            f"{ident} in sqlite: {how}",
        ]
        return assert_published(expected_ids)

    first_location = apply_and_publish(10, "registered", list(range(10)))
    payment_topics.produce(topic, payments(10, 6), 2)
    current = apply_and_publish(6, "updated", list(range(16)))
    assert current != first_location

    # Someone points the SQLite catalog back at the first commit, by hand.
    with sqlite3.connect(tmp_path / "published.db") as db:
        moved = db.execute(
            "UPDATE iceberg_tables SET metadata_location = ? WHERE table_name = 't'",
            (first_location,),
        ).rowcount
    assert moved == 1
    assert len(rows(readers["sqlite"]().load_table(ident))) == 10

    project = env.project
    plan = PlanTask(project, project.tables).run()
    assert not plan.blockers, plan.blockers
    (action,) = plan.actions  # nothing to ingest: only the pointer
    assert isinstance(action, PublishTable) and action.catalogs == ("sqlite",)
    assert action.details == (
        f"update {ident} in catalog sqlite: points at {first_location}, table is at {current}",
    )
    results = ApplyTask(project, plan, spark=spark).run()
    assert results.status == "success", results
    (fixed,) = results.tables
    assert fixed.published == (f"{ident} in sqlite: updated",)
    assert fixed.records_written == 0
    assert assert_published(list(range(16))) == current
    again = PlanTask(project, project.tables).run()
    assert again.actions == () and not again.has_changes


def test_a_failed_publish_fails_the_table_and_keeps_its_commit(
    spark: Any,
    make_env: Any,
    payment_topics: PaymentTopics,
) -> None:
    topic = payment_topics.create("pubdown", payments(0, 5), 1)
    env = make_env(topic, publish_to=["down"])
    # Nothing listens there: registering the pointer fails.
    add_publish_catalogs(env, {"down": {"type": "rest", "uri": f"http://127.0.0.1:{free_port()}"}})
    failed = apply(spark, env, expect="error")
    assert failed.records_written == 5 and failed.offsets_after == {0: 5}
    assert failed.error is not None
    assert "the table's commits stand; publishing failed" in (failed.error or "")
    assert "in down: failed" in (failed.error or "")
    assert len(rows(env.pyiceberg_table())) == 5  # the Iceberg commit stands

    # The next plan sees the pointer unreadable and plans a publish again (no ingest).
    project = env.project
    plan = PlanTask(project, project.tables).run()
    (action,) = plan.actions
    assert isinstance(action, PublishTable) and action.catalogs == ("down",)
