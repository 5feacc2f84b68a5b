"""A deployment target (`targets.<name>`): Kafka, the schema registry, the catalogs, Spark
and the local dev stack."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, SecretStr, field_validator

from tableflow_core.config.models.base import ConfigModel
from tableflow_core.config.models.catalogs import (
    PUBLISHABLE_CATALOG_TYPES,
    CatalogConfig,
    EmbeddedCatalog,
    PublishCatalogConfig,
)


class KafkaSecurity(ConfigModel):
    """Security settings passed through to librdkafka."""

    protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = Field(
        "PLAINTEXT", description="`security.protocol`."
    )
    sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"] | None = (
        Field(None, description="`sasl.mechanism`.")
    )
    sasl_username: str | None = Field(
        None, description="`sasl.username` (an API key on Confluent Cloud)."
    )
    sasl_password: SecretStr | None = Field(
        None, description="`sasl.password`; secret, never printed."
    )
    ssl_ca_location: str | None = Field(None, description="`ssl.ca.location`.")
    ssl_certificate_location: str | None = Field(None, description="`ssl.certificate.location`.")
    ssl_key_location: str | None = Field(None, description="`ssl.key.location`.")
    ssl_key_password: SecretStr | None = Field(None, description="`ssl.key.password`; secret.")


class KafkaConnection(ConfigModel):
    """How to reach the Kafka cluster."""

    bootstrap_servers: str = Field(description="Comma-separated host:port list.")
    security: KafkaSecurity = Field(
        default_factory=KafkaSecurity, description="TLS / SASL settings."
    )
    config: dict[str, str | int | float | bool] = Field(
        default_factory=dict,
        description="Extra librdkafka consumer properties, passed through verbatim "
        "(e.g. `receive.message.max.bytes`).",
    )


class BasicAuth(ConfigModel):
    username: str = Field(description="User name (an API key on Confluent Cloud).")
    password: SecretStr = Field(description="Password (API secret); secret, never printed.")


class SchemaRegistryConnection(ConfigModel):
    """A Confluent-compatible Schema Registry (Confluent, Karapace, Redpanda, Apicurio, dev)."""

    url: str = Field(description="Base URL, e.g. `http://127.0.0.1:8081`.")
    basic_auth: BasicAuth | None = Field(None, description="HTTP basic auth.")
    ssl_ca_location: str | None = Field(None, description="CA bundle for https.")


class SparkSettings(ConfigModel):
    """The Spark application `apply` runs in."""

    master: str = Field(
        "local[*]",
        description="Any Spark master URL: `local[*]`, `spark://...`, `yarn`, `k8s://...`.",
    )
    app_name: str = Field("tableflow", description="Spark application name.")
    conf: dict[str, str | int | float | bool] = Field(
        default_factory=dict, description="Extra Spark conf."
    )
    packages: list[str] = Field(
        default_factory=list,
        description="Maven coordinates for `spark.jars.packages` (the Iceberg runtime and AWS "
        "bundle are added for you; list an `iceberg-spark-runtime` here to bring your own).",
    )
    iceberg_jars: Literal["cache", "packages"] = Field(
        "cache",
        description="Where the Iceberg Spark runtime and its AWS bundle (1.12.0) come from. "
        "`cache`: downloaded once from Maven Central into `~/.cache/tableflow/maven`, checked "
        "against pinned SHA-256 sums, and shipped to executors with `spark.jars`. `packages`: "
        "Spark resolves the same coordinates itself (`spark.jars.packages`), e.g. on a cluster "
        "that reaches Maven Central or a mirror.",
    )
    class_data_sharing: bool = Field(
        True,
        description="Map the driver JVM's classes from a class-data sharing archive in the user's "
        "cache (`~/.cache/tableflow/jvm`), written by the first application to exit: a cold "
        "start loads Spark and Iceberg seconds faster.",
    )


StackComponent = Literal["kafka", "schema-registry", "catalog", "s3"]
STACK_COMPONENTS: tuple[StackComponent, ...] = ("kafka", "schema-registry", "catalog", "s3")


class DevStack(ConfigModel):
    """The project's own local stack (`tableflow dev up`); ports are chosen once per project and the target names them with `dev_stack('...')` (docs/dev-stack.md)."""

    host: str = Field("127.0.0.1", description="Bind address; keep it on loopback.")
    components: list[StackComponent] = Field(
        default_factory=lambda: list(STACK_COMPONENTS),
        description="The servers `dev up` starts: Apache Kafka, a schema registry, the "
        "embedded catalog, an S3 server (s3proxy).",
    )
    registry: Literal["tableflow", "apicurio"] = Field(
        "tableflow",
        description="The schema registry: tableflow's own, or Apicurio Registry 3.3 "
        "(Java 21+; its Confluent-compatible API).",
    )
    kafka_security: Literal["plaintext", "sasl_ssl"] = Field(
        "plaintext",
        description="`sasl_ssl`: Kafka's only client listener is SASL_SSL (SCRAM-SHA-512 "
        "over TLS, a CA made for the stack); read the user, password and CA file with "
        "`dev_stack()`.",
    )
    kafka_port: int | None = Field(
        None, ge=1, le=65535, description="Pin Kafka's port; default: chosen once per project."
    )
    registry_port: int | None = Field(
        None, ge=1, le=65535, description="Pin the registry's port; default: chosen once."
    )
    catalog_port: int | None = Field(
        None, ge=1, le=65535, description="Pin the catalog's port; default: chosen once."
    )
    s3_port: int | None = Field(
        None, ge=1, le=65535, description="Pin the S3 server's port; default: chosen once."
    )
    s3_bucket: str = Field(
        "warehouse",
        pattern=r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$",
        description="The bucket `dev up` creates in the S3 server.",
    )
    data_dir: str = Field(
        "./.tableflow/dev",
        description="Where the stack keeps its data, ports and credentials (survives down/up).",
    )


