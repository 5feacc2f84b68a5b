"""Running the catalog server: on a background thread (tests, `plan`/`apply`) or in the foreground."""

from __future__ import annotations

import logging
import re
import socket
import threading
import time
from types import TracebackType

import uvicorn

from tableflow_core.catalog.app import create_app
from tableflow_core.catalog.clients import pyiceberg_catalog_properties, spark_catalog_properties
from tableflow_core.catalog.service import CatalogService
from tableflow_core.catalog.settings import CatalogServerSettings

_SECRET_IN_QUERY = re.compile(
    r"((?:client_secret|secret|token|credential)=)[^&\s\"]*", re.IGNORECASE
)


class RedactSecretsFilter(logging.Filter):
    """Masks secret-looking query parameters in log lines (access logs print the full path)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.args and isinstance(record.args, tuple):
            record.args = tuple(
                _SECRET_IN_QUERY.sub(r"\1***", arg) if isinstance(arg, str) else arg
                for arg in record.args
            )
        if isinstance(record.msg, str):
            record.msg = _SECRET_IN_QUERY.sub(r"\1***", record.msg)
        return True


def _install_log_redaction() -> None:
    for name in ("uvicorn.access", "uvicorn.error"):
        logger = logging.getLogger(name)
        if not any(isinstance(f, RedactSecretsFilter) for f in logger.filters):
            logger.addFilter(RedactSecretsFilter())


def bind_listener(host: str, port: int) -> socket.socket:
    """A listening TCP socket for uvicorn (port 0: a free one).

    `proto` must say TCP: asyncio sets TCP_NODELAY on accepted connections only when the
    listener's proto is IPPROTO_TCP. Without it Nagle's algorithm held back the second
    write of each response (uvicorn writes headers and body separately) until the
    client's delayed ACK, adding ~40 ms to every request.
    """
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(128)
    return sock


def _uvicorn_server(settings: CatalogServerSettings, service: CatalogService) -> uvicorn.Server:
    config = uvicorn.Config(
        create_app(settings, service),
        log_level=settings.log_level,
        access_log=settings.access_log,
        timeout_graceful_shutdown=5,
    )
    _install_log_redaction()  # after Config, which (re)configures uvicorn's loggers
    return uvicorn.Server(config)


def _open_service(settings: CatalogServerSettings) -> CatalogService:
    settings.warehouse.mkdir(parents=True, exist_ok=True)
    return CatalogService.open(
        settings.resolved_database_url,
        settings.warehouse_uri,
        settings.catalog_name,
        settings.allowed_locations,
    )


class RunningCatalogServer:
    """A catalog server running on a background thread of this process."""

    def __init__(
        self,
        settings: CatalogServerSettings,
        server: uvicorn.Server,
        thread: threading.Thread,
        service: CatalogService,
        port: int,
    ) -> None:
        self.settings = settings
        self.host = settings.host
        self.port = port
        self._server = server
        self._thread = thread
        self._service = service

    @property
    def uri(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def credential(self) -> str | None:
        """'client_id:client_secret' for clients, None when auth is none."""
        secret = self.settings.client_secret
        if self.settings.auth == "none" or secret is None:
            return None
        return f"{self.settings.client_id}:{secret.get_secret_value()}"

    def pyiceberg_properties(self, warehouse: str | None = None) -> dict[str, str]:
        return pyiceberg_catalog_properties(self.uri, self.credential, warehouse)

    def spark_properties(self, warehouse: str | None = None) -> dict[str, str]:
        return spark_catalog_properties(self.uri, self.credential, warehouse)

    def stop(self, timeout: float = 10.0) -> None:
        self._server.should_exit = True
        self._thread.join(timeout)
        self._service.close()

    def __enter__(self) -> RunningCatalogServer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def serve_in_background(
    settings: CatalogServerSettings, timeout: float = 30.0
) -> RunningCatalogServer:
    """Start the server on a daemon thread; returns once it accepts requests.

    Use as `with serve_in_background(settings) as server: ... server.uri ...`,
    or keep the result and call `.stop()`.
    """
    service = _open_service(settings)
    sock = bind_listener(settings.host, settings.port)
    port = int(sock.getsockname()[1])
    server = _uvicorn_server(settings, service)
    thread = threading.Thread(
        target=server.run, kwargs={"sockets": [sock]}, name=f"catalog-server-{port}", daemon=True
    )
    thread.start()
    deadline = time.monotonic() + timeout
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            server.should_exit = True
            sock.close()
            service.close()
            raise RuntimeError(f"catalog server did not start on {settings.host}:{port}")
        time.sleep(0.02)
    return RunningCatalogServer(settings, server, thread, service, port)


def serve_forever(settings: CatalogServerSettings) -> None:
    """Run in the foreground until SIGINT/SIGTERM."""
    service = _open_service(settings)
    try:
        sock = bind_listener(settings.host, settings.port)
        port = sock.getsockname()[1]
        logging.getLogger(__name__).info(
            "Iceberg REST catalog on http://%s:%s (warehouse %s, auth %s)",
            settings.host,
            port,
            settings.warehouse_uri,
            settings.auth,
        )
        _uvicorn_server(settings, service).run(sockets=[sock])
    finally:
        service.close()
