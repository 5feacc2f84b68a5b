"""Planning against the real stack (no Spark): registry evolution, upsert switch, no JVM, errors."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid

import pytest
import yaml
from click.testing import CliRunner

from tableflow_core.cli.main import cli
from tableflow_core.config.loader import load_project
from tableflow_core.dev.producer import produce_sample
from tableflow_core.plan.plan import PlanOptions
from tableflow_core.plan.world import WorldReadError
from tableflow_core.schemas.evolution import iceberg_schema_for
from tableflow_core.tasks.plan import PlanTask
from tests.fixtures.catalog import unique_namespace
from tests.fixtures.stack import unique_name
from tests.plan_project import write_project


@pytest.fixture
def project_root(tmp_path, kafka_broker, schema_registry, catalog_server):
    """A project whose table exists (made with pyiceberg from the v1 schema) and is up to date."""
    topic = unique_name("orders")
    namespace = unique_namespace("plan")
    produce_sample("orders", kafka_broker.bootstrap, schema_registry.url, topic, 10, partitions=2)
    root = write_project(
        tmp_path / "p", bootstrap=kafka_broker.bootstrap, registry_url=schema_registry.url,
        catalog_uri=catalog_server.uri, credential=catalog_server.credential,
        namespace=namespace, tables=[{"name": "orders", "topic": topic, "start_from": "latest"}],
    )  # fmt: skip
    project = load_project(root)
    plan = PlanTask(project, project.tables).run()
    create = next(a for a in plan.actions if a.kind == "create_table")
    catalog = catalog_server.pyiceberg_catalog()
    catalog.create_namespace(namespace)
    from tableflow_core.plan.world import read_world
    from tableflow_core.schemas.resolve import resolve_schema  # noqa: F401  (the schema the plan saw)
    from tableflow_core.targets.catalog import open_catalog

    with open_catalog(project) as handle:
        resolved = read_world(project, project.tables, handle).schemas["orders"]
    catalog.create_table(
        (namespace, "orders"),
        iceberg_schema_for(resolved.arrow_schema),
        properties=create.properties,
    )
    return root, topic


def test_registry_field_added_is_an_in_place_change_and_upsert_is_a_replace(
    project_root, kafka_broker, schema_registry
):
    root, topic = project_root
    project = load_project(root)
    assert PlanTask(project, project.tables).run().actions == ()
    produce_sample(
        "orders",
        kafka_broker.bootstrap,
        schema_registry.url,
        topic,
        1,
        partitions=2,
        schema_version=2,
    )
    plan = PlanTask(project, project.tables).run()
    evolve = next(a for a in plan.actions if a.kind == "evolve_schema")
    assert [(c.kind, c.path) for c in evolve.changes] == [("add_column", "channel")]
    assert not plan.blockers

    tables_file = root / "tables" / "tables.yml"
    document = yaml.safe_load(tables_file.read_text())
    document["tables"][0].update(mode="upsert", key_columns=["order_id"])
    tables_file.write_text(yaml.safe_dump(document, sort_keys=False))
    project = load_project(root)
    for allow in (False, True):
        plan = PlanTask(project, project.tables, options=PlanOptions(allow_destructive=allow)).run()
        assert plan.actions[0].kind == "replace_table"
        assert [b.kind for b in plan.blockers] == ([] if allow else ["destructive"])
    outcome = CliRunner().invoke(
        cli, ["--project-dir", str(root), "plan", "--allow-destructive", "--json"]
    )
    assert outcome.exit_code == 0, outcome.output
    document = json.loads(outcome.output)
    assert document["actions"][0]["reasons"] == ["mode append -> upsert"]
    assert document["actions"][0]["properties"]["tableflow.key-columns"] == "order_id"


def test_plan_never_imports_pyspark(project_root):
    root, _ = project_root
    code = (
        "import sys; from click.testing import CliRunner; from tableflow_core.cli.main import cli\n"
        f"r = CliRunner().invoke(cli, ['--project-dir', {str(root)!r}, 'plan', '--json'])\n"
        "assert r.exit_code == 0, r.output\n"
        "print(sorted(m for m in sys.modules if m.startswith('pyspark') or m.startswith('py4j')))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_registry_down_names_the_component(project_root):
    root, _ = project_root
    project = load_project(root, var_overrides={})
    text = (root / "tableflow_project.yml").read_text()
    (root / "tableflow_project.yml").write_text(
        text.replace(project.target.schema_registry.url, "http://127.0.0.1:9")
    )
    project = load_project(root)
    with pytest.raises(WorldReadError, match=r"schema registry at http://127.0.0.1:9"):
        PlanTask(project, project.tables).run()
    outcome = CliRunner().invoke(cli, ["--project-dir", str(root), "plan"])
    assert outcome.exit_code == 1 and "schema registry at http://127.0.0.1:9" in outcome.output


def test_a_missing_topic_is_a_blocker_at_its_topic_line_with_a_hint(
    tmp_path, kafka_broker, schema_registry, catalog_server
):
    """Issue 32: a topic that does not exist was a raw client error pointing at the
    table's first line. Now: the `topic:` line, and a close name or what to do."""
    existing = unique_name("zebra")
    while existing[-1] == existing[-2]:  # swapping them must make another name
        existing = unique_name("zebra")
    produce_sample("orders", kafka_broker.bootstrap, schema_registry.url, existing, 5)
    typo = existing[:-2] + existing[-1] + existing[-2]  # two characters swapped
    nowhere = "qq" + uuid.uuid4().hex
    root = write_project(
        tmp_path / "p", bootstrap=kafka_broker.bootstrap, registry_url=schema_registry.url,
        catalog_uri=catalog_server.uri, credential=catalog_server.credential,
        namespace=unique_namespace("missing"),
        tables=[{"name": "typo", "topic": typo}, {"name": "nowhere", "topic": nowhere}],
    )  # fmt: skip
    lines = (root / "tables" / "tables.yml").read_text().splitlines()
    typo_line = 1 + next(i for i, line in enumerate(lines) if f"topic: {typo}" in line)
    nowhere_line = 1 + next(i for i, line in enumerate(lines) if f"topic: {nowhere}" in line)

    outcome = CliRunner().invoke(cli, ["--project-dir", str(root), "plan"])
    assert outcome.exit_code == 1, outcome.output
    text = " ".join(outcome.output.split())  # unwrapped
    assert (
        f"tables/tables.yml:{typo_line}: table typo: topic '{typo}' does not exist on kafka at "
        f"{kafka_broker.bootstrap}; did you mean '{existing}'? [topic]"
    ) in text
    assert f"tables/tables.yml:{nowhere_line}: table nowhere: topic '{nowhere}'" in text
    assert "produce to it first, or create it" in text
    assert "UNKNOWN_TOPIC" not in text and "cannot read metadata" not in text
    # The subjects named after the missing topics are missing too: not repeated.
    assert "4 blocked" not in text and "2 blocked" in text