class MetricsEndpoint(ConfigModel):
    """`tableflow run`'s metrics endpoint (docs/observability.md)."""

    port: int = Field(
        ge=0,
        le=65535,
        description="Serve Prometheus metrics, `/healthz` and `/readyz` on this port while "
        "`tableflow run` runs (`--metrics-port` overrides it; 0: a free port).",
    )
    host: str = Field(
        "127.0.0.1",
        min_length=1,
        description="Bind address; loopback by default. Another address exposes the "
        "metrics (table and topic names, counts) to that network.",
    )


class Target(ConfigModel):
    """One deployment target (dev, prod, ...): where data comes from and goes to."""

    kafka: KafkaConnection = Field(description="Kafka cluster.")
    schema_registry: SchemaRegistryConnection | None = Field(None, description="Schema Registry.")
    catalog: CatalogConfig = Field(
        default_factory=EmbeddedCatalog, description="Where tables are written."
    )
    publish_catalogs: dict[str, PublishCatalogConfig] = Field(
        default_factory=dict,
        description="Extra catalogs tables can be published to (registered, not copied), by name: "
        "type rest (any Iceberg REST server: another tableflow catalog, Polaris, Unity), sql, "
        "glue or nessie (Nessie's API v2, compare-and-set commits).",
    )
    spark: SparkSettings = Field(default_factory=SparkSettings, description="Spark application.")
    dev_stack: DevStack | None = Field(
        None, description="The project's local stack, for `tableflow dev` and `dev_stack()`."
    )
    metrics: MetricsEndpoint | None = Field(
        None,
        description="`tableflow run` serves Prometheus metrics and health endpoints "
        "(docs/observability.md).",
    )

    @field_validator("publish_catalogs")
    @classmethod
    def _publishable(cls, value: dict[str, Any]) -> dict[str, Any]:
        for name, catalog in value.items():
            if catalog.type not in PUBLISHABLE_CATALOG_TYPES:
                raise ValueError(
                    f"publish_catalogs.{name}: tables cannot be published to a {catalog.type} "
                    f"catalog; use one of {', '.join(PUBLISHABLE_CATALOG_TYPES)} "
                    "(another tableflow catalog is published to through its REST endpoint: type rest)"
                )
        return value
