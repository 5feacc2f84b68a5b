"""Opening the target's Iceberg catalog for pyiceberg (plan) and Spark (apply).

For an `embedded` catalog: if something answers on its configured host:port (the
server of `tableflow dev up`, or `tableflow catalog serve`), use it; otherwise run
the server in this process on a background thread for the duration of the command.
A server found on the port gets the client credentials only after it proved it holds
the project's secret (`catalog/verification.py`); otherwise the command stops. Without a
secret (`auth: none`, or no secret configured), the server must prove it holds the key in
the project's catalog database (`catalog/identity.py`: the server of `tableflow dev up`
or `tableflow catalog serve` on the project's database does); otherwise the command stops
unless $TABLEFLOW_CATALOG_ALLOW_UNVERIFIED is `1` (then it warns and goes on).
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from tableflow_core.config.models.catalogs import (
    EmbeddedCatalog,
    GlueCatalog,
    HiveCatalog,
    RestCatalog,
    SqlCatalog,
)
from tableflow_core.config.project import Project
from tableflow_core.errors import TableflowError
from tableflow_core.redaction import redact_url
from tableflow_core.targets.storage import StorageAccess, target_storage

# Set to 1: use a server on the embedded catalog's port that cannot be verified (warns).
ALLOW_UNVERIFIED_ENV = "TABLEFLOW_CATALOG_ALLOW_UNVERIFIED"


class CatalogUnavailableError(TableflowError, RuntimeError):
    component_down = True

    """The catalog cannot be reached or opened."""


class CatalogServerNotVerifiedError(CatalogUnavailableError):
    """Something listens on the embedded catalog's port but did not prove it is the
    project's catalog server: no credential was sent to it."""


@dataclass
class CatalogHandle:
    catalog: Any  # pyiceberg.catalog.Catalog
    spark_name: str
    spark_properties: dict[str, str]
    address: str  # shown in error messages (never carries secrets)
    started_server: bool = False
    storage: StorageAccess | None = None  # the warehouse is on object storage
    _server: Any = field(default=None, repr=False)

    @property
    def reads_in_process(self) -> bool:
        """The catalog is an embedded server running in this process (see below)."""
        return self.in_process_service is not None

    @property
    def in_process_service(self) -> Any:
        """The CatalogService of the embedded server running in this process, or None."""
        return getattr(self._server, "service", None)

    def load_tables_in_process(
        self, identifiers: Sequence[tuple[str, ...]]
    ) -> dict[tuple[str, ...], Any] | None:
        """The existing tables of `identifiers` (pyiceberg tables, by identifier) read
        straight from the embedded catalog when it runs in this process; None otherwise
        (then each table is loaded over HTTP). Same database, same metadata files, same
        parsed-metadata cache as the server's answers: without a request, a response body
        and its parse per table, loading 1,000 tables costs a fraction of the CPU."""
        service = getattr(self._server, "service", None)
        if service is None:
            return None
        from pyiceberg.io import load_file_io
        from pyiceberg.table import Table

        loaded = service.load_tables(identifiers)
        return {
            identifier: Table(
                identifier,
                table.metadata,
                table.metadata_location,
                load_file_io(self.catalog.properties, table.metadata_location),
                self.catalog,
            )
            for identifier, table in loaded.items()
        }


def _secret(value: Any) -> str | None:
    return value.get_secret_value() if value is not None else None


def _embedded(
    project: Project, config: EmbeddedCatalog, serve: bool = True
) -> tuple[dict[str, str], dict[str, str], str, Any]:
    from tableflow_core.catalog.clients import (
        pyiceberg_catalog_properties,
        spark_catalog_properties,
    )
    from tableflow_core.catalog.project_settings import (
        embedded_client_credential,
        embedded_client_secret,
    )
    from tableflow_core.dev.processes import port_is_open

    credential = embedded_client_credential(config)
    server = None
    if config.port and port_is_open(config.host, config.port):
        secret = embedded_client_secret(config)
        if credential is not None and secret is not None:
            _verify_server(config, secret.get_secret_value())
        else:
            _verify_server_identity(project, config)
        uri = f"http://{config.host}:{config.port}"
    elif not serve:
        return _embedded_unserved(project, config)
    else:
        from tableflow_core.catalog.project_settings import in_process_server_settings
        from tableflow_core.catalog.runner import serve_in_background

        try:
            settings = in_process_server_settings(
                project, config, log_level="warning", access_log=False
            )
            # Started when a client first connects: an apply whose catalog calls are all
            # answered in this process (catalog/in_process.py) never starts it.
            server = serve_in_background(settings, on_first_connection=True)
        except (OSError, RuntimeError, ValueError) as exc:
            raise CatalogUnavailableError(
                f"catalog: cannot start the embedded catalog on {config.host}:{config.port}: {exc}"
            ) from exc
        uri = server.uri
        credential = server.credential
    pyiceberg_props = pyiceberg_catalog_properties(uri, credential)
    spark_props = spark_catalog_properties(uri, credential)
    storage = target_storage(config)
    if storage is not None:
        pyiceberg_props.update(storage.pyiceberg_properties())
        spark_props.update(storage.spark_properties())  # S3FileIO instead of Hadoop's
    return pyiceberg_props, spark_props, uri, server


