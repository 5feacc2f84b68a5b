"""Apicurio Registry 3.x (a Quarkus app from Maven Central) with its Confluent-compatible API.

    server = start_apicurio(ApicurioSettings(data_dir=Path(".tableflow/dev/apicurio")))
    server.url                 # http://127.0.0.1:<port>/apis/ccompat/v7 (for SchemaRegistryClient)
    server.stop()

The `apicurio` artifact lock pins the `-all.tar.gz`; it is fetched once into the user
cache and unpacked there, then started with a Java 21+ runtime (`find_java(21)`; here
Temurin 25) as `java -jar quarkus-run.jar`. Both the API and Quarkus' management
interface (health) bind 127.0.0.1 on free ports (the management interface otherwise
listens on 0.0.0.0:9000). Storage is in-memory H2 unless `database` names a file.
Deleting subjects and versions is switched on, as Confluent's registry allows it
(Apicurio refuses it by default).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tableflow_core.dev.launcher import COMPACT_JVM, JvmServer, LaunchError
from tableflow_core.dev.quarkus import QuarkusServer, QuarkusSettings, launch_quarkus
from tableflow_core.jvm.artifacts import unpack

CCOMPAT_PATH = "/apis/ccompat/v7"
DEFAULT_PROPERTIES = (
    # Confluent's registry deletes subjects and versions; Apicurio refuses by default.
    ("apicurio.rest.deletion.artifact.enabled", "true"),
    ("apicurio.rest.deletion.artifact-version.enabled", "true"),
    ("apicurio.rest.deletion.group.enabled", "true"),
    # Twenty pooled H2 connections by default: a dev registry needs a few.
    ("apicurio.datasource.jdbc.initial-size", "2"),
    ("apicurio.datasource.jdbc.min-size", "2"),
    ("apicurio.datasource.jdbc.max-size", "20"),
)


class ApicurioServerError(LaunchError):
    """The registry did not start; the message names its log."""


# Measured on the 2-core machine (docs/environment.md): C1 only and the serial collector
# start it in ~4.5 s instead of ~8.5 s; class-data sharing brings that to ~3.3 s.
APICURIO = JvmServer("apicurio", "apicurio", 21, COMPACT_JVM, ApicurioServerError)


@dataclass(frozen=True, kw_only=True)
class ApicurioSettings(QuarkusSettings):
    heap_mb: int = 192
    database: Path | None = None  # None: in-memory H2, gone when the process stops
    properties: tuple[tuple[str, str], ...] = DEFAULT_PROPERTIES


@dataclass(frozen=True, kw_only=True)
class ApicurioServer(QuarkusServer):
    HEALTH_PATH = "/health/ready"
    READY_PATH = CCOMPAT_PATH + "/subjects"

    @property
    def url(self) -> str:
        """The Confluent-compatible API: what `SchemaRegistryClient({"url": ...})` takes."""
        return self.base_url + CCOMPAT_PATH


def start_apicurio(
    settings: ApicurioSettings, log_file: Path | None = None, timeout: float = 120.0
) -> ApicurioServer:
    """Start the registry and wait until its ccompat API and readiness check answer."""
    data_dir = settings.data_dir.resolve()
    archive = APICURIO.artifacts(settings.lock).files[0]
    runner = unpack(archive) / "quarkus-run.jar"
    properties = {
        # Apicurio writes snapshots and imports to /tmp by default.
        "apicurio.storage.snapshot.location": str(data_dir),
        "apicurio.import.work-dir": str(data_dir),
    }
    if settings.database is not None:
        properties["apicurio.datasource.url"] = f"jdbc:h2:file:{settings.database.resolve()}"
    return launch_quarkus(
        APICURIO,
        settings,
        ApicurioServer,
        runner,
        properties,
        log_file,
        timeout,
        archive_files=(archive, runner),
    )
