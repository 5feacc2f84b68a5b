from pathlib import Path

from tableflow_core.config.models import TableConfig
from tableflow_core.config.reference import render_reference

REFERENCE = Path(__file__).resolve().parents[1] / "docs" / "reference.md"


def test_reference_is_up_to_date() -> None:
    assert REFERENCE.read_text() == render_reference(), (
        "docs/reference.md is stale: run `python -m tableflow_core.config.reference > docs/reference.md`"
    )


def test_every_table_key_is_documented() -> None:
    text = render_reference()
    for name in TableConfig.model_fields:
        assert f"| `{name}` |" in text
    assert all(field.description for field in TableConfig.model_fields.values())
