"""The project model: what users write in `tableflow_project.yml` and `tables/*.yml`.

Every model forbids unknown keys (a typo is an error, with a suggestion) and is
frozen: a loaded project is an immutable value that planning reads but never edits.
Field descriptions double as the generated reference in docs/reference.md.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Annotated, Any, Literal, get_args

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    field_validator,
    model_validator,
)

from tableflow_core.config.names import (
    MAX_NAME_LENGTH,
    namespace_problem,
    shown,
    topic_problem,
)

IDENTIFIER = r"^[A-Za-z_][A-Za-z0-9_]*$"  # pydantic's (Rust) regex: `$` is the very end
DURATION_PATTERN = re.compile(r"^\s*(\d+)\s*(ms|s|m|h|d)\s*$")
DURATION_UNITS_S = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}
SIZE_PATTERN = re.compile(r"^\s*(\d+)\s*(B|KB|MB|GB|TB)?\s*$", re.IGNORECASE)
SIZE_UNITS = {"B": 1, "KB": 1024, "MB": 1024**2, "GB": 1024**3, "TB": 1024**4}
# remove_orphans never deletes files younger than this: a run in flight (on any host)
# writes data files before it commits them, and they are "orphans" until it does.
ORPHAN_MIN_AGE = "1d"
# Table properties Spark manages itself and refuses in TBLPROPERTIES.
SPARK_RESERVED_PROPERTIES = frozenset(
    {"provider", "location", "owner", "external", "comment", "is_managed_location"}
)


def _checked_namespace(value: str | None) -> str | None:
    if value is not None and (problem := namespace_problem(value)):
        raise ValueError(f"invalid namespace {shown(value)}: {problem}")
    return value


def _checked_topic(value: str) -> str:
    if problem := topic_problem(value):
        raise ValueError(f"invalid topic name {shown(value)}: {problem}")
    return value


# The names apply uses: the catalog's rule for namespaces, Kafka's for topics.
NamespaceName = Annotated[str | None, AfterValidator(_checked_namespace)]
TopicName = Annotated[str, AfterValidator(_checked_topic)]


class ConfigModel(BaseModel):
    """Base for every config model: strict keys, immutable, documented."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


def check_table_properties(properties: dict[str, str]) -> dict[str, str]:
    reserved = sorted(SPARK_RESERVED_PROPERTIES.intersection(properties))
    if reserved:
        raise ValueError(
            f"table properties {reserved} are reserved by Spark and cannot be set "
            "(use `description` for a table comment; the warehouse decides locations)"
        )
    return properties


def parse_duration_seconds(text: str) -> float:
    """'500ms', '30s', '5m', '1h', '1d' -> seconds."""
    match = DURATION_PATTERN.match(text)
    if not match:
        raise ValueError(
            f"invalid duration {text!r}: use a number and a unit (ms, s, m, h, d), e.g. '5m'"
        )
    return int(match.group(1)) * DURATION_UNITS_S[match.group(2)]


def parse_size_bytes(text: str) -> int:
    """'128MB', '1GB', '512KB', '1048576' -> bytes (binary units)."""
    match = SIZE_PATTERN.match(text)
    if not match:
        raise ValueError(
            f"invalid size {text!r}: use a number and a unit (B, KB, MB, GB), e.g. '128MB'"
        )
    return int(match.group(1)) * SIZE_UNITS[(match.group(2) or "B").upper()]


def _check_duration(value: str | None) -> str | None:
    if value is not None:
        parse_duration_seconds(value)
    return value


# ---------------------------------------------------------------- connections


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


class EmbeddedCatalogAuth(ConfigModel):
    """Auth of the embedded REST catalog server (the default when `auth:` is left out)."""

    mode: Literal["none", "client_credentials"] = Field(
        "client_credentials",
        description="`none` is for local development only, must be chosen explicitly and "
        "is refused unless the server binds to a loopback address.",
    )
    client_id: str = Field("tableflow", min_length=1, description="OAuth2 client id engines use.")
    client_secret: SecretStr | None = Field(
        None,
        description="OAuth2 client secret; secret. Default: `$TABLEFLOW_CATALOG_CLIENT_SECRET`; "
        "a server started inside `plan`/`apply` without one uses a random secret of its own.",
    )


OBJECT_STORE_SCHEMES = ("s3",)
StorageCredentials = Literal["static", "vended", "default-chain"]
# (`compile` and the docs site show these words: redaction.DECLARED_WORDS, tested.)


def is_object_store_uri(location: str | None) -> bool:
    """`s3://bucket/prefix` (the schemes tableflow reaches through the S3 API)."""
    scheme, sep, _ = (location or "").partition("://")
    return bool(sep) and scheme.lower() in OBJECT_STORE_SCHEMES


