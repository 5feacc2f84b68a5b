"""Trino (single node, from Maven Central) reading Iceberg tables through REST catalogs.

    catalog = TrinoIcebergCatalog(name="lake", rest_uri=..., credential=SecretStr("id:secret"),
                                  s3_endpoint=..., s3_access_key_id=..., s3_secret_access_key=...)
    server = start_trino(TrinoSettings(data_dir=Path(".tableflow/dev/trino"), catalogs=(catalog,)))
    server.url                         # http://127.0.0.1:<port>
    server.query("SELECT count(*) FROM lake.ns.t")   # [[n]] (the HTTP API, no client library)
    server.stop()

The `trino` artifact lock pins `io.trino:trino-server:tar.gz:476` (the newest version
Maven Central serves here; 477-483 are 404). It is unpacked once into the user cache;
each run gets its own folder with generated `etc/` files and a `plugins/` folder holding
links to the plugins it needs only (the Iceberg connector by default: the other 55
plugins cost start time and memory). Trino 476 needs Java 24+ (here: Temurin 25).

One coordinator that schedules work on itself, bound to 127.0.0.1 on a free port, a
small serial-collector heap and C1 only (queries in tests and the dev stack are small;
the start is what counts). Catalog files carry secrets (the REST credential, the S3
secret): they are written 0600 and deleted as soon as Trino has loaded them; Trino logs
those properties as [REDACTED].

Trap: Trino 476 uses credentials vended by the catalog only when the table config has
all three of `s3.access-key-id`, `s3.secret-access-key` and `s3.session-token`; static
keys without a session token are ignored (silently: the AWS default chain is used).
So with a catalog that vends static keys, give Trino its own keys; with one that vends
temporary credentials (`--sts-role-arn`), give it none. Either way Trino takes neither the
endpoint nor the addressing style from the catalog, and needs a region to start.
"""

from __future__ import annotations

import contextlib
import json
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import SecretStr

from tableflow_core.dev.launcher import (
    JvmServer,
    LaunchError,
    RunningServer,
    ServerSettings,
    launch,
    render_properties,
    write_private,
)
from tableflow_core.dev.processes import free_port
from tableflow_core.jvm.artifacts import unpack

MAIN_CLASS = "io.trino.server.TrinoServer"
DEFAULT_PLUGINS = ("iceberg",)
NO_NODES = "NO_NODES_AVAILABLE"
NODE_WAIT_SECONDS = 20.0
ACTIVE_NODE_PROBE = "SELECT count(*) FROM system.runtime.nodes WHERE state = 'active'"
# Measured on the 2-core machine (docs/environment.md): JVM defaults (G1, C2) start it in
# ~18 s; serial GC + C1 only ~11 s; plus the class-data sharing archive ~7-9 s under load.
DEFAULT_JAVA_OPTIONS = (
    "-XX:+UseSerialGC",
    "-XX:TieredStopAtLevel=1",
    "-Xss1m",
    "-XX:+ExitOnOutOfMemoryError",
    # Trino measures object sizes with JOL, which attaches an agent to its own JVM.
    "-Djdk.attach.allowAttachSelf=true",
    "-XX:+EnableDynamicAgentLoading",
    "--add-opens=java.base/java.nio=ALL-UNNAMED",
    "--enable-native-access=ALL-UNNAMED",
    "-Dfile.encoding=UTF-8",
)


class TrinoServerError(LaunchError):
    """Trino did not start or a query failed; the message names the log or the error."""


TRINO = JvmServer("trino", "trino", 24, DEFAULT_JAVA_OPTIONS, TrinoServerError)