def _embedded_unserved(
    project: Project, config: EmbeddedCatalog
) -> tuple[dict[str, str], dict[str, str], str, Any]:
    """The embedded catalog's service opened in this process, not served: for a command
    that only reads the catalog (`catalog/reader.py`). No Spark properties: nothing
    serves them."""
    from tableflow_core.catalog.project_settings import in_process_server_settings
    from tableflow_core.catalog.reader import ServiceInProcess
    from tableflow_core.catalog.runner import open_service

    settings = in_process_server_settings(project, config, log_level="warning", access_log=False)
    try:
        service = open_service(settings)
    except (OSError, RuntimeError, ValueError) as exc:
        raise CatalogUnavailableError(
            f"catalog: cannot open the embedded catalog's database: {project.redact(str(exc))}"
        ) from exc
    storage = target_storage(config)
    properties = storage.pyiceberg_properties() if storage is not None else {}
    return (
        properties,
        {},
        f"embedded catalog ({settings.warehouse_uri})",
        ServiceInProcess(settings, service),
    )


def _verify_server(config: EmbeddedCatalog, client_secret: str) -> None:
    from tableflow_core.catalog.verification import verification_problem

    problem = verification_problem(config.host, config.port, client_secret)
    if problem is not None:
        raise CatalogServerNotVerifiedError(
            f"catalog: something listens on {config.host}:{config.port}, the embedded "
            f"catalog's port, but it did not prove it is this project's catalog server: "
            f"{problem}. tableflow sent it no credentials. Stop that process, or give "
            "`catalog.port` another port (0 picks a free one)."
        )


def _verify_server_identity(project: Project, config: EmbeddedCatalog) -> None:
    """Without a secret: the server proves it holds the key of the project's catalog
    database; else stop, unless the user opted in (then warn)."""
    from tableflow_core.catalog.identity import read_server_key
    from tableflow_core.catalog.project_settings import in_process_server_settings
    from tableflow_core.catalog.verification import identity_problem

    try:
        database = in_process_server_settings(project, config).resolved_database_url
    except ValueError as exc:
        problem: str | None = f"its database is not known ({exc})"
    else:
        key = read_server_key(database)
        problem = (
            identity_problem(config.host, config.port, key)
            if key is not None
            else "the project's catalog database holds no server key yet (no catalog server "
            "of this project ever ran on it)"
        )
    if problem is None:
        return
    where = f"{config.host}:{config.port}"
    if os.environ.get(ALLOW_UNVERIFIED_ENV) == "1":
        print(
            f"warning: catalog: using the server on {where} without verifying it "
            f"({problem}; ${ALLOW_UNVERIFIED_ENV}=1)",
            file=sys.stderr,
        )
        return
    raise CatalogServerNotVerifiedError(
        f"catalog: something listens on {where}, the embedded catalog's port, but tableflow "
        f"cannot verify it is this project's catalog server: {problem}. Without a client "
        "secret, the server must prove it holds the key kept in the project's catalog "
        "database (`tableflow dev up` and `tableflow catalog serve` start such servers). "
        "Stop that process, give `catalog.port` another port (0 picks a free one), or set "
        f"{ALLOW_UNVERIFIED_ENV}=1 to use it unverified."
    )


def _rest(config: RestCatalog) -> tuple[dict[str, str], dict[str, str], str]:
    props = {"type": "rest", "uri": config.uri, **config.properties}
    if config.warehouse:
        props["warehouse"] = config.warehouse
    if config.credential is not None:
        props["credential"] = config.credential.get_secret_value()
        props.setdefault("rest.auth.type", "oauth2")  # Spark warns when it has to infer this
    if config.token is not None:
        props["token"] = config.token.get_secret_value()
    pyiceberg_props, spark_props = dict(props), dict(props)
    storage = target_storage(config)
    if storage is not None:
        # The user's own catalog properties win over what the storage block derives.
        pyiceberg_props = {**storage.pyiceberg_properties(), **pyiceberg_props}
        spark_props = {**storage.spark_properties(), **spark_props}
    return pyiceberg_props, spark_props, redact_url(config.uri)