class ObjectStorage(ConfigModel):
    """How every engine reaches an `s3://` warehouse: S3 itself or an S3-compatible store.

    Where the keys come from (`credentials`): `static`: the keys given here go to every
    engine (Spark, pyiceberg, DuckDB, the Delta mirror); `vended`: the catalog hands them
    out with each table (an embedded catalog vends the keys given here, or those of the
    server `tableflow dev up` started); `default-chain`: the AWS SDKs' own chain
    (environment, profile, instance role, web identity), nothing in the project.
    """

    endpoint: str | None = Field(
        None,
        description="S3 API URL of an S3-compatible store, e.g. `http://127.0.0.1:19000`; "
        "leave out for AWS S3.",
    )
    region: str = Field("us-east-1", min_length=1, description="Region (every AWS SDK wants one).")
    path_style_access: bool = Field(
        True,
        description="Address buckets by path (`http://host/bucket/key`); false for "
        "virtual-hosted style (`http://bucket.host/key`).",
    )
    access_key_id: SecretStr | None = Field(
        None,
        description="Access key id; secret, never printed: "
        "`\"{{ env_var('AWS_ACCESS_KEY_ID') }}\"`.",
    )
    secret_access_key: SecretStr | None = Field(
        None,
        description="Secret access key; secret, never printed: "
        "`\"{{ env_var('AWS_SECRET_ACCESS_KEY') }}\"`.",
    )
    session_token: SecretStr | None = Field(
        None, description="Session token of temporary keys; secret."
    )
    credentials: StorageCredentials | None = Field(
        None,
        description="Where engines get their keys: `static` (the keys above), `vended` (from "
        "the catalog, with each table), `default-chain` (the AWS SDKs' chain: environment, "
        "profile, instance role). Default: `static` when keys are given, else `default-chain`.",
    )
    vend_role_arn: str | None = Field(
        None,
        description="Embedded catalog with `credentials: vended`: hand out temporary "
        "credentials of this IAM role, scoped to each table's location (STS AssumeRole with "
        "a session policy; they expire and clients refresh them), not the catalog's keys.",
    )
    sts_endpoint: str | None = Field(
        None, description="STS API URL for `vend_role_arn`; leave out for AWS STS."
    )
    vended_credential_seconds: int = Field(
        3600, ge=60, le=43200, description="Lifetime of credentials minted for `vend_role_arn`."
    )

    @field_validator("endpoint")
    @classmethod
    def _endpoint_is_a_url(cls, value: str | None) -> str | None:
        if value is not None and not re.match(r"^https?://[^/\s]+/?$", value):
            raise ValueError(
                f"endpoint {shown(value)} must be an http:// or https:// URL with a host "
                "and no path, e.g. http://127.0.0.1:19000"
            )
        return value.rstrip("/") if value else value

    @model_validator(mode="after")
    def _keys_fit_the_credentials(self) -> ObjectStorage:
        has_id, has_secret = self.access_key_id is not None, self.secret_access_key is not None
        if has_id != has_secret:
            raise ValueError("give both access_key_id and secret_access_key, or neither")
        if self.session_token is not None and not has_id:
            raise ValueError("session_token needs access_key_id and secret_access_key")
        if self.credentials == "static" and not has_id:
            raise ValueError(
                "credentials static needs access_key_id and secret_access_key "
                "(from env_var(), never written in the file)"
            )
        if self.vend_role_arn is not None and self.credential_source != "vended":
            raise ValueError("vend_role_arn needs credentials: vended")
        if self.sts_endpoint is not None and self.vend_role_arn is None:
            raise ValueError("sts_endpoint is for vend_role_arn: add it or remove sts_endpoint")
        if self.credentials == "default-chain" and has_id:
            raise ValueError(
                "credentials default-chain takes no keys: remove access_key_id and "
                "secret_access_key, or choose credentials static"
            )
        return self

    @property
    def credential_source(self) -> StorageCredentials:
        if self.credentials is not None:
            return self.credentials
        return "static" if self.access_key_id is not None else "default-chain"


class EmbeddedCatalog(ConfigModel):
    """The project's own Iceberg REST catalog server (pyiceberg SqlCatalog behind it)."""

    type: Literal["embedded"] = "embedded"
    name: str = Field(
        "tableflow",
        pattern=IDENTIFIER,
        max_length=MAX_NAME_LENGTH,
        description="Catalog name in Spark and engines.",
    )
    warehouse: str = Field(
        "./.tableflow/warehouse", description="Where table data and metadata live."
    )
    database_url: str | None = Field(
        None,
        description="SQLAlchemy URL of the catalog database; default SQLite file beside the warehouse. "
        "PostgreSQL: `postgresql+psycopg2://...`.",
    )
    host: str = Field("127.0.0.1", description="Address the server binds to.")
    port: int = Field(8181, ge=0, le=65535, description="Port; 0 picks a free one.")
    auth: EmbeddedCatalogAuth = Field(
        default_factory=EmbeddedCatalogAuth,
        description="Client credentials engines must present.",
    )
    storage: ObjectStorage | None = Field(
        None,
        description="How to reach an `s3://` warehouse (required with one): endpoint, region, "
        "addressing, keys. With `credentials: vended` the catalog hands its keys to engines.",
    )

    @model_validator(mode="after")
    def _storage_fits_the_warehouse(self) -> EmbeddedCatalog:
        if is_object_store_uri(self.warehouse):
            bucket = self.warehouse.split("://", 1)[1].split("/", 1)[0]
            if not bucket:
                raise ValueError(f"warehouse {shown(self.warehouse)} names no bucket")
            if self.storage is None:
                raise ValueError(
                    f"warehouse {shown(self.warehouse)} is in object storage: add a `storage` "
                    "block (endpoint, region, credentials)"
                )
            if self.database_url is None:
                raise ValueError(
                    f"warehouse {shown(self.warehouse)} is in object storage: set database_url "
                    "(the catalog database cannot live in a bucket), e.g. "
                    "sqlite:///./.tableflow/catalog.db"
                )
        elif "://" in self.warehouse and not self.warehouse.startswith("file://"):
            raise ValueError(
                f"warehouse {shown(self.warehouse)}: use a path, file:// or s3://bucket/prefix"
            )
        elif self.storage is not None:
            raise ValueError(
                f"storage applies to an s3:// warehouse; {shown(self.warehouse)} is a local path"
            )
        return self


