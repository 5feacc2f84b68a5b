"""Issue #32: secrets outside SecretStr never reach an output: passwords in URLs, secret
settings in `kafka.config`, catalog `properties` and Spark conf. Pure unit tests and the
CLI in-process (no process, no server)."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import get_args

import pytest
from click.testing import CliRunner

from tableflow_core.catalog.runner import RedactSecretsFilter
from tableflow_core.cli.main import cli
from tableflow_core.config.loader import load_project
from tableflow_core.config.models.catalogs import StorageCredentials
from tableflow_core.docs_site.model import Enrichment, build_graph
from tableflow_core.docs_site.pages import render_table_page
from tableflow_core.redaction import (
    DECLARED_WORDS,
    MASK,
    is_secret_key,
    redact_mapping,
    redact_setting,
    redact_text,
    redact_url,
)
from tableflow_core.schemas.formats import FormatSpec
from tableflow_core.schemas.registry import RegistrySettings
from tableflow_core.schemas.resolve import SchemaResolutionError, resolve_schema

SECRETS = {
    "registry": "reg-pw-7f3a",
    "sasl": "kafka-sasl-9c1e",
    "jaas": "jaas-pw-44d0",
    "keypass": "ssl-key-pw-5b2f",
    "token": "rest-token-81aa",
    "s3": "s3-secret-0e9d",
    "spark": "spark-s3a-secret-6c77",
    "sql": "sql-pw-2d18",
    "jdbc": "jdbc-pw-9e04",
    "property": "table-prop-secret-3f51",
}

PROJECT = f"""
name: leaky
targets:
  dev:
    kafka:
      bootstrap_servers: "broker:9092"
      config:
        sasl.mechanism: PLAIN
        sasl.password: {SECRETS["sasl"]}
        sasl.jaas.config: 'org.apache.kafka.common.security.plain.PlainLoginModule required username="u" password="{SECRETS["jaas"]}";'
        ssl.key.password: {SECRETS["keypass"]}
        receive.message.max.bytes: 2147483647
    schema_registry:
      url: "http://alice:{SECRETS["registry"]}@127.0.0.1:1"
    catalog:
      type: rest
      uri: "https://catalog.example.com/api"
      properties:
        token: {SECRETS["token"]}
        s3.secret-access-key: {SECRETS["s3"]}
        s3.endpoint: "http://minio:9000"
    publish_catalogs:
      lake:
        type: sql
        uri: "postgresql+psycopg2://bob:{SECRETS["sql"]}@db:5432/iceberg"
        jdbc_uri: "jdbc:postgresql://db:5432/iceberg?user=bob&password={SECRETS["jdbc"]}"
        warehouse: "s3://lake/wh"
    spark:
      conf:
        spark.hadoop.fs.s3a.secret.key: {SECRETS["spark"]}
        spark.sql.shuffle.partitions: 4
table_paths: [tables]
"""
TABLES = f"""
tables:
  - name: orders
    topic: orders
    value: {{format: avro}}
    properties:
      write.format.default: parquet
      s3.secret-access-key: {SECRETS["property"]}