@dataclass(frozen=True)
class TrinoIcebergCatalog:
    """An Iceberg catalog in Trino backed by an Iceberg REST catalog (ours, Nessie, ...).

    `credential` is the OAuth2 client credential (`id:secret`); None: no authentication.
    S3 keys: Trino's own (`s3.aws-access-key`); see the module's note on vending.
    """

    name: str
    rest_uri: str
    credential: SecretStr | None = None
    oauth2_server_uri: str | None = None
    oauth2_scope: str | None = None
    warehouse: str | None = None
    s3_endpoint: str | None = None
    s3_region: str = "us-east-1"
    s3_path_style_access: bool = True
    s3_access_key_id: str | None = None
    s3_secret_access_key: SecretStr | None = None
    vended_credentials: bool = False
    properties: tuple[tuple[str, str], ...] = ()

    def catalog_properties(self) -> dict[str, str]:
        """The catalog file's properties (secrets in clear: only for the 0600 file)."""
        props = {
            "connector.name": "iceberg",
            "iceberg.catalog.type": "rest",
            "iceberg.rest-catalog.uri": self.rest_uri.rstrip("/"),
        }
        if self.warehouse:
            props["iceberg.rest-catalog.warehouse"] = self.warehouse
        if self.credential is not None:
            props["iceberg.rest-catalog.security"] = "OAUTH2"
            props["iceberg.rest-catalog.oauth2.credential"] = self.credential.get_secret_value()
            if self.oauth2_server_uri:
                props["iceberg.rest-catalog.oauth2.server-uri"] = self.oauth2_server_uri
            if self.oauth2_scope:
                props["iceberg.rest-catalog.oauth2.scope"] = self.oauth2_scope
        if self.vended_credentials:
            props["iceberg.rest-catalog.vended-credentials-enabled"] = "true"
            # Trino's own S3 client, told only a region (its S3 module will not start
            # without one): endpoint and keys per table from the catalog.
            props["fs.native-s3.enabled"] = "true"
            props["s3.region"] = self.s3_region
        if self.s3_endpoint is not None:
            props.update(
                {
                    "fs.native-s3.enabled": "true",
                    "s3.endpoint": self.s3_endpoint,
                    "s3.region": self.s3_region,
                    "s3.path-style-access": str(self.s3_path_style_access).lower(),
                }
            )
            if self.s3_access_key_id and self.s3_secret_access_key is not None:
                props["s3.aws-access-key"] = self.s3_access_key_id
                props["s3.aws-secret-key"] = self.s3_secret_access_key.get_secret_value()
        props.update(dict(self.properties))
        return props


@dataclass(frozen=True, kw_only=True)
class TrinoSettings(ServerSettings):
    catalogs: tuple[TrinoIcebergCatalog, ...] = ()
    heap_mb: int = 512
    plugins: tuple[str, ...] = DEFAULT_PLUGINS
    properties: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, kw_only=True)
class TrinoServer(RunningServer):
    data_dir: Path

    @property
    def url(self) -> str:
        return self.base_url

    def query(self, sql: str, user: str = "tableflow", timeout: float = 120.0) -> list[list[Any]]:
        """Run one statement through Trino's HTTP API; rows as JSON values.

        NO_NODES_AVAILABLE is retried for up to `NODE_WAIT_SECONDS`: for a few seconds
        after a start the coordinator has not yet seen its own node announce a catalog
        (the query is refused before it runs, so retrying is safe)."""
        deadline = time.monotonic() + NODE_WAIT_SECONDS
        while True:
            try:
                return run_statement(self.url, sql, user=user, timeout=timeout)
            except TrinoServerError as exc:
                if NO_NODES not in str(exc) or time.monotonic() > deadline:
                    raise
            time.sleep(0.25)

    def stop(self, timeout: float = 20.0) -> None:
        super().stop(timeout)


def install_dir(lock: str | None = None) -> Path:
    """The unpacked server (fetched and unpacked once into the user cache)."""
    archive = TRINO.artifacts(lock).files[0]
    unpacked = unpack(archive)
    inner = [p for p in unpacked.iterdir() if p.is_dir() and (p / "lib").is_dir()]
    if len(inner) != 1:
        raise TrinoServerError(f"{unpacked}: expected one trino-server-<v> folder with lib/")
    return inner[0]


def start_trino(
    settings: TrinoSettings, log_file: Path | None = None, timeout: float = 180.0
) -> TrinoServer:
    """Write the run's configuration, start Trino, wait until it runs queries."""
    data_dir = settings.data_dir.resolve()
    port = settings.port or free_port(settings.host)
    home = install_dir(settings.lock)
    etc = data_dir / "etc"
    catalog_dir = etc / "catalog"
    plugin_dir = data_dir / "plugins"
    _link_plugins(home, plugin_dir, settings.plugins)
    catalog_dir.mkdir(parents=True, exist_ok=True)
    for stale in catalog_dir.glob("*.properties"):
        stale.unlink()
    config = etc / "config.properties"
    levels = etc / "log.properties"
    levels.write_text("io.trino=WARN\nio.trino.server.Server=INFO\n")
    server_config = {
        **server_properties(settings.host, port, data_dir, plugin_dir, catalog_dir),
        **dict(settings.properties),
    }
    # Catalogs are static, loaded at start: their secrets are removed once Trino is ready.
    private_files = {
        catalog_dir / f"{c.name}.properties": render_properties(c.catalog_properties())
        for c in settings.catalogs
    }
    write_private(config, render_properties(server_config))
    probes = [
        f"SELECT count(*) FROM {c.name}.information_schema.schemata" for c in settings.catalogs
    ]
    running = launch(
        TRINO,
        settings.run(
            port,
            # The JVM expands the class path's `*` (a 174-jar list would flood errors).
            ("-cp", str(home / "lib" / "*"), MAIN_CLASS),
            archive_files=tuple(sorted((home / "lib").glob("*.jar"))),
            system_properties={"config": str(config), "log.levels-file": str(levels)},
            private_files=private_files,
            ready=lambda running: trino_ready(running.host, running.port, probes),
            log_file=log_file or data_dir / "trino.out",
            cwd=data_dir,
            timeout=timeout,
            poll_interval=0.2,
        ),
    )
    return TrinoServer(**running.common(), data_dir=data_dir)