class ExternalCatalog(ConfigModel):
    """What every catalog tableflow connects to (rather than serves) has."""

    name: str = Field(
        "tableflow",
        pattern=IDENTIFIER,
        max_length=MAX_NAME_LENGTH,
        description="Catalog name in Spark.",
    )
    properties: dict[str, str] = Field(
        default_factory=dict, description="Extra catalog properties, passed through."
    )


class RestCatalog(ExternalCatalog):
    """Any Iceberg REST catalog (Polaris, Unity, Glue REST, Confluent Tableflow, Nessie...)."""

    type: Literal["rest"] = "rest"
    uri: str = Field(description="REST endpoint, e.g. `https://catalog.example.com/api/catalog`.")
    warehouse: str | None = Field(None, description="Warehouse identifier sent to the server.")
    credential: SecretStr | None = Field(None, description="`client_id:client_secret`; secret.")
    token: SecretStr | None = Field(None, description="Static bearer token; secret.")
    storage: ObjectStorage | None = Field(
        None,
        description="How engines reach the catalog's `s3://` tables: endpoint, region, "
        "addressing and keys, or `credentials: vended` (the catalog hands them out).",
    )

    @model_validator(mode="after")
    def _vending_is_the_catalogs_business(self) -> RestCatalog:
        if self.storage is not None and self.storage.vend_role_arn is not None:
            raise ValueError(
                "storage.vend_role_arn configures tableflow's embedded catalog; an external "
                "REST catalog decides what it vends (keep credentials: vended)"
            )
        return self


class SqlCatalog(ExternalCatalog):
    """pyiceberg/Iceberg JDBC-style SQL catalog."""

    type: Literal["sql"] = "sql"
    uri: str = Field(description="SQLAlchemy URL (pyiceberg) of the catalog database.")
    jdbc_uri: str | None = Field(None, description="JDBC URL Spark uses for the same database.")
    warehouse: str = Field(description="Warehouse location.")


class GlueCatalog(ExternalCatalog):
    """AWS Glue Data Catalog (credentials: these keys, else the AWS default chain)."""

    type: Literal["glue"] = "glue"
    warehouse: str | None = Field(
        None, description="s3:// warehouse location (not needed to publish to Glue)."
    )
    region: str | None = Field(None, description="AWS region.")
    catalog_id: str | None = Field(
        None, description="Glue catalog id (the AWS account id); default the caller's account."
    )
    endpoint: str | None = Field(
        None, description="Glue endpoint override (VPC endpoints, local test servers)."
    )
    access_key_id: str | None = Field(None, description="AWS access key id.")
    secret_access_key: SecretStr | None = Field(
        None, description="AWS secret access key; secret, never printed."
    )
    session_token: SecretStr | None = Field(None, description="AWS session token; secret.")


class NessieCatalog(ExternalCatalog):
    """Project Nessie through its own API v2, for publishing: every pointer move is a Nessie
    commit checked against the branch state read with the pointer (compare-and-set), which
    Nessie's Iceberg REST endpoint cannot do (it refuses `register_table` with overwrite).
    `properties` give read access to the metadata files (e.g. `s3.access-key-id`): the
    commit carries the snapshot, schema, spec and sort order ids read from them."""

    type: Literal["nessie"] = "nessie"
    uri: str = Field(description="Nessie API v2 base, e.g. `http://nessie:19120/api/v2`.")
    ref: str = Field(
        "main",
        pattern=r"^[A-Za-z]([A-Za-z0-9_-]|[./][A-Za-z0-9_-])*$",  # Nessie's branch names
        max_length=MAX_NAME_LENGTH,
        description="Branch to commit to.",
    )
    token: SecretStr | None = Field(None, description="Bearer token (Nessie OIDC); secret.")


class HiveCatalog(ExternalCatalog):
    """Hive Metastore."""

    type: Literal["hive"] = "hive"
    uri: str = Field(description="thrift://host:9083")
    warehouse: str = Field(description="Warehouse location.")


PUBLISHABLE_CATALOG_TYPES = ("rest", "sql", "glue", "nessie")

CatalogConfig = Annotated[
    EmbeddedCatalog | RestCatalog | SqlCatalog | GlueCatalog | HiveCatalog,
    Field(discriminator="type"),
]
# Publishing also speaks Nessie's own API (tables are written through Nessie's Iceberg
# REST endpoint with `type: rest`).
PublishCatalogConfig = Annotated[
    EmbeddedCatalog | RestCatalog | SqlCatalog | GlueCatalog | HiveCatalog | NessieCatalog,
    Field(discriminator="type"),
]


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


OnDataLoss = Literal["fail", "accept"]
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


# ---------------------------------------------------------------- maintenance


class MaintenanceOperation(ConfigModel):
    """What every maintenance operation has."""

    every: str | None = Field(
        None, description="How often this operation runs; default the block's `every`."
    )

    _every = field_validator("every")(_check_duration)


