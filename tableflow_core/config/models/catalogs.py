"""The catalogs a target writes to or publishes to, and how engines reach object storage."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import Field, SecretStr, field_validator, model_validator

from tableflow_core.config.models.base import IDENTIFIER, ConfigModel
from tableflow_core.config.names import MAX_NAME_LENGTH, shown


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