def server_properties(
    host: str, port: int, data_dir: Path, plugin_dir: Path, catalog_dir: Path
) -> dict[str, str]:
    """A coordinator that is its own only worker, on `host` only."""
    return {
        "coordinator": "true",
        "node-scheduler.include-coordinator": "true",
        "http-server.http.port": str(port),
        "discovery.uri": f"http://{host}:{port}",
        "node.environment": "tableflow",
        "node.id": str(uuid.uuid4()),
        "node.bind-ip": host,
        "node.internal-address": host,
        "plugin.dir": str(plugin_dir),
        "catalog.config-dir": str(catalog_dir),
        "catalog.management": "static",
        "log.path": str(data_dir / "var" / "log" / "server.log"),
        "http-server.log.enabled": "false",
        "query.max-memory": "256MB",
        "query.max-memory-per-node": "192MB",
        # No spill, no exchange manager, no web UI sessions to keep.
        "web-ui.enabled": "false",
    }


def trino_ready(host: str, port: int, probes: Iterable[str] = ()) -> str | None:
    """None once `/v1/info` says started and a query on each catalog runs.

    Right after "SERVER STARTED" (and even once `system.runtime.nodes` lists the node as
    active) a query can fail with NO_NODES_AVAILABLE: the coordinator has not yet seen
    its own node announce the catalog. The catalog probe waits for that.
    """
    url = f"http://{host}:{port}"
    with urllib.request.urlopen(f"{url}/v1/info", timeout=2) as response:
        if json.loads(response.read()).get("starting", True):
            return "starting"
    try:
        for probe in list(probes) or [ACTIVE_NODE_PROBE]:
            run_statement(url, probe, timeout=30)
    except TrinoServerError as exc:
        return str(exc)
    return None


def run_statement(
    url: str, sql: str, user: str = "tableflow", timeout: float = 120.0
) -> list[list[Any]]:
    """POST /v1/statement and follow `nextUri` until the query finishes."""
    deadline = time.monotonic() + timeout
    request = urllib.request.Request(
        f"{url}/v1/statement",
        data=sql.encode(),
        # Without PARAMETRIC_DATETIME Trino renders every timestamp with milliseconds only.
        headers={
            "X-Trino-User": user,
            "Content-Type": "text/plain",
            "X-Trino-Client-Capabilities": "PARAMETRIC_DATETIME",
        },
        method="POST",
    )
    rows: list[list[Any]] = []
    while True:
        with urllib.request.urlopen(request, timeout=max(1.0, deadline - time.monotonic())) as r:
            document = json.loads(r.read())
        rows.extend(document.get("data") or [])
        error = document.get("error")
        if error:
            raise TrinoServerError(
                f"{error.get('errorName')}: {error.get('message')} (query {document.get('id')})"
            )
        next_uri = document.get("nextUri")
        if not next_uri:
            return rows
        if time.monotonic() > deadline:
            raise TrinoServerError(f"query {document.get('id')} did not finish in {timeout:.0f}s")
        request = urllib.request.Request(next_uri, headers={"X-Trino-User": user})


def _link_plugins(home: Path, plugin_dir: Path, plugins: Iterable[str]) -> None:
    """`plugin_dir` holds links to the wanted plugins of the installation, nothing else."""
    plugin_dir.mkdir(parents=True, exist_ok=True)
    wanted = set(plugins)
    for entry in plugin_dir.iterdir():
        if entry.name not in wanted and entry.is_symlink():
            entry.unlink()
    for name in wanted:
        source = home / "plugin" / name
        if not source.is_dir():
            known = ", ".join(sorted(p.name for p in (home / "plugin").iterdir()))
            raise TrinoServerError(f"Trino has no plugin {name!r} (known: {known})")
        link = plugin_dir / name
        if link.is_symlink() and link.resolve() == source.resolve():
            continue
        with contextlib.suppress(FileNotFoundError):
            link.unlink()
        link.symlink_to(source, target_is_directory=True)