def _sql(project: Project, config: SqlCatalog) -> tuple[dict[str, str], dict[str, str], str]:
    warehouse = config.warehouse
    if "://" not in warehouse:
        warehouse = project.resolve_path(warehouse).as_uri()
    pyiceberg_props = {
        "type": "sql",
        "uri": config.uri,
        "warehouse": warehouse,
        **config.properties,
    }
    spark_props = {
        "type": "jdbc",
        "uri": config.jdbc_uri or "",
        "warehouse": warehouse,
        **config.properties,
    }
    return pyiceberg_props, spark_props, redact_url(config.uri)


def _other(config: GlueCatalog | HiveCatalog) -> tuple[dict[str, str], dict[str, str], str]:
    props = {"type": config.type, **config.properties}
    if config.warehouse:
        props["warehouse"] = config.warehouse
    if isinstance(config, HiveCatalog):
        props["uri"] = config.uri
        return props, dict(props), redact_url(config.uri)
    if config.region:
        props["glue.region"] = config.region
    return props, dict(props), f"glue ({config.region or 'default region'})"


@contextlib.contextmanager
def open_catalog(project: Project, *, serve: bool = True) -> Iterator[CatalogHandle]:
    """The target's catalog; an in-process embedded server stops when the block ends.
    `serve=False`: the caller only reads through pyiceberg (plan): an embedded catalog
    nothing serves yet is read in this process without starting a server."""
    config = project.target.catalog
    server = None
    if isinstance(config, EmbeddedCatalog):
        pyiceberg_props, spark_props, address, server = _embedded(project, config, serve)
    elif isinstance(config, RestCatalog):
        pyiceberg_props, spark_props, address = _rest(config)
    elif isinstance(config, SqlCatalog):
        pyiceberg_props, spark_props, address = _sql(project, config)
    else:
        pyiceberg_props, spark_props, address = _other(config)
    try:
        try:
            catalog = _pyiceberg_catalog(
                config.name, pyiceberg_props, server, own=isinstance(config, EmbeddedCatalog)
            )
        except Exception as exc:
            raise CatalogUnavailableError(
                f"catalog: cannot connect to {config.type} catalog at {address}: "
                f"{project.redact(str(exc))}"
            ) from exc
        yield CatalogHandle(
            catalog=catalog,
            spark_name=config.name,
            spark_properties=spark_props,
            address=address,
            started_server=server is not None,
            storage=target_storage(config),
            _server=server,
        )
    finally:
        if server is not None:
            server.stop()


def _pyiceberg_catalog(
    name: str, properties: dict[str, str], server: Any, *, own: bool = False
) -> Any:
    """pyiceberg's catalog of the target; for an embedded server in this process, one
    whose commits call the server directly (`catalog/in_process.py`); for tableflow's own
    server elsewhere (`own`), one that leaves deleting old metadata files to it."""
    from pyiceberg.catalog import load_catalog

    service = getattr(server, "service", None)
    if service is None:
        if own and properties.get("type") == "rest":
            from tableflow_core.catalog.in_process import OwnServerCatalog

            return OwnServerCatalog(name, **properties)
        return load_catalog(name, **properties)
    from tableflow_core.catalog.in_process import InProcessRestCatalog
    from tableflow_core.catalog.reader import ServiceInProcess, ServiceReader

    if isinstance(server, ServiceInProcess):
        return ServiceReader(name, service, **properties)

    return InProcessRestCatalog(name, service, server.settings, **properties)


def use_catalog(
    project: Project, handle: CatalogHandle | None, *, serve: bool = True
) -> contextlib.AbstractContextManager[CatalogHandle]:
    """`handle` when the caller keeps one open (a command that plans then applies,
    `tableflow run` across its cycles), else the target's catalog for this block."""
    if handle is not None:
        return contextlib.nullcontext(handle)
    return open_catalog(project, serve=serve)


def spark_catalog_known_before_open(project: Project) -> tuple[str, dict[str, str]] | None:
    """The target's catalog as Spark registers it, when the project's config alone gives
    it (a REST catalog: no server to start, no I/O), so the Spark application can be
    started with it in its own conf before the catalog is opened; None otherwise (an
    embedded catalog's address is known once its server runs)."""
    config = project.target.catalog
    if not isinstance(config, RestCatalog):
        return None
    return config.name, _rest(config)[1]
