"""Transforms and checks compiled without Spark: output schema, descriptions, located errors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import yaml
from pydantic import TypeAdapter

from tableflow_core.checks import compile_checks
from tableflow_core.config.errors import ConfigError
from tableflow_core.config.loader import load_project
from tableflow_core.config.models.transforms import Transform
from tableflow_core.config.project import Table
from tableflow_core.transforms import compile_transforms, table_locator
from tests.transform_batches import sample_schema

ORDERS = sample_schema("orders")
TRANSFORMS = TypeAdapter(list[Transform])


def project_table(tmp_path: Path, **table: Any) -> Table:
    """A real project on disk, loaded by the real loader (so locations are real)."""
    project = {
        "name": "shop",
        "targets": {"dev": {"kafka": {"bootstrap_servers": "127.0.0.1:1"}}},
    }
    (tmp_path / "tableflow_project.yml").write_text(yaml.safe_dump(project))
    (tmp_path / "tables").mkdir()
    document = {
        "tables": [{"name": "orders", "topic": "orders", "value": {"format": "json"}, **table}]
    }
    (tmp_path / "tables" / "orders.yml").write_text(yaml.safe_dump(document, sort_keys=False))
    return load_project(tmp_path, environ={"TABLEFLOW_MASK_SALT": "s"}).table("orders")


def line_of(table: Table, text: str) -> int:
    lines = table.source.file.read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if text in line)


def compile_table(table: Table) -> Any:
    return compile_transforms(table.transforms, ORDERS, table_locator(table))


def test_output_schema_and_descriptions(tmp_path: Path) -> None:
    table = project_table(
        tmp_path,
        transforms=[
            {
                "type": "mask",
                "columns": ["customer_id"],
                "salt": '{{ env_var("TABLEFLOW_MASK_SALT") }}',
            },
            {"type": "mask", "columns": ["coupon"], "method": "partial", "keep_last": 2},
            {"type": "dedup", "keys": ["order_id"], "keep": "first"},
            {"type": "filter", "where": "status <> 'CANCELLED'"},
            {"type": "derive", "column": "city", "expression": "lower(shipping_address.city)"},
            {"type": "derive", "column": "day", "expression": "to_date(created_at)"},
            {"type": "derive", "column": "quantity", "expression": "CAST(quantity AS BIGINT) * 2"},
            {"type": "rename", "columns": {"order_id": "id", "Currency": "ccy"}},
            {"type": "drop", "columns": ["tags", "shipping_address"]},
        ],
    )
    compiled = compile_table(table)
    out = compiled.output_schema
    assert out.names == [
        "id", "customer_id", "status", "amount", "ccy", "quantity", "created_at", "coupon",
        "city", "day",
    ]  # fmt: skip
    assert out.field("customer_id").type == pa.string()  # hashed
    assert out.field("quantity").type == pa.int64()  # replaced in place
    assert out.field("day").type == pa.date32() and out.field("city").type == pa.string()
    assert compiled.describe() == [
        "mask customer_id: hash (salted SHA-256 hex)",
        "mask coupon: partial (keep first 0, last 2)",
        "dedup on order_id: keep first by Kafka offset",
        "filter where status <> 'CANCELLED'",
        "derive city STRING = lower(shipping_address.city)",
        "derive day DATE = to_date(created_at)",
        "replace quantity BIGINT = CAST(quantity AS BIGINT) * 2",
        "rename order_id -> id, currency -> ccy",
        "drop tags, shipping_address",
    ]
    assert compiled.dedup_keys == ("id",)
    assert "s" not in {step.describe() for step in compiled.steps}


@pytest.mark.parametrize(
    "transform, marker, message",
    [
        ({"type": "filter", "where": "amout > 0"}, "amout", "unknown column 'amout' (did you mean 'amount'?)"),
        ({"type": "filter", "where": "amount >"}, "amount >", "syntax error"),
        ({"type": "filter", "where": "upper(status)"}, "upper(status)", "must be a boolean predicate"),
        ({"type": "filter", "where": "amount > (SELECT 1)"}, "SELECT", "subqueries are not allowed"),
        ({"type": "filter", "where": "sum(amount) > 0"}, "sum(", "aggregate and window functions"),
        ({"type": "derive", "column": "x", "expression": "my_udf(status)"}, "my_udf", "CAST(my_udf(status) AS STRING)"),
        ({"type": "derive", "column": "__tf_x", "expression": "1"}, "__tf_x", "reserved"),
        ({"type": "derive", "column": "n", "expression": "size(filter(transform(tags, t -> CAST(t AS INT)), n -> n > 0))"}, "transform(tags", "TRY_CAST(... AS INT) to accept NULL"),
        ({"type": "mask", "columns": ["tags"], "method": "redact"}, "tags", "masks apply to primitive columns"),
        ({"type": "dedup", "keys": ["nope"]}, "nope", "dedup keys: unknown column 'nope'"),
        ({"type": "rename", "columns": {"status": "amount"}}, "status", "collides"),
        ({"type": "drop", "columns": ["__tf_offset"]}, "__tf_offset", "unknown column"),
    ],
)  # fmt: skip
def test_mistakes_are_located_errors(
    tmp_path: Path, transform: dict[str, Any], marker: str, message: str
) -> None:
    table = project_table(tmp_path, transforms=[{"type": "drop", "columns": ["coupon"]}, transform])
    with pytest.raises(ConfigError) as raised:
        compile_table(table)
    (problem,) = raised.value.problems
    assert message in problem.message
    assert problem.file == table.source.file and problem.line == line_of(table, marker)
    assert problem.field_path is not None and problem.field_path.startswith("transforms[1]")


def test_every_broken_transform_is_reported_and_later_ones_still_checked(tmp_path: Path) -> None:
    table = project_table(
        tmp_path,
        transforms=[
            {"type": "drop", "columns": ["nope"]},
            {"type": "rename", "columns": {"coupon": "code"}},
            {"type": "filter", "where": "coupon IS NULL"},  # renamed away above
        ],
    )
    with pytest.raises(ConfigError) as raised:
        compile_table(table)
    assert [p.field_path for p in raised.value.problems] == [
        "transforms[0].columns[0]",
        "transforms[2].where",
    ]
    assert "unknown column 'coupon'" in raised.value.problems[1].message


def test_hash_needs_a_salt_kept_out_of_the_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as raised:
        project_table(tmp_path, transforms=[{"type": "mask", "columns": ["customer_id"]}])
    assert "needs a salt" in str(raised.value) and "orders.yml:" in str(raised.value)


def test_the_salt_is_a_secret_the_project_redacts(tmp_path: Path) -> None:
    project_table(
        tmp_path,
        transforms=[
            {
                "type": "mask",
                "columns": ["customer_id"],
                "salt": '{{ env_var("TABLEFLOW_MASK_SALT") }}',
            }
        ],
    )
    project = load_project(tmp_path, environ={"TABLEFLOW_MASK_SALT": "very-secret-salt"})
    (mask,) = project.table("orders").transforms
    assert "very-secret-salt" not in repr(mask) and "very-secret-salt" not in mask.model_dump_json()
    assert project.redact("salt=very-secret-salt") == "salt=**********"


def test_checks_compile_against_the_transformed_schema(tmp_path: Path) -> None:
    table = project_table(
        tmp_path,
        on_error="skip",
        transforms=[{"type": "rename", "columns": {"order_id": "id"}}],
        checks=[
            {"type": "not_null", "columns": ["id", "status"]},
            {"type": "unique", "columns": ["id"], "severity": "warn"},
            {"type": "accepted_values", "column": "currency", "values": ["EUR", "USD"]},
            {"type": "range", "column": "quantity", "min": 1, "on_failure": "fail"},
            {
                "type": "expression",
                "name": "paid_has_amount",
                "expression": "status <> 'PAID' OR amount > 0",
            },
            {"type": "row_count", "min": 1},
        ],
    )
    transforms = compile_table(table)
    checks = compile_checks(
        table.checks,
        transforms.output_schema,
        table_locator(table),
        default_on_failure=table.on_error,
    )
    assert checks.describe() == [
        "check not_null(id) (error: skip failing rows)",
        "check not_null(status) (error: skip failing rows)",
        "check unique(id) (warn: warn)",
        "check accepted_values(currency) (error: skip failing rows)",
        "check range(quantity) (error: fail the run)",
        "check paid_has_amount (error: skip failing rows)",
        "check row_count (error: fail the run)",  # batch-level: never skips rows
    ]
    by_name = {c.name: c for c in checks.checks}
    assert by_name["accepted_values(currency)"].failing_rows == (
        "`currency` IS NOT NULL AND NOT (`currency` IN ('EUR', 'USD'))"
    )
    assert (
        by_name["range(quantity)"].failing_rows == "`quantity` IS NOT NULL AND (`quantity` < 1.0)"
    )


@pytest.mark.parametrize(
    "check, marker, message",
    [
        ({"type": "not_null", "columns": ["ordr"]}, "ordr", "unknown column 'ordr'"),
        ({"type": "range", "column": "status", "max": 3}, "status", "range checks numbers"),
        ({"type": "range", "column": "amount"}, "range", "needs min, max or both"),
        ({"type": "row_count", "min": 1, "on_failure": "skip"}, "on_failure", "has no rows to route"),
        ({"type": "expression", "name": "e", "expression": "amount + 1"}, "amount + 1", "boolean predicate"),
        ({"type": "expression", "name": "e", "expression": "nope = 1"}, "nope", "unknown column 'nope'"),
    ],
)  # fmt: skip
def test_check_mistakes_are_located_errors(
    tmp_path: Path, check: dict[str, Any], marker: str, message: str
) -> None:
    table = project_table(
        tmp_path,
        transforms=[{"type": "rename", "columns": {"order_id": "id"}}],
        checks=[{"type": "row_count", "min": 0}, check],
    )
    schema = compile_table(table).output_schema
    with pytest.raises(ConfigError) as raised:
        compile_checks(table.checks, schema, table_locator(table))
    (problem,) = raised.value.problems
    assert message in problem.message
    assert problem.line == line_of(table, marker) and problem.file == table.source.file


def test_derive_plans_a_check_for_every_plain_cast_that_can_fail() -> None:
    """Nested CASTs (any spelling) are checked where Spark evaluates them: a CASE branch,
    an IF, a COALESCE fallback, the right side of AND; TRY_CAST and casts that cannot
    fail (to STRING, to the operand's own type) are not."""
    steps = compile_transforms(
        TRANSFORMS.validate_python(
            [{"type": "derive", "column": "code", "expression":
              "CAST(CASE WHEN coupon RLIKE '^[0-9]+$' THEN int(coupon) + 1 "
              "ELSE coalesce(TRY_CAST(currency AS INT), bigint(status)) END AS BIGINT)"},
             {"type": "derive", "column": "label", "expression":
              "concat(CAST(quantity AS STRING), CAST(customer_id AS BIGINT), "
              "CAST(order_id AS DECIMAL(10, 2)))"}]
        ),
        ORDERS,
        lambda key: None,
    )  # fmt: skip
    code, label = steps.steps
    assert code.value_expression.startswith("CASE WHEN")
    assert [c.cast for c in code.cast_checks] == ["CAST(coupon AS INT)", "BIGINT(status)"]
    guarded, fallback = code.cast_checks
    assert guarded.failed == (
        "COALESCE((coupon RLIKE '^[0-9]+$'), FALSE) AND NOT (coupon) IS NULL "
        "AND TRY_CAST(coupon AS INT) IS NULL"
    )
    assert fallback.failed.startswith(
        "NOT COALESCE((coupon RLIKE '^[0-9]+$'), FALSE) AND (TRY_CAST(currency AS INT)) IS NULL"
    )
    assert [c.cast for c in label.cast_checks] == ["CAST(order_id AS DECIMAL(10, 2))"]


def test_sensitive_columns_follow_renames_and_derives(tmp_path: Path) -> None:
    """The columns whose values no message may quote: masked ones, named as they are at
    each step, before the mask as after it; a derived column masked later too."""
    table = project_table(
        tmp_path,
        transforms=[
            {"type": "rename", "columns": {"customer_id": "customer"}},
            {"type": "derive", "column": "code", "expression": "upper(coupon)"},
            {"type": "filter", "where": "amount > 0"},
            {"type": "mask", "columns": ["customer", "code"], "method": "redact"},
            {"type": "rename", "columns": {"customer": "who"}},
        ],
    )
    chain = compile_table(table)
    rename, derive, filter_, mask, last = chain.steps
    assert chain.sensitive_columns() == {"customer_id"}  # decoded names: `code` is derived
    assert chain.sensitive_columns(rename) == {"customer_id"}
    assert chain.sensitive_columns(derive) == {"customer"}
    assert chain.sensitive_columns(filter_) == {"customer", "code"}
    assert chain.sensitive_columns(mask) == {"customer", "code"}
    assert chain.sensitive_columns(last) == {"customer", "code"}
    # `coupon` itself is not masked: the derive copied it, the user chose that
    assert "coupon" not in chain.sensitive_columns(filter_)
