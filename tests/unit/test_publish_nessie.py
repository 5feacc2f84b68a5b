"""The Nessie publisher's pure parts and its config (the commits: tests/integration/test_nessie_interop.py)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from pydantic import ValidationError

from tableflow_core.config.models.targets import Target
from tableflow_core.publish.nessie import content_key, put_operation, table_content
from tableflow_core.publish.registry import PUBLISHERS

KAFKA = {"bootstrap_servers": "127.0.0.1:9092"}


def test_nessie_is_a_publish_catalog_and_not_a_target_catalog() -> None:
    target = Target.model_validate(
        {
            "kafka": KAFKA,
            "publish_catalogs": {
                "lake": {"type": "nessie", "uri": "http://nessie:19120/api/v2", "token": "t0k"}
            },
        }
    )
    lake = target.publish_catalogs["lake"]
    assert lake.type == "nessie" and lake.ref == "main"
    assert "t0k" not in repr(target)
    assert "nessie" in PUBLISHERS
    with pytest.raises(ValidationError):
        Target.model_validate({"kafka": KAFKA, "catalog": {"type": "nessie", "uri": "http://n"}})


@pytest.mark.parametrize("ref", ["main", "dev/feature-1", "release.2026"])
def test_branch_names_nessie_accepts(ref: str) -> None:
    config = {"type": "nessie", "uri": "http://n/api/v2", "ref": ref}
    Target.model_validate({"kafka": KAFKA, "publish_catalogs": {"n": config}})


@pytest.mark.parametrize("ref", ["", "main\n", "a..b", "-x", "a/", "a b"])
def test_branch_names_nessie_refuses(ref: str) -> None:
    config = {"type": "nessie", "uri": "http://n/api/v2", "ref": ref}
    with pytest.raises(ValidationError):
        Target.model_validate({"kafka": KAFKA, "publish_catalogs": {"n": config}})


def test_table_content_carries_the_metadata_ids_and_the_content_id_of_an_update() -> None:
    metadata = SimpleNamespace(
        current_snapshot_id=42, current_schema_id=3, default_spec_id=1, default_sort_order_id=0
    )
    new = table_content(metadata, "s3://w/t/metadata/2.json", None)
    assert new == {
        "type": "ICEBERG_TABLE",
        "metadataLocation": "s3://w/t/metadata/2.json",
        "snapshotId": 42,
        "schemaId": 3,
        "specId": 1,
        "sortOrderId": 0,
    }
    moved = table_content(metadata, "s3://w/t/metadata/3.json", "cid")
    assert moved["id"] == "cid"
    empty = SimpleNamespace(**{**vars(metadata), "current_snapshot_id": None})
    assert table_content(empty, "x", None)["snapshotId"] == -1  # a table with no snapshot
    operation = put_operation(("shop", "orders"), new)
    assert operation["key"] == {"elements": ["shop", "orders"]} and operation["type"] == "PUT"


def test_content_keys_are_quoted_into_the_path() -> None:
    assert content_key(("shop", "orders")) == "shop.orders"
    assert content_key(("a b", "c/d")) == "a%20b.c%2Fd"