class CompactSettings(MaintenanceOperation):
    """Compaction: bin-pack small data files (`rewrite_data_files`)."""

    target_file_size: str = Field(
        "128MB", description="Size of the files compaction writes, e.g. `128MB`."
    )
    min_input_files: int = Field(
        5,
        ge=1,
        description="Compact a partition only when it has at least this many files; a table "
        "with fewer data files (at least 2) is never compacted.",
    )
    every_commits: int | None = Field(
        10,
        ge=1,
        description="Also due once this many commits added files since the last compaction "
        "(Flink CDC's pipeline compacts after N commits); `null` turns this trigger off.",
    )
    every_small_files: int | None = Field(
        20,
        ge=2,
        description="Also due once this many small files (under 75% of `target_file_size`) "
        "were written since the last compaction; `null` turns this trigger off.",
    )

    @field_validator("target_file_size")
    @classmethod
    def _valid_size(cls, value: str) -> str:
        parse_size_bytes(value)
        return value

    @property
    def target_file_size_bytes(self) -> int:
        return parse_size_bytes(self.target_file_size)

    @property
    def small_file_bytes(self) -> int:
        """Files under this are small (Iceberg's `min-file-size-bytes` default: 75% of the
        target size), the ones compaction rewrites."""
        return self.target_file_size_bytes * 3 // 4


class ExpireSnapshotsSettings(MaintenanceOperation):
    """Snapshot expiry (`expire_snapshots`); the committed offsets are kept first."""

    older_than: str = Field("7d", description="Expire snapshots older than this.")
    retain_last: int = Field(3, ge=1, description="Always keep at least this many snapshots.")

    _older = field_validator("older_than")(_check_duration)


class RemoveOrphansSettings(MaintenanceOperation):
    """Orphan-file removal (`remove_orphan_files`); never touches `_delta_log/`."""

    older_than: str = Field(
        "3d",
        description=f"Only files older than this are removed; at least {ORPHAN_MIN_AGE}, so the "
        "uncommitted files of a run in flight (on any host) are never taken for orphans.",
    )

    @field_validator("older_than")
    @classmethod
    def _at_least_the_floor(cls, value: str) -> str:
        if parse_duration_seconds(value) < parse_duration_seconds(ORPHAN_MIN_AGE):
            raise ValueError(
                f"remove_orphans.older_than {value!r} is below the {ORPHAN_MIN_AGE} floor: younger "
                "files may belong to a run that has not committed yet"
            )
        return value


class RewriteDeletesSettings(MaintenanceOperation):
    """Position-delete rewrite for upsert tables (`rewrite_position_delete_files`)."""

    min_delete_files: int = Field(
        10, ge=1, description="Rewrite when a partition has at least this many delete files."
    )


class RewriteManifestsSettings(MaintenanceOperation):
    """Manifest rewrite (`rewrite_manifests`): fewer, clustered manifests speed up planning."""


MAINTENANCE_OPERATIONS = (
    "compact",
    "expire_snapshots",
    "remove_orphans",
    "rewrite_deletes",
    "rewrite_manifests",
)


def _enable(value: Any) -> Any:
    # `op: true` means the operation with its defaults; `false`/null means off.
    if value is True:
        return {}
    if value is False:
        return None
    return value


class Maintenance(ConfigModel):
    """Table maintenance, run by `tableflow maintain` when due. Operations not listed never run."""

    every: str = Field("1h", description="How often each listed operation is due.")
    compact: CompactSettings | None = Field(
        None, description="Compaction; `true` for the defaults."
    )
    expire_snapshots: ExpireSnapshotsSettings | None = Field(
        None, description="Snapshot expiry; `true` for the defaults."
    )
    remove_orphans: RemoveOrphansSettings | None = Field(
        None, description="Orphan-file removal; `true` for the defaults."
    )
    rewrite_deletes: RewriteDeletesSettings | None = Field(
        None, description="Position-delete rewrite (upsert tables); `true` for the defaults."
    )
    rewrite_manifests: RewriteManifestsSettings | None = Field(
        None, description="Manifest rewrite; `true` to enable."
    )

    _every = field_validator("every")(_check_duration)

    @field_validator(*MAINTENANCE_OPERATIONS, mode="before")
    @classmethod
    def _booleans(cls, value: Any) -> Any:
        return _enable(value)

    def merged_over(self, defaults: Maintenance | None) -> Maintenance:
        """This block over the `defaults` one: the keys written here win, the others inherit."""
        if defaults is None:
            return self
        inherited = {k: getattr(defaults, k) for k in defaults.model_fields_set}
        own = {k: getattr(self, k) for k in self.model_fields_set}
        return Maintenance.model_validate({**inherited, **own})


# --------------------------------------------------------------------- tables

FormatName = Literal["avro", "json_schema", "protobuf", "json", "string", "bytes"]
REGISTRY_FORMATS = ("avro", "json_schema", "protobuf")


# Column types a plain-JSON column may declare (Iceberg type names), plus `decimal(P,S)`.
JsonColumnType = Literal[
    "string",
    "int",
    "long",
    "float",
    "double",
    "boolean",
    "date",
    "timestamp",
    "timestamptz",
    "binary",
    "json",
]
DECIMAL_TYPE = re.compile(r"^decimal\(\s*\d+\s*,\s*\d+\s*\)$")


