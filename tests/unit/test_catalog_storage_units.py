"""Object storage settings of the embedded catalog: pure functions, no process."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import SecretStr, ValidationError

from tableflow_core.catalog.errors import StorageUnavailableError, error_info_for
from tableflow_core.catalog.runner import server_arguments
from tableflow_core.catalog.server import parse_args, settings_from_args
from tableflow_core.catalog.settings import CatalogServerSettings
from tableflow_core.catalog.storage import (
    S3_FILE_IO,
    ObjectStorage,
    is_object_store_location,
)

KEYS = ObjectStorage(
    endpoint="http://127.0.0.1:9000",
    access_key_id="AKIDEXAMPLE",
    secret_access_key=SecretStr("s3cr3t-value"),
    vend_credentials=True,
)


def test_local_and_object_store_warehouses() -> None:
    local = CatalogServerSettings(warehouse="./wh", auth="none")
    assert isinstance(local.warehouse, Path) and not local.is_object_store
    assert local.warehouse_uri.startswith("file:///")
    assert CatalogServerSettings(warehouse="file:///tmp/wh", auth="none").warehouse == Path(
        "/tmp/wh"
    )
    s3 = CatalogServerSettings(
        warehouse="s3://bucket/prefix/", database_url="sqlite:///x.db", auth="none", storage=KEYS
    )
    assert s3.is_object_store and s3.warehouse_uri == "s3://bucket/prefix"
    assert s3.file_io_properties["s3.secret-access-key"] == "s3cr3t-value"
    assert s3.file_io_properties["s3.force-virtual-addressing"] == "false"


@pytest.mark.parametrize(
    ("warehouse", "database_url", "problem"),
    [
        ("s3://bucket/p", None, "needs database_url"),
        ("s3:///p", "sqlite:///x.db", "names no bucket"),
        ("gs://bucket/p", "sqlite:///x.db", "only file:// and s3://"),
    ],
)
def test_refused_warehouses(warehouse: str, database_url: str | None, problem: str) -> None:
    with pytest.raises(ValidationError, match=problem):
        CatalogServerSettings(warehouse=warehouse, database_url=database_url, auth="none")


def test_client_config_never_carries_keys() -> None:
    config = KEYS.client_config()
    assert config == {
        "io-impl": S3_FILE_IO,
        "client.region": "us-east-1",
        "s3.region": "us-east-1",
        "s3.path-style-access": "true",
        "s3.endpoint": "http://127.0.0.1:9000",
    }
    assert "s3cr3t-value" not in repr(KEYS) and "s3cr3t-value" not in str(config)


@pytest.mark.parametrize(
    ("storage", "header", "vends"),
    [
        (KEYS, "vended-credentials", True),
        (KEYS, "remote-signing, Vended-Credentials", True),
        (KEYS, "remote-signing", False),
        (KEYS, None, False),
        (KEYS, "", False),
        (KEYS.model_copy(update={"vend_credentials": False}), "vended-credentials", False),
        (ObjectStorage(vend_credentials=True), "vended-credentials", False),  # no keys
    ],
)
def test_vending_needs_the_setting_the_header_and_keys(
    storage: ObjectStorage, header: str | None, vends: bool
) -> None:
    assert storage.vends_to(header) is vends


def test_keys_travel_to_a_child_server_by_environment_only() -> None:
    settings = CatalogServerSettings(
        warehouse="s3://b/p", database_url="sqlite:///x.db", auth="none", storage=KEYS
    )
    arguments = server_arguments(settings)
    assert "s3cr3t-value" not in " ".join(arguments)
    environment = KEYS.environment()
    parsed = settings_from_args(parse_args(arguments), environ=environment)
    assert parsed.storage == KEYS
    assert parsed.warehouse_uri == "s3://b/p"


def test_object_store_locations_and_storage_errors() -> None:
    assert is_object_store_location("s3://b/k") and is_object_store_location("S3://b")
    assert not is_object_store_location("/tmp/x") and not is_object_store_location("file:///x")
    info = error_info_for(StorageUnavailableError("storage error at s3://b/p while ..."))
    assert info is not None and (info.status, info.type) == (503, "ServiceUnavailableException")
