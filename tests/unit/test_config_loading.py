"""Config loading: valid projects, located errors, typo suggestions, jinja, secrets."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tableflow_core.config.errors import ConfigError
from tableflow_core.config.loader import load_project
from tableflow_core.config.models.layout import PartitionField, SortField

REPO = Path(__file__).resolve().parents[2]

MINIMAL_PROJECT = """\
name: demo
targets:
  dev:
    kafka:
      bootstrap_servers: "127.0.0.1:9999"
    schema_registry:
      url: http://127.0.0.1:8081
"""


def write_project(
    tmp_path: Path, project: str = MINIMAL_PROJECT, tables: dict[str, str] | None = None
) -> Path:
    (tmp_path / "tableflow_project.yml").write_text(project)
    for name, text in (tables or {}).items():
        path = tmp_path / "tables" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path


def problems_of(tmp_path: Path, **kwargs: object) -> list[str]:
    with pytest.raises(ConfigError) as info:
        load_project(tmp_path, **kwargs)  # type: ignore[arg-type]
    return [problem.render(tmp_path) for problem in info.value.problems]


def test_example_project_at_repo_root_is_valid() -> None:
    project = load_project(REPO)
    assert project.name == "shop"
    orders = project.table("orders")
    assert orders.identifier == "shop.orders"
    assert orders.value.format == "avro"
    assert [p.expression() for p in orders.partition_by] == ["day(created_at)"]
    assert orders.source.file == REPO / "tables" / "orders.yml"


def test_defaults_are_applied_and_table_values_win(tmp_path: Path) -> None:
    project_text = MINIMAL_PROJECT + (
        "defaults:\n  namespace: raw.kafka\n  tags: [team_a]\n  refresh_interval: 1m\n"
        "  properties: {a: '1', b: '2'}\n"
    )
    tables = {
        "t.yml": "tables:\n  - name: clicks\n    topic: clicks\n    properties: {b: '3'}\n"
        "    tags: [web]\n    refresh_interval: 30s\n"
    }
    project = load_project(write_project(tmp_path, project_text, tables))
    clicks = project.table("clicks")
    assert clicks.namespace == ("raw", "kafka")
    assert clicks.table == "clicks"
    assert clicks.properties == {"a": "1", "b": "3"}
    assert clicks.tags == ("team_a", "web")
    assert clicks.refresh_interval_s == 30
    assert clicks.mode == "append"
    assert clicks.value.format == "avro" and clicks.key.format == "string"


def test_unknown_key_names_file_line_and_suggests(tmp_path: Path) -> None:
    tables = {
        "orders.yml": "tables:\n  - name: orders\n    topic: orders\n    partiton_by: [day(ts)]\n"
    }
    problems = problems_of(write_project(tmp_path, tables=tables))
    assert problems == [
        "tables/orders.yml:4 [tables[0].partiton_by]: unknown key 'partiton_by'; did you mean 'partition_by'?"
    ]


def test_unknown_key_in_nested_union_member_suggests_from_that_member(tmp_path: Path) -> None:
    project_text = (
        MINIMAL_PROJECT
        + "    catalog:\n      type: rest\n      uri: http://x\n      credentail: a:b\n"
    )
    problems = problems_of(write_project(tmp_path, project_text))
    assert len(problems) == 1
    assert problems[0].startswith("tableflow_project.yml:11 [targets.dev.catalog.credentail]")
    assert "did you mean 'credential'?" in problems[0]


def test_every_problem_across_files_is_reported(tmp_path: Path) -> None:
    tables = {
        "a.yml": "tables:\n  - name: a\n    topic: a\n    mode: sideways\n",
        "b.yml": "tables:\n  - name: b\n    topic: b\n    partition_by: ['bucket(x)']\n    dlq: {type: s3}\n",
    }
    problems = problems_of(write_project(tmp_path, tables=tables))
    assert any(p.startswith("tables/a.yml:4 [tables[0].mode]") for p in problems)
    assert any(
        p.startswith("tables/b.yml:4 [tables[0].partition_by[0]]") and "bucket needs a param" in p
        for p in problems
    )
    assert any(p.startswith("tables/b.yml:5 [tables[0].dlq]") and "'s3'" in p for p in problems)


def test_malformed_yaml_names_the_line(tmp_path: Path) -> None:
    tables = {"bad.yml": "tables:\n  - name: a\n    topic: [unclosed\n"}
    problems = problems_of(write_project(tmp_path, tables=tables))
    assert len(problems) == 1 and problems[0].startswith("tables/bad.yml:")
    assert "invalid YAML" in problems[0]


def test_duplicate_keys_are_errors(tmp_path: Path) -> None:
    tables = {"dup.yml": "tables:\n  - name: a\n    topic: a\n    topic: b\n"}
    assert problems_of(write_project(tmp_path, tables=tables)) == [
        "tables/dup.yml:4 [tables[0]]: duplicate key 'topic'"
    ]


def test_duplicate_table_names_and_identifiers(tmp_path: Path) -> None:
    tables = {
        "a.yml": "tables:\n  - name: a\n    topic: a\n  - name: a\n    topic: b\n",
        "b.yml": "tables:\n  - name: c\n    topic: c\n    table: a\n",
    }
    problems = problems_of(write_project(tmp_path, tables=tables))
    assert any("table name 'a' is declared twice" in p for p in problems)
    assert any("both write default.a" in p for p in problems)


def test_cross_field_rules(tmp_path: Path) -> None:
    tables = {"a.yml": "tables:\n  - name: a\n    topic: a\n    mode: upsert\n"}
    problems = problems_of(write_project(tmp_path, tables=tables))
    assert problems == ["tables/a.yml:2 [tables[0]]: mode upsert needs key_columns"]


def test_registry_format_without_registry_is_an_error(tmp_path: Path) -> None:
    project_text = "name: demo\ntargets:\n  dev:\n    kafka: {bootstrap_servers: 'x:1'}\n"
    tables = {"a.yml": "tables:\n  - name: a\n    topic: a\n    value: {format: avro}\n"}
    problems = problems_of(write_project(tmp_path, project_text, tables))
    assert problems == [
        "tables/a.yml:4: table 'a' uses a registry format but target 'dev' has no schema_registry"
    ]


def test_jinja_env_var_vars_and_target(tmp_path: Path) -> None:
    project_text = (
        "name: demo\nvars:\n  ns: analytics\ntargets:\n  dev:\n    kafka:\n"
        "      bootstrap_servers: \"{{ env_var('TF_TEST_BOOTSTRAP', 'localhost:1') }}\"\n"
        "  prod:\n    kafka:\n      bootstrap_servers: prod:9092\n"
        "defaults:\n  namespace: \"{{ var('ns') }}_{{ target.name }}\"\n"
        "tables:\n  - name: t\n    topic: t\n    value: {format: json}\n"
    )
    write_project(tmp_path, project_text)
    dev = load_project(tmp_path, environ={"TF_TEST_BOOTSTRAP": "broker:1234"})
    assert dev.target.kafka.bootstrap_servers == "broker:1234"
    assert dev.table("t").namespace == ("analytics_dev",)
    prod = load_project(tmp_path, target="prod", var_overrides={"ns": "x"}, environ={})
    assert prod.table("t").namespace == ("x_prod",)


def test_missing_env_var_without_default_names_file_and_line(tmp_path: Path) -> None:
    project_text = MINIMAL_PROJECT.replace(
        '"127.0.0.1:9999"', "\"{{ env_var('TF_SURELY_UNSET') }}\""
    )
    assert problems_of(write_project(tmp_path, project_text), environ={}) == [
        "tableflow_project.yml:5 [targets.dev.kafka.bootstrap_servers]: "
        "environment variable 'TF_SURELY_UNSET' is not set and env_var() has no default"
    ]


def test_unknown_target(tmp_path: Path) -> None:
    problems = problems_of(write_project(tmp_path), target="staging")
    assert problems == ["tableflow_project.yml:2: unknown target 'staging'; defined: dev"]


def test_secrets_are_masked_and_redacted(tmp_path: Path) -> None:
    project_text = (
        "name: demo\ntargets:\n  dev:\n    kafka:\n      bootstrap_servers: b:1\n      security:\n"
        "        protocol: SASL_SSL\n        sasl_mechanism: PLAIN\n        sasl_username: key\n"
        "        sasl_password: \"{{ env_var('TF_SECRET') }}\"\n"
    )
    project = load_project(
        write_project(tmp_path, project_text), environ={"TF_SECRET": "hunter2-very-secret"}
    )
    dumped = project.target.model_dump_json()
    assert "hunter2-very-secret" not in dumped and "**********" in dumped
    assert project.redact("auth failed for hunter2-very-secret") == "auth failed for **********"
    assert project.target.kafka.security.sasl_password is not None
    assert project.target.kafka.security.sasl_password.get_secret_value() == "hunter2-very-secret"


def test_secret_values_never_appear_in_validation_errors(tmp_path: Path) -> None:
    # A wrong-typed secret must not be echoed back in the error.
    project_text = (
        "name: demo\ntargets:\n  dev:\n    kafka: {bootstrap_servers: 'b:1'}\n    schema_registry:\n"
        "      url: http://r\n      basic_auth: {username: u, password: [s3cr3t-pass]}\n"
    )
    problems = problems_of(write_project(tmp_path, project_text))
    assert problems and all("s3cr3t-pass" not in p for p in problems)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("created_at", ("created_at", "identity", None)),
        ("day(created_at)", ("created_at", "day", None)),
        ("days(created_at)", ("created_at", "day", None)),
        ("hours(ts)", ("ts", "hour", None)),
        ("bucket(16, customer_id)", ("customer_id", "bucket", 16)),
        ("truncate(4, name)", ("name", "truncate", 4)),
    ],
)
def test_partition_expressions(text: str, expected: tuple[str, str, int | None]) -> None:
    field = PartitionField.model_validate(text)
    assert (field.column, field.transform, field.param) == expected


def test_sort_expressions() -> None:
    assert SortField.model_validate("ts desc").direction == "desc"
    with pytest.raises(ValueError):
        SortField.model_validate("ts sideways")


def test_template_is_valid_after_copy(tmp_path: Path) -> None:
    shutil.copytree(REPO / "project_template", tmp_path / "p")
    text = (tmp_path / "p" / "tableflow_project.yml").read_text().replace("__PROJECT_NAME__", "p")
    (tmp_path / "p" / "tableflow_project.yml").write_text(text)
    project = load_project(tmp_path / "p")
    assert [t.name for t in project.tables] == ["orders"]


def test_format_options_are_checked_against_the_format(tmp_path: Path) -> None:
    tables = {
        "a.yml": "tables:\n"
        "  - name: a\n    topic: a\n    value: {format: avro, message: x.Y}\n"
        "  - name: b\n    topic: b\n    value:\n      format: json\n      columns:\n"
        "        - {name: amount, type: 'decimal(10,2)', path: order.amount}\n"
        "        - {name: ts, type: datetime}\n",
    }
    problems = problems_of(write_project(tmp_path, tables=tables))
    assert any("message only applies to format protobuf" in p for p in problems)
    assert any(
        p.startswith("tables/a.yml:11 [tables[1].value.columns[1].type]") and "'datetime'" in p
        for p in problems
    )
    assert len(problems) == 2  # decimal(10,2) with a path is valid


def test_spark_reserved_table_properties_are_refused(tmp_path: Path) -> None:
    tables = {"a.yml": "tables:\n  - name: a\n    topic: a\n    properties:\n      owner: me\n"}
    problems = problems_of(write_project(tmp_path, tables=tables))
    assert len(problems) == 1
    assert problems[0].startswith("tables/a.yml:4 [tables[0].properties]")
    assert "['owner'] are reserved by Spark" in problems[0]


def test_on_data_loss_defaults_to_fail_and_is_inherited_from_defaults(tmp_path: Path) -> None:
    tables = {
        "t.yml": "tables:\n  - name: a\n    topic: a\n  - name: b\n    topic: b\n"
        "    on_data_loss: fail\n"
    }
    project = load_project(write_project(tmp_path, tables=tables))
    assert project.table("a").on_data_loss == "fail"
    accepting = MINIMAL_PROJECT + "defaults:\n  on_data_loss: accept\n"
    project = load_project(write_project(tmp_path, accepting, tables))
    assert project.table("a").on_data_loss == "accept"
    assert project.table("b").on_data_loss == "fail"  # the table's own value wins
    bad = {"t.yml": "tables:\n  - name: a\n    topic: a\n    on_data_loss: skip\n"}
    (problem,) = problems_of(write_project(tmp_path, MINIMAL_PROJECT, bad))
    assert problem.startswith("tables/t.yml:4 [tables[0].on_data_loss]")