class JsonColumn(ConfigModel):
    name: str = Field(pattern=IDENTIFIER, max_length=MAX_NAME_LENGTH, description="Column name.")
    type: str = Field(
        "string",
        description="string, int, long, float, double, boolean, date, timestamp, timestamptz, "
        "binary (base64 text), json (keeps the sub-document as JSON text) or `decimal(P,S)`.",
    )
    path: str | None = Field(
        None, description="Dotted path into the JSON object; default the column name."
    )

    @field_validator("type")
    @classmethod
    def _known_type(cls, value: str) -> str:
        if value not in get_args(JsonColumnType) and not DECIMAL_TYPE.match(value):
            allowed = ", ".join(get_args(JsonColumnType))
            raise ValueError(f"unknown column type {value!r}; use one of {allowed} or decimal(P,S)")
        return value


class Format(ConfigModel):
    """How a record's value or key is encoded."""

    format: FormatName = Field(
        description="avro, json_schema, protobuf (through the registry); json, string, bytes."
    )
    subject: str | None = Field(
        None, description="Registry subject; default `<topic>-value` / `<topic>-key`."
    )
    version: int | Literal["latest"] = Field(
        "latest", description="Registry version: `latest` or a pinned number."
    )
    message: str | None = Field(
        None,
        description="Protobuf only: the message the records hold (simple or fully-qualified "
        "name); needed when the schema has several top-level messages.",
    )
    columns: list[JsonColumn] | None = Field(
        None,
        description="Plain `json` only: the columns to extract; without it the raw JSON lands in `value`.",
    )

    @model_validator(mode="after")
    def _registry_fields_only_for_registry_formats(self) -> Format:
        if self.format not in REGISTRY_FORMATS and (self.subject or self.version != "latest"):
            raise ValueError(
                f"subject/version only apply to registry formats {REGISTRY_FORMATS}, not {self.format!r}"
            )
        if self.columns is not None and self.format != "json":
            raise ValueError("columns only apply to format json")
        if self.message is not None and self.format != "protobuf":
            raise ValueError("message only applies to format protobuf")
        return self


PARTITION_EXPR = re.compile(
    r"^\s*(?:(?P<fn>identity|year|years|month|months|day|days|hour|hours|bucket|truncate)\s*\(\s*"
    r"(?:(?P<param>\d+)\s*,\s*)?(?P<col>[A-Za-z_][\w.]*)\s*\)|(?P<bare>[A-Za-z_][\w.]*))\s*$"
)


def partition_expression(column: str, transform: str, param: int | None) -> str:
    """`day(created_at)`, `bucket(16, id)`, or the bare column for identity."""
    if transform == "identity":
        return column
    if param is not None:
        return f"{transform}({param}, {column})"
    return f"{transform}({column})"


class PartitionField(ConfigModel):
    """One partition field; also written as a string: `day(created_at)`, `bucket(16, id)`."""

    column: str = Field(description="Source column (dotted path for nested fields).")
    transform: Literal["identity", "bucket", "truncate", "year", "month", "day", "hour"] = Field(
        "identity", description="Iceberg partition transform."
    )
    param: int | None = Field(None, ge=1, description="Bucket count or truncate width.")

    @model_validator(mode="before")
    @classmethod
    def _from_expression(cls, value: Any) -> Any:
        if not isinstance(value, str):
            return value
        match = PARTITION_EXPR.match(value)
        if not match:
            raise ValueError(
                f"cannot parse partition {value!r}: use `col`, `day(col)`, `bucket(16, col)`, `truncate(4, col)`"
            )
        if match.group("bare"):
            return {"column": match.group("bare")}
        fn = match.group("fn").rstrip("s") if match.group("fn") != "hours" else "hour"
        param = match.group("param")
        return {
            "column": match.group("col"),
            "transform": fn,
            "param": int(param) if param else None,
        }

    @model_validator(mode="after")
    def _param_matches_transform(self) -> PartitionField:
        needs_param = self.transform in ("bucket", "truncate")
        if needs_param and self.param is None:
            raise ValueError(
                f"{self.transform} needs a param, e.g. `{self.transform}(16, {self.column})`"
            )
        if not needs_param and self.param is not None:
            raise ValueError(f"{self.transform} takes no param")
        return self

    def expression(self) -> str:
        return partition_expression(self.column, self.transform, self.param)


class SortField(ConfigModel):
    """One sort key; also written as a string: `created_at`, `created_at desc`."""

    column: str = Field(description="Column to sort by.")
    direction: Literal["asc", "desc"] = Field("asc", description="Sort direction.")
    nulls: Literal["first", "last"] | None = Field(
        None, description="Null ordering (default: first for asc)."
    )

    @model_validator(mode="before")
    @classmethod
    def _from_expression(cls, value: Any) -> Any:
        if not isinstance(value, str):
            return value
        parts = value.split()
        if len(parts) == 1:
            return {"column": parts[0]}
        if len(parts) == 2 and parts[1].lower() in ("asc", "desc"):
            return {"column": parts[0], "direction": parts[1].lower()}
        raise ValueError(f"cannot parse sort key {value!r}: use `col` or `col desc`")


# Transforms: a discriminated union on `type`, in the spirit of Flink actions.


