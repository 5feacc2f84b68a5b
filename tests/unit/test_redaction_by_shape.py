"""Issue 41, item 5: redaction follows what a value is, not a short list of names.

The secret key names are real ones, copied from the configuration references of
Apache Kafka's Java clients, librdkafka, the AWS SDKs/CLI and S3's request headers,
Apache Spark, Hadoop's s3a/abfs/gcs connectors and Apache Iceberg's catalog and FileIO
properties; the visible ones are real non-secret names of the same references (paths of
key files, modes, endpoints), which must stay readable. Then `compile` on a project
holding the values the issue found printed.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from tableflow_core.cli.main import cli
from tableflow_core.redaction import MASK, is_secret_key, redact_mapping, redact_url, url_secrets

CREDENTIAL_KEYS = {
    "Kafka (Java clients, Schema Registry clients)": [
        "ssl.key.password", "ssl.keystore.password", "ssl.truststore.password",
        "ssl.keystore.key", "sasl.jaas.config", "sasl.oauthbearer.client.credentials.client.secret",
        "sasl.oauthbearer.assertion.private.key.passphrase", "basic.auth.user.info",
        "bearer.auth.token", "schema.registry.basic.auth.user.info",
        "schema.registry.ssl.keystore.password", "sasl.login.password",
    ],
    "librdkafka": [
        "sasl.password", "ssl.key.pem", "ssl.keystore.password", "sasl.oauthbearer.client.secret",
        "ssl.key.password",
    ],
    "AWS": [
        "aws_access_key_id", "aws_secret_access_key", "aws_session_token",
        "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "x-amz-security-token",
        "X-Amz-Signature", "X-Amz-Credential", "SSECustomerKey",
        "x-amz-server-side-encryption-customer-key", "sse_customer_key",
    ],
    "Spark": [
        "spark.authenticate.secret", "spark.ssl.keyPassword", "spark.ssl.keyStorePassword",
        "spark.ssl.trustStorePassword", "spark.ssl.ui.keyStorePassword",
        "spark.hadoop.fs.s3a.secret.key", "spark.hadoop.fs.s3a.access.key",
        "spark.hadoop.fs.s3a.session.token", "spark.hadoop.fs.s3a.encryption.key",
        "spark.kubernetes.authenticate.driver.oauthToken",
        "spark.kubernetes.authenticate.submission.oauthToken",
    ],
    "Hadoop (s3a, abfs, gcs)": [
        "fs.s3a.access.key", "fs.s3a.secret.key", "fs.s3a.session.token",
        "fs.s3a.encryption.key", "fs.s3a.server-side-encryption.key",
        "fs.s3a.bucket.lake.secret.key", "fs.s3a.proxy.password",
        "fs.azure.account.key.lake.dfs.core.windows.net", "fs.azure.account.oauth2.client.secret",
        "fs.gs.auth.service.account.private.key", "fs.gs.auth.service.account.private.key.id",
    ],
    "Iceberg": [
        "s3.secret-access-key", "s3.access-key-id", "s3.session-token", "s3.sse.key",
        "credential", "token", "adls.sas-token.lake.dfs.core.windows.net",
        "adls.auth.shared-key.account.key", "gcs.oauth2.token", "header.Authorization",
        "rest.secret-access-key", "rest.session-token", "client.secret",
    ],
    "elsewhere (variables, headers, environment)": [
        "db_pass", "api_key", "apiKey", "X-API-Key", "private_key", "PGPASSWORD", "MYSQL_PWD",
        "password", "Cookie", "Proxy-Authorization",
    ],
}  # fmt: skip

VISIBLE_KEYS = [
    "bootstrap.servers", "security.protocol", "sasl.mechanism", "sasl.mechanisms",
    "sasl.username", "ssl.key.location", "ssl.keystore.location", "ssl.truststore.location",
    "ssl.certificate.location", "ssl.ca.location", "ssl.certificate.pem", "ssl.ca.pem",
    "ssl.endpoint.identification.algorithm", "ssl.keystore.type", "key.deserializer",
    "key.serializer", "key.subject.name.strategy", "sasl.oauthbearer.token.endpoint.url",
    "sasl.oauthbearer.assertion.private.key.file", "basic.auth.credentials.source",
    "spark.io.encryption.keySizeBits", "spark.network.crypto.keyLength",
    "spark.sql.session.timeZone", "fs.s3a.endpoint", "fs.s3a.path.style.access",
    "fs.s3a.encryption.algorithm", "fs.azure.sas.token.provider.type", "s3.endpoint",
    "s3.path-style-access", "s3.sse.type", "s3.session-token-expires-at-ms", "rest.auth.type",
    "oauth2-server-uri", "scope", "write.format.default", "key", "key_columns", "topic",
    "partition.key", "client.id", "group.id", "schema.registry.url", "client.region",
]  # fmt: skip


def test_at_least_fifty_real_credential_names() -> None:
    names = {key for keys in CREDENTIAL_KEYS.values() for key in keys}
    assert len(names) >= 50


@pytest.mark.parametrize("key", [key for keys in CREDENTIAL_KEYS.values() for key in keys])
def test_credential_names_are_secret(key: str) -> None:
    assert is_secret_key(key)


@pytest.mark.parametrize("key", VISIBLE_KEYS)
def test_other_names_stay_visible(key: str) -> None:
    assert not is_secret_key(key)


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("https://reg.example.com/?api_key=AK123", f"https://reg.example.com/?api_key={MASK}"),
        ("https://h/x?key=AIzaSy0&alt=json", f"https://h/x?key={MASK}&alt=json"),
        ("https://h/b/f?sv=1&sig=abc%2Bdef&se=2", f"https://h/b/f?sv=1&sig={MASK}&se=2"),
        (
            "https://b.s3.amazonaws.com/k?X-Amz-Credential=AKIA/x&X-Amz-Signature=f00",
            f"https://b.s3.amazonaws.com/k?X-Amz-Credential={MASK}&X-Amz-Signature={MASK}",
        ),
        ("https://h/?access_token=t0k", f"https://h/?access_token={MASK}"),
        ("https://ghp_secrettoken@github.com/o/r", f"https://{MASK}@github.com/o/r"),
        ("https://alice:pw@h/", f"https://alice:{MASK}@h/"),
        ("https://h/?user=alice&page=2", "https://h/?user=alice&page=2"),
    ],
)
def test_url_credentials(url: str, shown: str) -> None:
    assert redact_url(url) == shown
    secret_free = shown.replace(MASK, "")
    assert all(secret not in secret_free for secret in url_secrets(url))


def test_nested_settings_are_masked_by_shape() -> None:
    data = {
        "kafka": {"ssl.key.pem": "-----BEGIN PRIVATE KEY-----x", "ssl.key.location": "/k.pem"},
        "catalog": {"header.Authorization": "Bearer abc", "s3.sse.key": "c2VjcmV0"},
    }
    assert redact_mapping(data) == {
        "kafka": {"ssl.key.pem": MASK, "ssl.key.location": "/k.pem"},
        "catalog": {"header.Authorization": MASK, "s3.sse.key": MASK},
    }


SECRETS = {
    "pem": "PEMBODY-1f2e",
    "api_key": "regkey-77aa",
    "authorization": "bearer-9d0c",
    "sse": "ssekey-4b4b",
    "s3a": "s3aenc-1234",
    "db_pass": "dbpass-5e6f",
}

PROJECT = f"""
name: shapes
vars:
  db_pass: {SECRETS["db_pass"]}
