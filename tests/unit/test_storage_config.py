"""The target's `storage` block: validation, and what each client is given (no process)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from pydantic import ValidationError

from tableflow_core.catalog.project_settings import (
    embedded_server_settings,
    server_storage,
)
from tableflow_core.catalog.storage import ACCESS_DELEGATION_HEADER, S3_FILE_IO
from tableflow_core.config.loader import load_project
from tableflow_core.config.models.catalogs import EmbeddedCatalog, ObjectStorage, RestCatalog
from tableflow_core.engine.spark_session import REDACTION_REGEX
from tableflow_core.targets.storage import (
    AWS_CHECKSUM_JAVA_OPTIONS,
    StorageAccess,
    object_store_java_options,
)

ID, SECRET, TOKEN = "AKIAEXAMPLEKEYID", "s3cr3t-Acc3ss-K3y", "session-T0ken"
HEADER = f"header.{ACCESS_DELEGATION_HEADER}"


def storage(**values: object) -> ObjectStorage:
    return ObjectStorage.model_validate(values)


def static() -> ObjectStorage:
    return storage(endpoint="http://127.0.0.1:19000", access_key_id=ID, secret_access_key=SECRET)


def test_credentials_are_derived_from_what_is_given() -> None:
    assert static().credential_source == "static"
    assert storage().credential_source == "default-chain"
    assert storage(credentials="vended").credential_source == "vended"
    # The embedded catalog vends the keys it holds.
    vending = storage(access_key_id=ID, secret_access_key=SECRET, credentials="vended")
    assert vending.credential_source == "vended"


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"access_key_id": ID}, "both access_key_id and secret_access_key"),
        ({"session_token": TOKEN}, "session_token needs"),
        ({"credentials": "static"}, "credentials static needs"),
        (
            {"credentials": "default-chain", "access_key_id": ID, "secret_access_key": SECRET},
            "default-chain takes no keys",
        ),
        ({"endpoint": "127.0.0.1:9000"}, "must be an http:// or https:// URL"),
        ({"endpoint": "http://host:9000/bucket"}, "no path"),
        ({"credentials": "sts"}, "credentials"),
    ],
)
def test_a_storage_block_that_cannot_work_is_refused(values: dict, message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        storage(**values)


def test_the_keys_are_secrets_in_every_dump() -> None:
    dumped = static().model_dump_json()
    assert ID not in dumped and SECRET not in dumped
    assert SECRET not in repr(static())


def test_an_s3_warehouse_needs_a_storage_block_and_a_database() -> None:
    with pytest.raises(ValidationError, match="add a `storage` block"):
        EmbeddedCatalog(warehouse="s3://bucket/shop", database_url="sqlite:///c.db")
    with pytest.raises(ValidationError, match="set database_url"):
        EmbeddedCatalog(warehouse="s3://bucket/shop", storage=static())
    with pytest.raises(ValidationError, match="names no bucket"):
        EmbeddedCatalog(warehouse="s3:///shop", storage=static(), database_url="sqlite:///c")
    with pytest.raises(ValidationError, match="local path"):
        EmbeddedCatalog(warehouse="./warehouse", storage=static())
    with pytest.raises(ValidationError, match="use a path, file:// or s3://"):
        EmbeddedCatalog(warehouse="gs://bucket/shop")
    ok = EmbeddedCatalog(warehouse="s3://bucket/shop", storage=static(), database_url="sqlite:///c")
    assert ok.storage is not None


def test_each_client_gets_what_it_needs_with_static_keys() -> None:
    access = StorageAccess(static())
    spark = access.spark_properties()
    assert spark["io-impl"] == S3_FILE_IO
    assert spark["s3.endpoint"] == "http://127.0.0.1:19000"
    assert spark["s3.path-style-access"] == "true"
    assert (spark["s3.access-key-id"], spark["s3.secret-access-key"]) == (ID, SECRET)
    assert HEADER not in spark

    pyiceberg = access.pyiceberg_properties()
    assert pyiceberg["s3.force-virtual-addressing"] == "false"  # path style
    assert pyiceberg[HEADER] == ""  # do not ask for vended keys
    assert (pyiceberg["s3.access-key-id"], pyiceberg["s3.secret-access-key"]) == (ID, SECRET)

    duck = dict(access.duckdb_access().secret_options)
    assert duck == {
        "REGION": "us-east-1",
        "ENDPOINT": "127.0.0.1:19000",
        "USE_SSL": False,
        "URL_STYLE": "path",
        "KEY_ID": ID,
        "SECRET": SECRET,
    }
    assert access.driver_java_options() == AWS_CHECKSUM_JAVA_OPTIONS


def test_vended_credentials_give_no_client_a_key() -> None:
    access = StorageAccess(
        storage(
            endpoint="https://s3.example.com",
            access_key_id=ID,
            secret_access_key=SECRET,
            credentials="vended",
            path_style_access=False,
        )
    )
    for properties in (access.spark_properties(), access.pyiceberg_properties()):
        assert properties[HEADER] == "vended-credentials"
        assert ID not in properties.values() and SECRET not in properties.values()
    assert access.pyiceberg_properties()["s3.force-virtual-addressing"] == "true"
    assert access.duckdb_access().vended
    # ... but the embedded server holds them, to vend.
    server = server_storage(access.config)
    assert server.vend_credentials and server.credential_config()["s3.access-key-id"] == ID


def test_the_default_chain_gives_no_key_and_duckdb_uses_the_chain() -> None:
    access = StorageAccess(storage(region="eu-west-1"))
    assert not {"s3.access-key-id", "s3.secret-access-key"} & set(access.spark_properties())
    assert access.spark_properties()["client.region"] == "eu-west-1"
    options = dict(access.duckdb_access().secret_options)
    assert "KEY_ID" not in options and options["REGION"] == "eu-west-1"
    assert "ENDPOINT" not in options  # AWS itself
    assert access.driver_java_options() == ()  # AWS S3 takes the SDK's checksums


def test_object_store_java_options_only_for_object_storage() -> None:
    assert object_store_java_options(EmbeddedCatalog()) == ()
    rest = RestCatalog(uri="https://c.example.com", storage=static())
    assert object_store_java_options(rest) == AWS_CHECKSUM_JAVA_OPTIONS


def test_spark_redacts_every_key_the_storage_block_produces() -> None:
    pattern = re.compile(REDACTION_REGEX.removeprefix("(?i)"), re.IGNORECASE)
    secret_keys = {"s3.access-key-id", "s3.secret-access-key", "s3.session-token"}
    for key in secret_keys:
        assert pattern.search(f"spark.sql.catalog.tf.{key}"), key
    for key in set(StorageAccess(static()).spark_properties()) - secret_keys:
        assert not pattern.search(f"spark.sql.catalog.tf.{key}"), key


def test_the_embedded_server_serves_the_s3_warehouse_as_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "tableflow_project.yml").write_text(
        """
