"""`tableflow dev produce` beyond Avro (issue 32): the sample orders as plain JSON, read by
the README's plain-JSON table exactly as written there, and with a JSON Schema through
the registry; both applied by Spark and read back with pyiceberg against the generator's
own records (the independent model of what should land)."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from tableflow_core.config.loader import load_project
from tableflow_core.dev.producer import produce_sample
from tableflow_core.dev.sample_data import generate_orders
from tableflow_core.tasks.apply import ApplyTask
from tableflow_core.tasks.plan import PlanTask
from tests.docs_examples import REPO, blocks
from tests.fixtures.catalog import unique_namespace
from tests.fixtures.stack import unique_name

pytestmark = pytest.mark.slow

COUNT, SEED = 300, 7


def readme_plain_json_table() -> dict[str, Any]:
    """The plain-JSON table of README.md, as a user would copy it."""
    (block,) = [
        b
        for b in blocks(REPO / "README.md")
        if b.lang == "yaml" and any(line.strip() == "format: json" for line in b.lines)
    ]
    (table,) = yaml.safe_load("\n".join(block.lines))["tables"]
    return dict(table)


def rows(catalog: Any, identifier: str) -> dict[str, dict[str, Any]]:
    return {r["order_id"]: r for r in catalog.load_table(identifier).scan().to_arrow().to_pylist()}


def test_plain_json_and_json_schema_samples_land_as_generated(
    stack_project, kafka_broker, schema_registry, catalog_server, spark
) -> None:
    plain, with_schema = unique_name("orders_json"), unique_name("orders_js")
    for topic, value_format in ((plain, "json"), (with_schema, "json_schema")):
        result = produce_sample(
            "orders", kafka_broker.bootstrap, schema_registry.url, topic, COUNT,
            partitions=2, seed=SEED, value_format=value_format,
        )  # fmt: skip
        assert result.records == COUNT
    assert result.subject == f"{with_schema}-value" and result.schema_id is not None
    assert schema_registry.client().get_latest_version(result.subject).schema.schema_type == "JSON"

    readme_table = readme_plain_json_table()
    assert readme_table["topic"] == "orders_json"
    namespace = unique_namespace("samples")
    root = stack_project(
        namespace=namespace,
        tables=[
            {**readme_table, "topic": plain},
            {"name": "orders_js", "topic": with_schema, "value": {"format": "json_schema"}},
        ],
    )
    project = load_project(root)
    plan = PlanTask(project, project.tables).run()
    assert not plan.blockers, plan.blockers
    results = ApplyTask(project, plan, spark=spark).run()
    assert results.status == "success", results.errors

    expected = {r.key: r.value for r in generate_orders(COUNT, SEED)}
    assert expected and all(v is not None for v in expected.values())
    catalog = catalog_server.pyiceberg_catalog()

    landed = rows(catalog, f"{namespace}.orders_json")
    assert landed.keys() == expected.keys()
    for order_id, row in landed.items():
        want = expected[order_id]
        assert want is not None
        assert row["customer_id"] == want["customer_id"]
        assert row["status"] == want["status"]
        assert row["amount"] == want["amount"]  # Decimal, exact
        assert row["created_at"] == want["created_at"]
        assert row["city"] == want["shipping_address"]["city"]
        assert json.loads(row["tags"]) == want["tags"]

    landed = rows(catalog, f"{namespace}.orders_js")
    assert landed.keys() == expected.keys()
    for order_id, row in landed.items():
        want = expected[order_id]
        assert want is not None
        assert {k: row[k] for k in want} == want, order_id