targets:
  dev:
    kafka:
      bootstrap_servers: "broker:9092"
      config:
        ssl.key.pem: "-----BEGIN PRIVATE KEY-----{SECRETS["pem"]}"
        ssl.key.location: /etc/kafka/client.key
    schema_registry:
      url: "https://registry.example.com/?api_key={SECRETS["api_key"]}"
    catalog:
      type: rest
      uri: "https://catalog.example.com/api"
      properties:
        header.Authorization: "Bearer {SECRETS["authorization"]}"
        s3.sse.key: {SECRETS["sse"]}
        s3.sse.type: custom
    spark:
      conf:
        spark.hadoop.fs.s3a.encryption.key: {SECRETS["s3a"]}
        spark.hadoop.fs.s3a.encryption.algorithm: SSE-C
table_paths: [tables]
"""


def test_compile_prints_none_of_the_secrets_the_issue_found(tmp_path: Path) -> None:
    (tmp_path / "tableflow_project.yml").write_text(PROJECT)
    (tmp_path / "tables").mkdir()
    (tmp_path / "tables" / "t.yml").write_text(
        "tables:\n  - name: orders\n    topic: orders\n    value: {format: json}\n"
    )
    result = CliRunner().invoke(cli, ["--project-dir", str(tmp_path), "compile"])
    assert result.exit_code == 0, result.output
    leaked = [name for name, value in SECRETS.items() if value in result.output]
    assert not leaked, f"leaked: {leaked}"
    target = json.loads(result.output)["target_config"]
    assert target["kafka"]["config"]["ssl.key.location"] == "/etc/kafka/client.key"
    assert target["catalog"]["properties"]["s3.sse.type"] == "custom"
    assert target["spark"]["conf"]["spark.hadoop.fs.s3a.encryption.algorithm"] == "SSE-C"