name: shop
default_target: dev
targets:
  dev:
    kafka: {bootstrap_servers: "127.0.0.1:9092"}
    catalog:
      type: embedded
      warehouse: s3://warehouse/shop/
      database_url: sqlite:///./.tableflow/catalog.db
      auth: {mode: none}
      storage:
        endpoint: "http://127.0.0.1:19000"
        access_key_id: "{{ env_var('T_S3_ID') }}"
        secret_access_key: "{{ env_var('T_S3_SECRET') }}"
"""
    )
    monkeypatch.setenv("T_S3_ID", ID)
    monkeypatch.setenv("T_S3_SECRET", SECRET)
    project = load_project(tmp_path)
    catalog = project.target.catalog
    assert isinstance(catalog, EmbeddedCatalog)
    settings = embedded_server_settings(project, catalog)
    assert settings.warehouse_uri == "s3://warehouse/shop"
    # A relative SQLite path is the project's, not the working directory's.
    assert settings.database_url == f"sqlite:///{tmp_path.resolve()}/.tableflow/catalog.db"
    assert settings.file_io_properties["s3.secret-access-key"] == SECRET
    assert {ID, SECRET} <= project.secrets  # redacted from every output
    assert project.redact(f"key {ID} secret {SECRET}") == "key ********** secret **********"


def test_an_embedded_catalog_vends_temporary_credentials_of_a_role() -> None:
    role = "arn:aws:iam::123456789012:role/lake-tables"
    block = storage(
        endpoint="http://127.0.0.1:19000",
        access_key_id=ID,
        secret_access_key=SECRET,
        credentials="vended",
        vend_role_arn=role,
        sts_endpoint="http://127.0.0.1:19001",
        vended_credential_seconds=900,
    )
    server = server_storage(block)
    assert (server.sts_role_arn, server.sts_endpoint) == (role, "http://127.0.0.1:19001")
    assert server.vended_credential_seconds == 900
    arguments = server.server_arguments()
    assert arguments[arguments.index("--sts-role-arn") + 1] == role
    assert arguments[arguments.index("--vended-credential-seconds") + 1] == "900"
    assert SECRET not in " ".join(arguments)  # keys still go through the environment
    # The engines are still told nothing but to ask the catalog.
    assert StorageAccess(block).spark_properties()[HEADER] == "vended-credentials"


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"vend_role_arn": "arn:aws:iam::1:role/r"}, "vend_role_arn needs credentials: vended"),
        ({"credentials": "vended", "sts_endpoint": "http://h:1"}, "sts_endpoint is for"),
        ({"credentials": "vended", "vended_credential_seconds": 5}, "greater than or equal"),
    ],
)
def test_vend_role_settings_are_checked(values: dict[str, object], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        storage(**values)


def test_an_external_rest_catalog_takes_no_vend_role() -> None:
    with pytest.raises(ValidationError, match="decides what it vends"):
        RestCatalog.model_validate(
            {
                "uri": "https://catalog.example.com",
                "storage": {"credentials": "vended", "vend_role_arn": "arn:aws:iam::1:role/r"},
            }
        )
