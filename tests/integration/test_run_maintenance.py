"""`tableflow run` runs due maintenance between refreshes (real broker, registry, Spark,
catalog, a SQL catalog on SQLite to publish to, and a Delta log).

Cycle 1 ingests, then rewrites the manifests (due: never run) under the table's lock; the
maintenance commit is published and mirrored in the Delta log. Cycle 2 plans afresh from
the maintained table and ingests the new records; nothing is due again. Then compaction's
own triggers: a one-file table is left alone, small commits make it due.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml
from pyiceberg.catalog import load_catalog

from tableflow_core.delta import mirrored_snapshot_id
from tableflow_core.tasks.run import CycleReport, RunTask
from tests.fixtures.apply_env import PaymentTopics, payments
from tests.integration.test_delta_sync import deltalake_rows, iceberg_rows

pytestmark = pytest.mark.slow


def after_maintenance(observe: Callable[[CycleReport], None]) -> Callable[[CycleReport], None]:
    """An `on_cycle` calling `observe` once per refresh cycle of the (one) table, with the
    maintenance after it: in the cycle's own report when nothing was due, else once the
    maintenance lane reported it (the table sits out its lane until then,
    tasks/run.py), put in the cycle's report."""
    cycles: list[CycleReport] = []

    def on_cycle(report: CycleReport) -> None:
        if not report.refreshed:
            assert cycles and cycles[-1].maintenance_due == report.maintenance_due, report
            observe(replace(cycles[-1], maintenance=report.maintenance))
        elif report.maintenance_due:
            cycles.append(report)
        else:
            observe(report)

    return on_cycle


def refreshes(reports: list[CycleReport]) -> list[CycleReport]:
    """The refresh cycles' reports, each with the maintenance reported after it."""
    paired: list[CycleReport] = []
    for report in reports:
        if report.refreshed:
            paired.append(report)
        else:
            paired[-1] = replace(paired[-1], maintenance=report.maintenance)
    return paired


def test_run_maintains_between_refreshes_then_publishes_and_syncs_delta(
    spark: Any,
    tmp_path: Path,
    make_env: Any,
    payment_topics: PaymentTopics,
) -> None:
    topic = payment_topics.create("runmaint", payments(0, 20), 2)
    env = make_env(
        topic,
        refresh_interval="1s",
        publish_to=["lake"],
        formats=["iceberg", "delta"],
        maintenance={"every": "1h", "rewrite_manifests": True},
    )
    sql_uri = f"sqlite:///{tmp_path / 'lake.db'}"
    warehouse = (tmp_path / "wh").as_uri()
    config_file = env.root / "tableflow_project.yml"
    document = yaml.safe_load(config_file.read_text())
    document["targets"]["test"]["publish_catalogs"] = {
        "lake": {"type": "sql", "uri": sql_uri, "warehouse": warehouse}
    }
    config_file.write_text(yaml.safe_dump(document, sort_keys=False))
    project = env.project
    lake = load_catalog("lake", type="sql", uri=sql_uri, warehouse=warehouse)
    seen: list[dict[str, Any]] = []

    def after_cycle(report: CycleReport) -> None:
        table = env.pyiceberg_table()
        snapshot = table.current_snapshot()
        seen.append(
            {
                "report": report,
                "rows": iceberg_rows(table),
                "location": table.metadata_location,
                "snapshot": snapshot.snapshot_id,
                "properties": dict(table.properties),
                "published": lake.load_table(f"{env.namespace}.t").metadata_location,
                "mirrored": mirrored_snapshot_id(table.metadata.location),
                "delta_rows": deltalake_rows(table.metadata.location),
            }
        )
        if len(seen) == 1:
            payment_topics.produce(topic, payments(20, 8), 2)

    reports = RunTask(
        project,
        project.tables,
        spark_factory=lambda: spark,
        max_cycles=2,
        on_cycle=after_maintenance(after_cycle),
    ).run()
    assert all(r.ok for r in reports) and len(refreshes(reports)) == 2, reports
    # Cycle 1's maintenance ran in the maintenance lane; nothing was due after cycle 2.
    assert [r.lane for r in reports] == ["own:t", "maintenance", "own:t"]

    first, second = seen
    (maintained,) = first["report"].maintenance
    assert maintained.report is not None and maintained.ok, maintained
    assert [r.operation for r in maintained.report.results] == ["rewrite_manifests"]
    assert first["report"].results.tables[0].records_written == 20
    assert "tableflow.maintenance.rewrite_manifests.last-run" in first["properties"]
    assert [r["id"] for r in first["rows"]] == list(range(20))
    # The maintenance commit is the table's current state: published and mirrored.
    assert maintained.report.metadata_location == first["location"]
    assert first["published"] == first["location"]
    assert maintained.published is not None and maintained.published.ok
    assert maintained.delta is not None and first["mirrored"] == first["snapshot"]
    assert first["delta_rows"] == first["rows"]

    # Cycle 2 planned from the maintained table: the new records land, nothing is due.
    (not_due,) = second["report"].maintenance
    assert not_due.report is None and not_due.note == "nothing due"
    assert second["report"].results.tables[0].records_written == 8
    assert [r["id"] for r in second["rows"]] == list(range(28))
    assert second["published"] == second["location"] != first["location"]
    assert second["mirrored"] == second["snapshot"]
    assert second["delta_rows"] == second["rows"]


