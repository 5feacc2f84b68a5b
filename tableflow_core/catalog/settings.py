"""Settings of the embedded Iceberg REST catalog server."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, SecretStr, field_validator, model_validator

from tableflow_core.addresses import is_loopback
from tableflow_core.catalog.metadata_cache import DEFAULT_MAX_ENTRIES
from tableflow_core.catalog.storage import ObjectStorage, is_object_store_location

CLIENT_SECRET_ENV = "TABLEFLOW_CATALOG_CLIENT_SECRET"

AuthMode = Literal["none", "client-credentials"]


class CatalogServerSettings(BaseModel):
    """How to run the catalog server. `port=0` picks a free port at start."""

    host: str = "127.0.0.1"
    port: int = Field(default=0, ge=0, le=65535)
    warehouse: Path | str = Field(
        description="Directory (a Path) or object store URI (`s3://bucket/prefix`, a str) "
        "holding table data and metadata"
    )
    storage: ObjectStorage | None = Field(
        default=None, description="How to reach an s3:// warehouse (endpoint, region, keys)"
    )
    database_url: str | None = Field(
        default=None,
        description="SQLAlchemy URL of the catalog database; default sqlite:///<warehouse>/catalog.db",
    )
    allowed_locations: tuple[str, ...] = Field(
        default=(),
        description="Location prefixes (URIs) besides the warehouse where tables may put files",
    )
    auth: AuthMode = "client-credentials"
    client_id: str = "tableflow"
    client_secret: SecretStr | None = None
    token_ttl_seconds: int = Field(default=3600, gt=0)
    token_max_lifetime_seconds: int = Field(
        default=86400,
        gt=0,
        description="How long token exchanges may renew a token without the secret, "
        "counted from the client-credentials grant it descends from",
    )
    catalog_name: str = "tableflow"
    metadata_cache_entries: int = Field(
        default=DEFAULT_MAX_ENTRIES,
        gt=0,
        description="Parsed table metadata files kept in memory (about one per table is "
        "in use; a project's server gets room for each of its tables)",
    )
    log_level: str = "info"
    access_log: bool = True

    @field_validator("warehouse", mode="before")
    @classmethod
    def _local_path_or_object_store(cls, value: object) -> object:
        if isinstance(value, str):
            if value.startswith("file://"):
                return Path(value.removeprefix("file://"))
            if is_object_store_location(value):
                bucket = value.split("://", 1)[1].split("/", 1)[0]
                if not bucket:
                    raise ValueError(f"warehouse {value!r} names no bucket")
                return value.rstrip("/")
            if "://" in value:
                raise ValueError(f"warehouse {value!r}: only file:// and s3:// are supported")
            return Path(value)
        return value

    @model_validator(mode="after")
    def _object_store_needs_a_database(self) -> CatalogServerSettings:
        if self.is_object_store and self.database_url is None:
            raise ValueError(
                f"an object store warehouse ({self.warehouse}) needs database_url "
                "(--database-url): the catalog database cannot live in object storage"
            )
        return self

    @model_validator(mode="after")
    def _secret_required_for_client_credentials(self) -> CatalogServerSettings:
        if self.auth == "client-credentials" and not (
            self.client_secret and self.client_secret.get_secret_value()
        ):
            raise ValueError(
                f"auth 'client-credentials' (the default) needs a client secret: set "
                f"{CLIENT_SECRET_ENV} or catalog.auth.client_secret (or choose auth 'none' "
                "explicitly, on a loopback address only)"
            )
        return self

    @model_validator(mode="after")
    def _no_auth_only_on_loopback(self) -> CatalogServerSettings:
        if self.auth == "none" and not is_loopback(self.host):
            raise ValueError(
                f"auth 'none' is refused on {self.host!r}: without authentication the catalog "
                "only binds to a loopback address (127.0.0.1, ::1, localhost)"
            )
        return self

    @property
    def is_object_store(self) -> bool:
        return isinstance(self.warehouse, str)

    @property
    def warehouse_uri(self) -> str:
        """The warehouse as a file:// or s3:// URI (table locations are built under it)."""
        if isinstance(self.warehouse, str):
            return self.warehouse
        return self.warehouse.resolve().as_uri()

    @property
    def token_audience(self) -> str:
        """Which catalog a token is for: the same warehouse and catalog name across
        restarts (tokens survive them), different for another catalog with the same secret."""
        identity = f"tableflow-catalog\x00{self.warehouse_uri}\x00{self.catalog_name}"
        return hashlib.sha256(identity.encode()).hexdigest()[:16]

    @property
    def file_io_properties(self) -> dict[str, str]:
        """pyiceberg FileIO properties of the server's own reads and writes."""
        return self.storage.server_file_io_properties() if self.storage else {}

    @property
    def resolved_database_url(self) -> str:
        if self.database_url is not None:
            return self.database_url
        assert isinstance(self.warehouse, Path)  # an object store warehouse requires one
        return f"sqlite:///{self.warehouse.resolve() / 'catalog.db'}"