class MaskTransform(ConfigModel):
    """Mask PII columns."""

    type: Literal["mask"]
    columns: list[str] = Field(min_length=1, description="Columns to mask.")
    method: Literal["hash", "redact", "partial"] = Field(
        "hash",
        description="hash: salted SHA-256 hex; redact: replace with `replacement`; partial: keep edges.",
    )
    salt: SecretStr | None = Field(
        None,
        description="Salt for `hash` (required); secret, never printed: "
        "`\"{{ env_var('TABLEFLOW_MASK_SALT') }}\"`.",
    )
    replacement: str = Field("****", description="Replacement for `redact`.")
    keep_first: int = Field(0, ge=0, description="`partial`: characters kept at the start.")
    keep_last: int = Field(4, ge=0, description="`partial`: characters kept at the end.")

    @model_validator(mode="after")
    def _salt_only_for_hash(self) -> MaskTransform:
        # An unsalted SHA-256 of an email or a phone number is reversed by a dictionary.
        if self.method == "hash" and self.salt is None:
            raise ValueError(
                "mask method hash needs a salt; keep it out of the file: "
                "salt: \"{{ env_var('TABLEFLOW_MASK_SALT') }}\""
            )
        if self.method != "hash" and self.salt is not None:
            raise ValueError("salt only applies to mask method hash")
        return self


class DedupTransform(ConfigModel):
    """Drop duplicate records within a run's batch (append tables: also against the table's rows)."""

    type: Literal["dedup"]
    keys: list[str] = Field(min_length=1, description="Columns identifying a duplicate.")
    keep: Literal["first", "last"] = Field(
        "last", description="Which duplicate survives, by Kafka offset."
    )


class FilterTransform(ConfigModel):
    """Keep only records matching a Spark SQL boolean expression."""

    type: Literal["filter"]
    where: str = Field(min_length=1, description="Spark SQL predicate, e.g. `status <> 'TEST'`.")


class DeriveTransform(ConfigModel):
    """Add (or replace) a column computed by a Spark SQL expression."""

    type: Literal["derive"]
    column: str = Field(
        pattern=IDENTIFIER, max_length=MAX_NAME_LENGTH, description="New column name."
    )
    expression: str = Field(min_length=1, description="Spark SQL expression.")


class RenameTransform(ConfigModel):
    """Rename columns."""

    type: Literal["rename"]
    columns: dict[str, str] = Field(min_length=1, description="Map of old name to new name.")


class DropTransform(ConfigModel):
    """Drop columns."""

    type: Literal["drop"]
    columns: list[str] = Field(min_length=1, description="Columns to drop.")


Transform = Annotated[
    MaskTransform
    | DedupTransform
    | FilterTransform
    | DeriveTransform
    | RenameTransform
    | DropTransform,
    Field(discriminator="type"),
]


class CheckBase(ConfigModel):
    severity: Literal["error", "warn"] = Field(
        "error", description="error: apply `on_failure`; warn: report and continue."
    )
    on_failure: Literal["fail", "skip", "dlq"] | None = Field(
        None,
        description="For row-level checks: what to do with failing rows (default: the table's `on_error`).",
    )


class NotNullCheck(CheckBase):
    type: Literal["not_null"]
    columns: list[str] = Field(min_length=1, description="Columns that must not be null.")


class UniqueCheck(CheckBase):
    type: Literal["unique"]
    columns: list[str] = Field(
        min_length=1, description="Columns whose combination must be unique in the batch."
    )


class AcceptedValuesCheck(CheckBase):
    type: Literal["accepted_values"]
    column: str = Field(description="Column to check.")
    values: list[str | int | float | bool] = Field(min_length=1, description="Allowed values.")


class RangeCheck(CheckBase):
    type: Literal["range"]
    column: str = Field(description="Column to check.")
    min: float | None = Field(None, description="Inclusive lower bound.")
    max: float | None = Field(None, description="Inclusive upper bound.")


class ExpressionCheck(CheckBase):
    type: Literal["expression"]
    name: str = Field(
        pattern=IDENTIFIER, max_length=MAX_NAME_LENGTH, description="Name shown in results."
    )
    expression: str = Field(min_length=1, description="Spark SQL predicate every row must satisfy.")


class RowCountCheck(CheckBase):
    type: Literal["row_count"]
    min: int | None = Field(None, ge=0, description="Minimum rows in a run's batch.")
    max: int | None = Field(None, ge=0, description="Maximum rows in a run's batch.")


Check = Annotated[
    NotNullCheck | UniqueCheck | AcceptedValuesCheck | RangeCheck | ExpressionCheck | RowCountCheck,
    Field(discriminator="type"),
]


# Matched with fullmatch: `$` alone also accepts a trailing newline.
QUALIFIED_TABLE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+")


DeadLetterPayload = Literal["raw", "masked"]


def _payload_field() -> Any:
    return Field(
        None,
        description="What a bad record's row keeps of the record. `raw`: its key, value and "
        "headers as they were on the topic (clear values of masked columns included; "
        "replayable). `masked`: no key or value bytes; a record that decoded keeps its row "
        "as JSON with the table's masks applied, an undecodable one only its position, "
        "headers and error. Default: masked for a table with masks, raw otherwise "
        "(docs/error-handling.md).",
    )


class KafkaDeadLetter(ConfigModel):
    type: Literal["kafka"]
    topic: str = Field(
        description="Topic receiving each bad record's original key, value and headers plus "
        "`tableflow.error.*` headers (at-least-once; see docs/error-handling.md). Created by "
        "plan/apply when missing, with the source topic's partition count.",
    )
    payload: DeadLetterPayload | None = _payload_field()

    @field_validator("topic")
    @classmethod
    def _valid_topic(cls, value: str) -> str:
        if problem := topic_problem(value):
            raise ValueError(f"invalid dead-letter topic name {shown(value)}: {problem}")
        return value


