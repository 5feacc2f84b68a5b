"""Which tables `tableflow run` maintains without their lock (maintenance/beside_ingest)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from tableflow_core.config.models.dead_letter import IcebergDeadLetter
from tableflow_core.maintenance.beside_ingest import maintained_beside_ingest


def table(**config: Any) -> Any:
    values: dict[str, Any] = {
        "mode": "append", "publish_to": (), "formats": ("iceberg",), "dlq": None,
    }  # fmt: skip
    return SimpleNamespace(**{**values, **config})


def test_a_plain_append_table_is_maintained_beside_its_ingest() -> None:
    assert maintained_beside_ingest(table())


def test_an_append_table_with_an_iceberg_dead_letter_table_too() -> None:
    """Both dead-letter writers retry on a conflict with the dead-letter table's maintenance."""
    assert maintained_beside_ingest(table(dlq=IcebergDeadLetter(type="iceberg", table="ns.dead")))


@pytest.mark.parametrize(
    "config",
    [
        {"mode": "upsert"},
        {"publish_to": ("nessie",)},
        {"formats": ("iceberg", "delta")},
    ],
    ids=["upsert", "publish_to", "delta"],
)
def test_the_others_keep_the_lock(config: dict[str, Any]) -> None:
    assert not maintained_beside_ingest(table(**config))
