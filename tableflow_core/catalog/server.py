"""Running the catalog server: in a background thread (tests, `plan`/`apply`) or as a process.

    python -m tableflow_core.catalog.server --host 127.0.0.1 --port 8181 \
        --warehouse ./warehouse --database-url sqlite:///./warehouse/catalog.db \
        --auth client-credentials --client-id tableflow
    # the secret comes from the environment: TABLEFLOW_CATALOG_CLIENT_SECRET
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import socket
import sys
import threading
import time
from collections.abc import Sequence
from types import TracebackType

import uvicorn
from pydantic import SecretStr, ValidationError

from tableflow_core.catalog.app import create_app
from tableflow_core.catalog.clients import pyiceberg_catalog_properties, spark_catalog_properties
from tableflow_core.catalog.service import CatalogService
from tableflow_core.catalog.settings import CLIENT_SECRET_ENV, CatalogServerSettings

__all__ = [
    "CatalogServerSettings",
    "RunningCatalogServer",
    "main",
    "serve_in_background",
]

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


def _bind(host: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
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
    return uvicorn.Server(config)


def _open_service(settings: CatalogServerSettings) -> CatalogService:
    settings.warehouse.mkdir(parents=True, exist_ok=True)
    return CatalogService.open(
        settings.resolved_database_url, settings.warehouse_uri, settings.catalog_name
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
    _install_log_redaction()
    service = _open_service(settings)
    sock = _bind(settings.host, settings.port)
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
    _install_log_redaction()
    service = _open_service(settings)
    try:
        sock = _bind(settings.host, settings.port)
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


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m tableflow_core.catalog.server",
        description=f"tableflow's Iceberg REST catalog. The client secret is read from ${CLIENT_SECRET_ENV}.",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8181)
    parser.add_argument("--warehouse", required=True, help="warehouse directory")
    parser.add_argument(
        "--database-url", default=None, help="default sqlite:///<warehouse>/catalog.db"
    )
    parser.add_argument(
        "--auth", choices=["none", "client-credentials"], default="client-credentials"
    )
    parser.add_argument("--client-id", default="tableflow")
    parser.add_argument("--token-ttl-seconds", type=int, default=3600)
    parser.add_argument("--log-level", default="info")
    parser.add_argument("--no-access-log", action="store_true")
    return parser.parse_args(argv)


def settings_from_args(
    args: argparse.Namespace, environ: dict[str, str] | None = None
) -> CatalogServerSettings:
    environ = dict(os.environ) if environ is None else environ
    secret = environ.get(CLIENT_SECRET_ENV)
    return CatalogServerSettings(
        host=args.host,
        port=args.port,
        warehouse=args.warehouse,
        database_url=args.database_url,
        auth=args.auth,
        client_id=args.client_id,
        client_secret=SecretStr(secret) if secret else None,
        token_ttl_seconds=args.token_ttl_seconds,
        log_level=args.log_level,
        access_log=not args.no_access_log,
    )


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        settings = settings_from_args(parse_args(argv))
    except ValidationError as exc:
        # pydantic never prints SecretStr values.
        print(f"catalog server: invalid settings: {exc}", file=sys.stderr)
        return 2
    serve_forever(settings)
    return 0


if __name__ == "__main__":
    sys.exit(main())