class IcebergDeadLetter(ConfigModel):
    type: Literal["iceberg"]
    table: str = Field(
        description="`namespace.table` receiving bad records with error columns; created by "
        "plan/apply, written idempotently.",
    )
    payload: DeadLetterPayload | None = _payload_field()

    @field_validator("table")
    @classmethod
    def _qualified(cls, value: str) -> str:
        if not QUALIFIED_TABLE.fullmatch(value):
            raise ValueError(
                f"invalid dead-letter table {shown(value)}: write it as `namespace.table` "
                "(identifiers of letters, digits and underscores)"
            )
        if problem := namespace_problem(value):
            raise ValueError(f"invalid dead-letter table {shown(value)}: {problem}")
        return value


DeadLetterTarget = Annotated[KafkaDeadLetter | IcebergDeadLetter, Field(discriminator="type")]


class StartFrom(ConfigModel):
    timestamp: str = Field(
        description="ISO-8601 timestamp; reading starts at the first offset at or after it."
    )


MetadataColumn = Literal["topic", "partition", "offset", "timestamp", "key", "headers"]
TableFormatName = Literal["iceberg", "delta"]


def check_table_formats(value: list[TableFormatName] | None) -> list[TableFormatName] | None:
    """Iceberg is the table itself (the Delta log mirrors its files), so it is always listed."""
    if value is None:
        return value
    if "iceberg" not in value:
        raise ValueError(
            "formats must include iceberg: the Delta log mirrors the Iceberg table's files, "
            "e.g. `formats: [iceberg, delta]`"
        )
    if len(set(value)) != len(value):
        raise ValueError(f"formats lists a format twice: {value}")
    return value


class TableDefaults(ConfigModel):
    """Values every table inherits unless it sets its own."""

    namespace: NamespaceName = Field(None, description="Default Iceberg namespace (dot-separated).")
    mode: Literal["append", "upsert"] = Field("append", description="Default table mode.")
    value: Format | None = Field(None, description="Default value format.")
    key: Format | None = Field(None, description="Default key format.")
    properties: dict[str, str] = Field(
        default_factory=dict, description="Table properties merged into each table's."
    )
    metadata_columns: list[MetadataColumn] | None = Field(
        None, description="Default metadata columns."
    )
    on_error: Literal["fail", "skip", "dlq"] = Field(
        "fail",
        description="Default error handling for bad records: fail (stop; `run` suspends the "
        "table), skip (count and drop) or dlq (send to the dead-letter target).",
    )
    dlq: DeadLetterTarget | None = Field(
        None, description="Default dead-letter target for tables with on_error (or a check) dlq."
    )
    on_data_loss: OnDataLoss = Field(
        "fail",
        description="Records deleted from the topic (retention) before a table read them: "
        "`fail` (plan shows them, apply fails naming topic, partition and offsets) or "
        "`accept` (apply reads on from the log start and records the loss in the run's "
        "results and the table's commit).",
    )
    refresh_interval: str = Field("5m", description="Default refresh interval.")
    tags: list[str] = Field(default_factory=list, description="Tags added to every table.")
    start_from: Literal["earliest", "latest"] | StartFrom = Field(
        "earliest", description="Default start."
    )
    max_records_per_run: int | None = Field(None, ge=1, description="Default per-run cap.")
    formats: list[TableFormatName] = Field(
        default_factory=lambda: list[TableFormatName](["iceberg"]),
        description="Default table formats: `[iceberg]` or `[iceberg, delta]` (docs/delta.md).",
    )

    @field_validator("formats")
    @classmethod
    def _valid_default_formats(cls, value: list[TableFormatName]) -> list[TableFormatName]:
        check_table_formats(value)
        return value

    maintenance: Maintenance | None = Field(
        None, description="Default maintenance block; a table's own block overrides it key by key."
    )

    @field_validator("refresh_interval")
    @classmethod
    def _valid_interval(cls, value: str) -> str:
        parse_duration_seconds(value)
        return value

    @field_validator("properties")
    @classmethod
    def _no_reserved_properties(cls, value: dict[str, str]) -> dict[str, str]:
        return check_table_properties(value)

    @model_validator(mode="after")
    def _dlq_target(self) -> TableDefaults:
        if self.on_error == "dlq" and self.dlq is None:
            raise ValueError(
                "defaults.on_error dlq needs a default dead-letter target: add `dlq: {type: "
                "kafka, topic: ...}` or `dlq: {type: iceberg, table: ns.table}` to `defaults`"
            )
        return self


