from pathlib import Path

from tableflow_core.config.models.tables import TableConfig
from tableflow_core.config.reference import render_reference

REFERENCE = Path(__file__).resolve().parents[2] / "docs" / "reference.md"


def test_reference_is_up_to_date() -> None:
    assert REFERENCE.read_text() == render_reference(), (
        "docs/reference.md is stale: run `python -m tableflow_core.config.reference > docs/reference.md`"
    )


def test_every_table_key_is_documented() -> None:
    text = render_reference()
    for name in TableConfig.model_fields:
        assert f"| `{name}` |" in text
    assert all(field.description for field in TableConfig.model_fields.values())


def test_keys_plan_refuses_are_marked_not_supported() -> None:
    from tableflow_core.plan.capabilities import TABLE_GATES, UNSUPPORTED_SPARK_CATALOGS

    text = render_reference()
    tables = text.split("## `tables[]", 1)[1].split("\n## ", 1)[0]
    for gate in TABLE_GATES:
        row = next(line for line in tables.splitlines() if line.startswith(f"| `{gate.key}` |"))
        assert "**Not supported yet**" in row, row
    for catalog_type in UNSUPPORTED_SPARK_CATALOGS:
        section = text.split(f"## `catalog: type {catalog_type}`", 1)[1].split("\n## ", 1)[0]
        assert "**Not supported yet**" in section
    topic = next(line for line in tables.splitlines() if line.startswith("| `topic` |"))
    assert "**Not supported yet**" not in topic