def run_cycles_of_five_payments(
    spark: Any,
    env: Any,
    payment_topics: PaymentTopics,
    cycles: int,
    observe: Callable[[CycleReport], None],
) -> list[CycleReport]:
    """`tableflow run` for `cycles` cycles, every one ok; after each, `observe(report)`,
    then 5 more payments on the table's topic (which starts with payments 0..4)."""
    produced = 5

    def after_cycle(report: CycleReport) -> None:
        nonlocal produced
        observe(report)
        payment_topics.produce(env.topic, payments(produced, 5), 1)
        produced += 5

    project = env.project
    reports = RunTask(
        project,
        project.tables,
        spark_factory=lambda: spark,
        max_cycles=cycles,
        on_cycle=after_maintenance(after_cycle),
        beside_ingest=False,  # each cycle's maintenance before the next cycle
    ).run()
    assert all(r.ok for r in reports) and len(refreshes(reports)) == cycles, reports
    return refreshes(reports)


def test_run_compacts_when_commits_pile_up_and_leaves_a_one_file_table_alone(
    spark: Any,
    make_env: Any,
    payment_topics: PaymentTopics,
) -> None:
    """Issue 32: `tableflow run` compacted a one-file table on its first cycle, then
    nothing for an hour while small files piled up. Each cycle here commits one small
    file; compaction waits for two files, then comes back after two commits, well within
    its hour."""
    topic = payment_topics.create("runpile", payments(0, 5), 1)
    compact = {"min_input_files": 2, "every_commits": 2, "every_small_files": None}
    env = make_env(topic, refresh_interval="1s", maintenance={"every": "1h", "compact": compact})
    seen: list[tuple[CycleReport, int]] = []

    def observe(report: CycleReport) -> None:
        files = env.pyiceberg_table().current_snapshot().summary["total-data-files"]
        seen.append((report, int(files)))

    run_cycles_of_five_payments(spark, env, payment_topics, 4, observe)

    maintained = [report.maintenance[0] for report, _ in seen]
    assert [r.records_written for report, _ in seen for r in report.results.tables] == [5] * 4
    # Cycle 1: one data file, nothing to merge.
    assert maintained[0].report is None
    assert (
        maintained[0].note == "nothing due (compact not due: 1 data file, fewer than it merges (2))"
    )
    # Cycle 2: two files, never compacted and two commits: compacted into one.
    assert maintained[1].report is not None and maintained[1].ok
    assert maintained[1].due[0].triggers == (
        "never run",
        "2 commits since the last compaction (due at 2)",
    )
    # Cycle 3: one commit since the compaction, and the hour has not passed.
    assert maintained[2].report is None and maintained[2].note == "nothing due"
    # Cycle 4: two commits since the compaction: due by commits, not by time.
    assert maintained[3].report is not None and maintained[3].ok
    assert maintained[3].due[0].triggers == ("2 commits since the last compaction (due at 2)",)
    assert [files for _, files in seen] == [1, 1, 2, 1]
    assert sorted(r["id"] for r in iceberg_rows(env.pyiceberg_table())) == list(range(20))


def test_run_keeps_metadata_files_and_manifests_bounded(
    spark: Any,
    make_env: Any,
    payment_topics: PaymentTopics,
) -> None:
    """Issue 42: every commit wrote a metadata.json that was kept for ever, and every
    publish added a manifest that stayed. With the upkeep properties (here at small
    bounds: 3 previous metadata files, manifests merged from 3), ten cycles of publish
    commits (pyiceberg, merge appends) and maintenance commits (Spark, through the REST
    catalog) leave at most 4 metadata files and 3 manifests, and every record once."""
    topic = payment_topics.create("runbound", payments(0, 5), 1)
    properties = {
        "write.metadata.previous-versions-max": "3",
        "commit.manifest.min-count-to-merge": "3",
    }
    env = make_env(
        topic,
        refresh_interval="1s",
        properties=properties,
        maintenance={"every": "1h", "rewrite_manifests": True, "expire_snapshots": True},
    )
    seen: list[tuple[int, int, int]] = []

    def observe(report: CycleReport) -> None:
        table = env.pyiceberg_table()
        folder = Path(table.metadata_location.removeprefix("file://")).parent
        files = len(list(folder.glob("*.metadata.json")))
        manifests = len(table.current_snapshot().manifests(table.io))
        seen.append((files, manifests, len(table.metadata.metadata_log)))

    reports = run_cycles_of_five_payments(spark, env, payment_topics, 10, observe)
    table = env.pyiceberg_table()
    assert table.properties["write.metadata.delete-after-commit.enabled"] == "true"
    assert table.properties["commit.manifest-merge.enabled"] == "true"
    # Cycle 1 rewrote the manifests through Spark (its commits' files count too); expiry
    # had nothing to expire (the history keeps 500 refreshes): not run.
    assert [op.operation for op in reports[0].maintenance[0].report.results] == [
        "rewrite_manifests"
    ]
    assert all(files <= 4 and log <= 3 for files, _, log in seen), seen
    assert all(manifests <= 3 for _, manifests, _ in seen), seen
    assert max(manifests for _, manifests, _ in seen) >= 2  # appends added some first
    assert sorted(r["id"] for r in iceberg_rows(table)) == list(range(50))