class TableConfig(ConfigModel):
    """One topic materialized as one Iceberg table."""

    name: str = Field(
        pattern=IDENTIFIER,
        max_length=MAX_NAME_LENGTH,
        description="Unique name of this table in the project (used by --select).",
    )
    description: str | None = Field(
        None, description="Free text; becomes the table's `comment` property."
    )
    topic: TopicName = Field(description="Source Kafka topic.")
    namespace: NamespaceName = Field(
        None, description="Iceberg namespace (dot-separated); default from `defaults`."
    )
    table: str | None = Field(
        None,
        pattern=IDENTIFIER,
        max_length=MAX_NAME_LENGTH,
        description="Iceberg table name; default `name`.",
    )
    value: Format | None = Field(
        None, description="Value format; default from `defaults`, else avro."
    )
    key: Format | None = Field(
        None, description="Key format; default from `defaults`, else string."
    )
    mode: Literal["append", "upsert"] | None = Field(
        None, description="append: every record a row; upsert: one row per key, tombstones delete."
    )
    key_columns: list[str] = Field(default_factory=list, description="Upsert key columns.")
    partition_by: list[PartitionField] = Field(default_factory=list, description="Partition spec.")
    sort_by: list[SortField] = Field(default_factory=list, description="Table write order.")
    properties: dict[str, str] = Field(
        default_factory=dict, description="Iceberg table properties."
    )
    metadata_columns: list[MetadataColumn] | None = Field(
        None,
        description="Kafka metadata columns to add: topic, partition, offset, timestamp, key, headers.",
    )
    start_from: Literal["earliest", "latest"] | StartFrom | None = Field(
        None, description="Where a new table starts reading: earliest, latest or {timestamp: ...}."
    )
    max_records_per_run: int | None = Field(
        None, ge=1, description="Cap records per run (backfills)."
    )
    transforms: list[Transform] = Field(default_factory=list, description="Ordered transforms.")
    checks: list[Check] = Field(default_factory=list, description="Data-quality checks.")
    on_error: Literal["fail", "skip", "dlq"] | None = Field(
        None,
        description="What to do with bad records: fail, skip or dlq (default from `defaults`).",
    )
    on_data_loss: OnDataLoss | None = Field(
        None,
        description="Records deleted from the topic before this table read them: `fail` or "
        "`accept` (default from `defaults`; docs/plan-and-apply.md).",
    )
    dlq: DeadLetterTarget | None = Field(
        None,
        description="Dead-letter target (`{type: kafka, topic: ...}` or `{type: iceberg, "
        "table: ns.table}`) for on_error dlq and checks with on_failure dlq; default from "
        "`defaults`.",
    )
    refresh_interval: str | None = Field(
        None, description="How often `tableflow run` refreshes it, e.g. `5m`."
    )
    publish_to: list[str] = Field(
        default_factory=list, description="Names from the target's `publish_catalogs`."
    )
    maintenance: Maintenance | None = Field(
        None,
        description="Compaction, snapshot expiry, orphan removal, delete and manifest rewrites, "
        "and how often (`tableflow maintain`); keys override `defaults.maintenance`.",
    )
    tags: list[str] = Field(default_factory=list, description="Tags for --select.")
    formats: list[TableFormatName] | None = Field(
        None,
        description="Table formats to maintain: `[iceberg]` or `[iceberg, delta]`; `delta` writes "
        "a Delta log over the same Parquet files after every commit (docs/delta.md). "
        "Default from `defaults`.",
    )

    @field_validator("formats")
    @classmethod
    def _valid_formats(cls, value: list[TableFormatName] | None) -> list[TableFormatName] | None:
        return check_table_formats(value)

    @field_validator("refresh_interval")
    @classmethod
    def _valid_interval(cls, value: str | None) -> str | None:
        if value is not None:
            parse_duration_seconds(value)
        return value

    @field_validator("properties")
    @classmethod
    def _no_reserved_properties(cls, value: dict[str, str]) -> dict[str, str]:
        return check_table_properties(value)

    @model_validator(mode="after")
    def _mode_consistency(self) -> TableConfig:
        if self.mode == "upsert" and not self.key_columns:
            raise ValueError("mode upsert needs key_columns")
        if self.mode != "upsert" and self.key_columns:
            raise ValueError("key_columns only apply to mode upsert")
        # on_error dlq without a `dlq` here may inherit `defaults.dlq`: the loader checks
        # the resolved table (config/loader.py, _dead_letter_problems).
        return self


def needs_dead_letter_target(on_error: str, checks: Sequence[Any]) -> str | None:
    """The key that routes bad records to a dead-letter target, if any ("on_error", "checks")."""
    if on_error == "dlq":
        return "on_error"
    if any(getattr(check, "on_failure", None) == "dlq" for check in checks):
        return "checks"
    return None


class TableFile(ConfigModel):
    """A file under `table_paths`: a list of tables."""

    tables: list[TableConfig] = Field(
        default_factory=list, description="Tables declared in this file."
    )


class ProjectConfig(ConfigModel):
    """`tableflow_project.yml`."""

    name: str = Field(pattern=IDENTIFIER, max_length=MAX_NAME_LENGTH, description="Project name.")
    config_version: Literal[1] = Field(1, description="Version of this file format.")
    default_target: str = Field("dev", description="Target used when --target is not given.")
    targets: dict[str, Target] = Field(min_length=1, description="Deployment targets by name.")
    vars: dict[str, Any] = Field(
        default_factory=dict, description="Variables for `{{ var('x') }}`."
    )
    table_paths: list[str] = Field(
        default_factory=lambda: ["tables"], description="Folders with table YAML files."
    )
    defaults: TableDefaults = Field(default_factory=TableDefaults, description="Table defaults.")
    tables: list[TableConfig] = Field(default_factory=list, description="Tables declared inline.")

    @model_validator(mode="after")
    def _default_target_exists(self) -> ProjectConfig:
        if self.default_target not in self.targets:
            raise ValueError(
                f"default_target {self.default_target!r} is not one of targets: {sorted(self.targets)}"
            )
        return self