"""


@pytest.fixture
def project_dir(tmp_path: Path) -> Path:
    (tmp_path / "tableflow_project.yml").write_text(PROJECT)
    (tmp_path / "tables").mkdir()
    (tmp_path / "tables" / "orders.yml").write_text(TABLES)
    return tmp_path


def assert_no_secret(text: str) -> None:
    leaked = [name for name, value in SECRETS.items() if value in text]
    assert not leaked, f"leaked: {leaked}"


@pytest.mark.parametrize(
    "key",
    [
        "sasl.password", "ssl.key.password", "sasl.jaas.config", "basic.auth.user.info",
        "sasl.oauthbearer.client.secret", "token", "credential", "s3.secret-access-key",
        "s3.access-key-id", "s3.session-token", "adls.account-key", "gcs.oauth2.token",
        "spark.hadoop.fs.s3a.secret.key", "spark.hadoop.fs.s3a.access.key",
        "spark.ssl.keyStorePassword", "spark.authenticate.secret", "PASSWORD",
    ],
)  # fmt: skip
def test_secret_keys(key: str) -> None:
    assert is_secret_key(key)


@pytest.mark.parametrize(
    "key",
    [
        "sasl.mechanism", "bootstrap.servers", "receive.message.max.bytes", "s3.endpoint",
        "key", "key_columns", "rest.auth.type", "oauth2-server-uri", "scope",
        "spark.sql.shuffle.partitions", "write.format.default", "ssl.key.location",
        "spark.sql.session.timeZone", "topic",
    ],
)  # fmt: skip
def test_ordinary_keys(key: str) -> None:
    assert not is_secret_key(key)


def test_urls() -> None:
    assert redact_url("http://alice:pw@host:8081/x") == f"http://alice:{MASK}@host:8081/x"
    assert redact_url("postgresql+psycopg2://u:p@ss@db/x") == f"postgresql+psycopg2://u:{MASK}@db/x"
    assert redact_url("jdbc:postgresql://db/x?user=u&password=p1") == (
        f"jdbc:postgresql://db/x?user=u&password={MASK}"
    )
    assert redact_url("jdbc:sqlserver://db;user=u;password=p2;db=x") == (
        f"jdbc:sqlserver://db;user=u;password={MASK};db=x"
    )
    assert redact_url("http://host:8081/subjects") == "http://host:8081/subjects"
    text = "cannot reach https://u:zz9@reg.example.com: refused (client_secret=abc&x=1)"
    assert redact_text(text) == (
        f"cannot reach https://u:{MASK}@reg.example.com: refused (client_secret={MASK}&x=1)"
    )
    assert redact_text("the value s3cr3t here", ["s3cr3t"]) == f"the value {MASK} here"
    jaas = 'PlainLoginModule required username="u" password="p w";'
    assert redact_text(jaas) == f'PlainLoginModule required username="u" password="{MASK}";'
    data = {"a": {"sasl.password": "x", "n": 1, "url": "http://u:v@h"}, "l": [{"token": "t"}]}
    assert redact_mapping(data) == {
        "a": {"sasl.password": MASK, "n": 1, "url": f"http://u:{MASK}@h"},
        "l": [{"token": MASK}],
    }


def test_compile_prints_no_secret(project_dir: Path) -> None:
    result = CliRunner().invoke(cli, ["--project-dir", str(project_dir), "compile"])
    assert result.exit_code == 0, result.output
    assert_no_secret(result.output)
    compiled = json.loads(result.output)
    target = compiled["target_config"]
    assert target["kafka"]["config"]["sasl.mechanism"] == "PLAIN"  # the rest stays readable
    assert target["kafka"]["config"]["sasl.password"] == MASK
    assert target["spark"]["conf"]["spark.sql.shuffle.partitions"] == 4
    assert target["schema_registry"]["url"] == f"http://alice:{MASK}@127.0.0.1:1"
    assert compiled["tables"][0]["properties"]["write.format.default"] == "parquet"


def test_project_redact_knows_every_secret_of_the_project(project_dir: Path) -> None:
    project = load_project(project_dir)
    text = " ".join(SECRETS.values()) + " and https://x:unknown-pw@elsewhere"
    redacted = project.redact(text)
    assert_no_secret(redacted)
    assert "unknown-pw" not in redacted


def test_registry_errors_name_the_registry_without_its_password() -> None:
    registry = RegistrySettings(url=f"http://alice:{SECRETS['registry']}@127.0.0.1:1")
    with pytest.raises(SchemaResolutionError) as refused:
        resolve_schema("orders", FormatSpec(format="avro"), None, (), registry)
    message = str(refused.value)
    assert "127.0.0.1:1" in message
    assert_no_secret(message)


def test_docs_site_shows_no_secret_property(project_dir: Path) -> None:
    project = load_project(project_dir)
    table = project.tables[0]
    notes = (project.redact(f"schema not resolved: registry at {project.target.schema_registry}"),)
    page = render_table_page(
        project, table, build_graph(project, project.tables), Enrichment(notes=notes), "now"
    )
    assert_no_secret(page)
    assert "parquet" in page


def test_catalog_access_log_masks_url_passwords_and_secret_parameters() -> None:
    record = logging.LogRecord(
        "uvicorn.access", logging.INFO, __file__, 1,
        '%s - "%s %s HTTP/1.1" %d',
        ("127.0.0.1", "GET", "/v1/config?token=tok1&password=pw1&x=http://u:pw2@h", 200),
        None,
    )  # fmt: skip
    RedactSecretsFilter().filter(record)
    logged = record.getMessage()
    assert "tok1" not in logged and "pw1" not in logged and "pw2" not in logged
    assert "/v1/config?token=" in logged and "x=http://u:" in logged


STORAGE_PROJECT = """
name: lake
targets:
  dev:
    kafka: {{bootstrap_servers: "broker:9092"}}
    schema_registry: {{url: "http://127.0.0.1:1"}}
    catalog:
      type: rest
      uri: "https://catalog.example.com/api"
      credential: "{{{{ env_var('TF_TEST_CREDENTIAL') }}}}"
      warehouse: s3://lake/wh
      storage:
        endpoint: "http://127.0.0.1:19000"
        credentials: {credentials}
{keys}
table_paths: [tables]
"""


@pytest.mark.parametrize("credentials", ["vended", "static", "default-chain"])
def test_compile_shows_the_storage_credentials_word_and_masks_the_keys(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, credentials: str
) -> None:
    monkeypatch.setenv("TF_TEST_CREDENTIAL", "client:catalog-secret-77a1")
    monkeypatch.setenv("TF_TEST_KEY_ID", "key-id-4b2c")
    monkeypatch.setenv("TF_TEST_SECRET", "s3-secret-8d3e")
    keys = (
        "        access_key_id: \"{{ env_var('TF_TEST_KEY_ID') }}\"\n"
        "        secret_access_key: \"{{ env_var('TF_TEST_SECRET') }}\""
        if credentials == "static"
        else ""
    )
    (tmp_path / "tableflow_project.yml").write_text(
        STORAGE_PROJECT.format(credentials=credentials, keys=keys)
    )
    (tmp_path / "tables").mkdir()
    (tmp_path / "tables" / "orders.yml").write_text(TABLES)

    result = CliRunner().invoke(cli, ["--project-dir", str(tmp_path), "compile"])
    assert result.exit_code == 0, result.output
    for secret in ("catalog-secret-77a1", "key-id-4b2c", "s3-secret-8d3e"):
        assert secret not in result.output
    catalog = json.loads(result.output)["target_config"]["catalog"]
    assert catalog["storage"]["credentials"] == credentials  # a mode, not a secret
    assert catalog["credential"] == MASK
    if credentials == "static":
        assert catalog["storage"]["access_key_id"] == MASK
        assert catalog["storage"]["secret_access_key"] == MASK
    # The docs site's property rows and the project's own redaction agree.
    assert redact_setting("credentials", credentials) == credentials
    assert load_project(tmp_path).redact(f"credentials: {credentials}") == (
        f"credentials: {credentials}"
    )


def test_declared_words_are_the_storage_credential_modes() -> None:
    assert set(get_args(StorageCredentials)) == DECLARED_WORDS["credentials"]
    # Any other value under the key is still taken for a secret.
    assert redact_mapping({"credentials": "id:s3cr3t"}) == {"credentials": MASK}
    assert redact_setting("credentials", "vended-ish") == MASK
    assert redact_mapping({"credential": "vended"}) == {"credential": MASK}
