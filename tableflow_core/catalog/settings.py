"""Settings of the embedded Iceberg REST catalog server."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, SecretStr, field_validator, model_validator

from tableflow_core.addresses import is_loopback

CLIENT_SECRET_ENV = "TABLEFLOW_CATALOG_CLIENT_SECRET"

AuthMode = Literal["none", "client-credentials"]


class CatalogServerSettings(BaseModel):
    """How to run the catalog server. `port=0` picks a free port at start."""

    host: str = "127.0.0.1"
    port: int = Field(default=0, ge=0, le=65535)
    warehouse: Path = Field(description="Directory holding table data and metadata")
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
    log_level: str = "info"
    access_log: bool = True

    @field_validator("warehouse", mode="before")
    @classmethod
    def _strip_file_scheme(cls, value: object) -> object:
        if isinstance(value, str) and value.startswith("file://"):
            return value.removeprefix("file://")
        return value

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
    def warehouse_uri(self) -> str:
        """The warehouse as a file:// URI (table locations are built under it)."""
        return self.warehouse.resolve().as_uri()

    @property
    def token_audience(self) -> str:
        """Which catalog a token is for: the same warehouse and catalog name across
        restarts (tokens survive them), different for another catalog with the same secret."""
        identity = f"tableflow-catalog\x00{self.warehouse_uri}\x00{self.catalog_name}"
        return hashlib.sha256(identity.encode()).hexdigest()[:16]

    @property
    def resolved_database_url(self) -> str:
        return self.database_url or f"sqlite:///{self.warehouse.resolve() / 'catalog.db'}"
