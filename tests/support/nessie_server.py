"""Project Nessie (a Quarkus uber-jar from Maven Central) as an Iceberg REST catalog on S3.

    server = start_nessie(NessieSettings(data_dir=Path(".tableflow/dev/nessie"),
                                         warehouse="s3://warehouse/nessie",
                                         s3=NessieS3(endpoint=..., access_key_id=..., secret_access_key=...)))
    server.iceberg_uri        # http://127.0.0.1:<port>/iceberg  (Iceberg REST; prefix = branch)
    server.api_uri            # http://127.0.0.1:<port>/api/v2   (Nessie's own API)
    server.stop()

The `nessie` artifact lock pins `nessie-quarkus-0.99.0-runner.jar`; it needs Java 21+
(its classes are version 65), so `find_java(21)` takes Temurin 25 here. Nessie keeps its
commits in memory (`nessie.version.store.type=IN_MEMORY`): gone when it stops. The API
and Quarkus' management interface (health) bind 127.0.0.1 on free ports. Nessie's own
authentication is OIDC only; this dev/test server runs without it, on loopback.

Nessie writes table metadata itself (it is the catalog), so it needs the object store's
keys: they go to Quarkus through `config/application.properties` in the data folder
(mode 0600, the working directory's config file Quarkus reads), referenced as a Nessie
secret (`urn:nessie-secret:quarkus:tableflow-s3`), never on the command line. The file is
removed when the server stops.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from pydantic import SecretStr

from tableflow_core.dev.launcher import COMPACT_JVM, JvmServer, LaunchError
from tableflow_core.dev.quarkus import QuarkusServer, QuarkusSettings, launch_quarkus

WAREHOUSE_NAME = "warehouse"
SECRET_NAME = "tableflow-s3"


class NessieServerError(LaunchError):
    """Nessie did not start; the message names its log."""


NESSIE = JvmServer("nessie", "nessie", 21, COMPACT_JVM, NessieServerError)


@dataclass(frozen=True)
class NessieS3:
    """The object store Nessie writes metadata to and hands to its clients."""

    endpoint: str
    access_key_id: str
    secret_access_key: SecretStr = field(repr=False)
    region: str = "us-east-1"
    path_style_access: bool = True
    # Nessie signs its clients' S3 requests by default (`s3.remote-signing-enabled` in the
    # table config); clients that cannot use a remote signer bring their own keys.
    request_signing: bool = True


@dataclass(frozen=True, kw_only=True)
class NessieSettings(QuarkusSettings):
    warehouse: str  # s3://bucket/prefix
    s3: NessieS3


@dataclass(frozen=True, kw_only=True)
class NessieServer(QuarkusServer):
    READY_PATH = "/iceberg/v1/config"

    @property
    def iceberg_uri(self) -> str:
        """The Iceberg REST catalog (the branch `main` is the default prefix)."""
        return self.base_url + "/iceberg"

    @property
    def api_uri(self) -> str:
        return self.base_url + "/api/v2"


def secrets_file(data_dir: Path) -> Path:
    return data_dir / "config" / "application.properties"


def nessie_properties(settings: NessieSettings) -> dict[str, str]:
    """Everything but the keys (those go to the 0600 file): safe on the command line."""
    s3 = settings.s3
    return {
        "quarkus.log.level": "WARN",
        'quarkus.log.category."io.quarkus".level': "INFO",
        "quarkus.otel.sdk.disabled": "true",
        "nessie.version.store.type": "IN_MEMORY",
        "nessie.server.authentication.enabled": "false",
        "nessie.catalog.default-warehouse": WAREHOUSE_NAME,
        f"nessie.catalog.warehouses.{WAREHOUSE_NAME}.location": settings.warehouse,
        "nessie.catalog.service.s3.default-options.endpoint": s3.endpoint,
        "nessie.catalog.service.s3.default-options.region": s3.region,
        "nessie.catalog.service.s3.default-options.path-style-access": str(
            s3.path_style_access
        ).lower(),
        "nessie.catalog.service.s3.default-options.request-signing-enabled": str(
            s3.request_signing
        ).lower(),
        "nessie.catalog.service.s3.default-options.auth-type": "STATIC",
        "nessie.catalog.service.s3.default-options.access-key": (
            f"urn:nessie-secret:quarkus:{SECRET_NAME}"
        ),
    }


def start_nessie(
    settings: NessieSettings, log_file: Path | None = None, timeout: float = 120.0
) -> NessieServer:
    """Start Nessie and wait until it is ready (its object store check included)."""
    (runner,) = NESSIE.artifacts(settings.lock).files
    keys = (
        f"{SECRET_NAME}.name={settings.s3.access_key_id}\n"
        f"{SECRET_NAME}.secret={settings.s3.secret_access_key.get_secret_value()}\n"
    )
    return launch_quarkus(
        NESSIE,
        settings,
        NessieServer,
        runner,
        nessie_properties(settings),
        log_file,
        timeout,
        archive_files=(runner,),
        private_files={secrets_file(settings.data_dir.resolve()): keys},
        keep_private_files=True,
    )
