"""How each engine reaches the target's object storage: one `storage` block, every client.

A target whose tables live on `s3://` describes the store once (`catalog.storage`:
endpoint, region, addressing, and where the keys come from). This module turns that into
what each client takes:

| client | gets |
| --- | --- |
| the embedded catalog server | `catalog/project_settings.py` (its FileIO settings, keys, vending) |
| Spark (Iceberg's S3FileIO) | `spark_properties()`: catalog properties |
| pyiceberg (plan, status, publish, the Delta mirror through its FileIO) | `pyiceberg_properties()` |
| DuckDB (`tableflow query`) | `duckdb_access()`: an S3 secret, or vended keys through the catalog |

Keys (`credentials: static`) go to each client as properties, never on a command line;
with `vended` no client is given a key: the catalog hands them out with each table
(`X-Iceberg-Access-Delegation: vended-credentials`); with `default-chain` nobody is, and
each SDK finds its own (environment, profile, instance role).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from pydantic import SecretStr

from tableflow_core.catalog.storage import (
    ACCESS_DELEGATION_HEADER,
    S3_FILE_IO,
    VENDED_CREDENTIALS,
)
from tableflow_core.config.models.catalogs import ObjectStorage
from tableflow_core.errors import TableflowError

# AWS SDK 2.30+ adds CRC checksum trailers to uploads, which some S3-compatible stores
# reject; Iceberg's `s3.checksum-enabled` does not stop it (apache/iceberg#14439).
# s3proxy 4.1 accepts them; these keep other stores working (docs/object-storage.md).
AWS_CHECKSUM_JAVA_OPTIONS = (
    "-Daws.requestChecksumCalculation=when_required",
    "-Daws.responseChecksumValidation=when_required",
)


@dataclass(frozen=True)
class DuckDBAccess:
    """How DuckDB's iceberg extension reads the tables: vended keys (nothing to add), or
    ACCESS_DELEGATION_MODE 'none' plus an S3 secret (`secret_options`, bound values;
    without KEY_ID the AWS credential chain finds the keys)."""

    vended: bool
    secret_options: tuple[tuple[str, str | bool], ...] = ()


def _secret(value: SecretStr | None) -> str | None:
    return value.get_secret_value() if value is not None else None


@dataclass(frozen=True)
class StorageAccess:
    """The target's object storage as each client needs it."""

    config: ObjectStorage

    @property
    def vended(self) -> bool:
        return self.config.credential_source == "vended"

    def _keys(self) -> dict[str, str]:
        """The keys as Iceberg FileIO properties (empty unless static)."""
        if self.config.credential_source != "static":
            return {}
        keys = {
            "s3.access-key-id": _secret(self.config.access_key_id) or "",
            "s3.secret-access-key": _secret(self.config.secret_access_key) or "",
        }
        if self.config.session_token is not None:
            keys["s3.session-token"] = self.config.session_token.get_secret_value()
        return keys

    def spark_properties(self) -> dict[str, str]:
        """Iceberg catalog properties for Spark's REST catalog client (S3FileIO)."""
        properties = {
            "io-impl": S3_FILE_IO,
            "client.region": self.config.region,
            "s3.path-style-access": str(self.config.path_style_access).lower(),
        }
        if self.config.endpoint:
            properties["s3.endpoint"] = self.config.endpoint
        if self.vended:
            properties[f"header.{ACCESS_DELEGATION_HEADER}"] = VENDED_CREDENTIALS
        properties.update(self._keys())
        return properties

    def pyiceberg_properties(self) -> dict[str, str]:
        """Catalog properties for pyiceberg's RestCatalog (its FileIO takes them, then the
        table's `config` from the catalog). pyiceberg asks for vended credentials unless
        told otherwise, and ignores `s3.path-style-access`."""
        properties = {
            "s3.region": self.config.region,
            "s3.force-virtual-addressing": str(not self.config.path_style_access).lower(),
            f"header.{ACCESS_DELEGATION_HEADER}": VENDED_CREDENTIALS if self.vended else "",
        }
        if self.config.endpoint:
            properties["s3.endpoint"] = self.config.endpoint
        properties.update(self._keys())
        return properties

    def duckdb_access(self) -> DuckDBAccess:
        if self.vended:
            return DuckDBAccess(vended=True)
        options: list[tuple[str, str | bool]] = [("REGION", self.config.region)]
        if self.config.endpoint:
            parts = urlsplit(self.config.endpoint)
            # DuckDB wants host:port and the scheme apart.
            options += [("ENDPOINT", parts.netloc), ("USE_SSL", parts.scheme == "https")]
        options.append(("URL_STYLE", "path" if self.config.path_style_access else "vhost"))
        keys = self._keys()
        if keys:
            options += [
                ("KEY_ID", keys["s3.access-key-id"]),
                ("SECRET", keys["s3.secret-access-key"]),
            ]
            if "s3.session-token" in keys:
                options.append(("SESSION_TOKEN", keys["s3.session-token"]))
        return DuckDBAccess(vended=False, secret_options=tuple(options))

    def driver_java_options(self) -> tuple[str, ...]:
        """JVM options for the driver and executors (S3-compatible stores only)."""
        return AWS_CHECKSUM_JAVA_OPTIONS if self.config.endpoint else ()


def target_storage(catalog: object) -> StorageAccess | None:
    """The object storage of a target's catalog config (None: not on object storage)."""
    storage = getattr(catalog, "storage", None)
    return StorageAccess(storage) if isinstance(storage, ObjectStorage) else None


def object_store_java_options(catalog: object) -> tuple[str, ...]:
    """JVM options the Spark application needs for the target's object storage."""
    storage = target_storage(catalog)
    return storage.driver_java_options() if storage is not None else ()


class ObjectStoreError(TableflowError, RuntimeError):
    """The object store refused, failed or dropped requests while a table was written or
    maintained; nothing of that step was published (see `object_store_failure`)."""

    component_down = True


# Lines that say a failure came from the object store: the AWS SDK v2 (Iceberg's
# S3FileIO, in Spark), pyarrow's S3 file system (pyiceberg), the embedded catalog's answer
# when its metadata write failed, delta-rs.
_STORE_FAILURE = re.compile(
    r"software\.amazon\.awssdk\S*(?:Exception|Error)[^\n]*"
    r"|S3Exception[^\n]*"
    r"|Unable to execute HTTP request[^\n]*"
    r"|AWS Error [A-Z_]+[^\n]*"
    r"|storage error at s3://[^\n]*"
    r"|Generic S3 error[^\n]*"
)


def object_store_failure(exc: BaseException) -> str | None:
    """The first line of `exc` (or of what caused it) that names an object store failure,
    shortened; None when the failure is not the store's."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        match = _STORE_FAILURE.search(str(current))
        if match:
            return match.group(0).strip()[:400]
        current = current.__cause__ or current.__context__
    return None


def describe_store(storage: StorageAccess, catalog_properties: Mapping[str, str]) -> str:
    """The object store, for messages: its endpoint as the target names it, else as the
    catalog handed it out (`/v1/config`), else AWS S3."""
    endpoint = storage.config.endpoint or catalog_properties.get("s3.endpoint")
    return f"the object store at {endpoint or 'AWS S3'}"
