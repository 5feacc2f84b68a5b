"""Running the catalog server: on a background thread (tests, `plan`/`apply`) or in the foreground."""

from __future__ import annotations

import http.client
import logging
import os
import selectors
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import uvicorn

from tableflow_core.catalog.app import create_app
from tableflow_core.catalog.clients import (
    pyiceberg_catalog_properties,
    spark_catalog_properties,
    token_endpoint,
)
from tableflow_core.catalog.service import CatalogService
from tableflow_core.catalog.settings import CLIENT_SECRET_ENV, CatalogServerSettings
from tableflow_core.catalog.storage import (
    ACCESS_KEY_ID_ENV,
    SECRET_ACCESS_KEY_ENV,
    SESSION_TOKEN_ENV,
)
from tableflow_core.redaction import redact_url

log = logging.getLogger(__name__)

STORAGE_KEY_ENVS = (ACCESS_KEY_ID_ENV, SECRET_ACCESS_KEY_ENV, SESSION_TOKEN_ENV)


class RedactSecretsFilter(logging.Filter):
    """Masks secret-looking query parameters and URL passwords in log lines (access logs
    print the full path); the rules are `tableflow_core/redaction.py`'s."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.args and isinstance(record.args, tuple):
            record.args = tuple(
                redact_url(arg) if isinstance(arg, str) else arg for arg in record.args
            )
        if isinstance(record.msg, str):
            record.msg = redact_url(record.msg)
        return True


def _install_log_redaction() -> None:
    for name in ("uvicorn.access", "uvicorn.error"):
        logger = logging.getLogger(name)
        if not any(isinstance(f, RedactSecretsFilter) for f in logger.filters):
            logger.addFilter(RedactSecretsFilter())


KEEP_ALIVE_S = 120


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
        # uvicorn's default (5 s) closed connections that clients keep in their pools
        # while an apply of 1,000 tables kept them busy elsewhere; a request racing that
        # close failed with "Connection reset by peer".
        timeout_keep_alive=KEEP_ALIVE_S,
    )
    _install_log_redaction()  # after Config, which (re)configures uvicorn's loggers
    return uvicorn.Server(config)


def open_service(settings: CatalogServerSettings) -> CatalogService:
    if isinstance(settings.warehouse, Path):
        settings.warehouse.mkdir(parents=True, exist_ok=True)
    sqlite_file = settings.resolved_database_url.partition("sqlite:///")[2]
    if sqlite_file and settings.resolved_database_url.startswith("sqlite:///"):
        # An s3:// warehouse keeps its database elsewhere: make its folder like the
        # warehouse's (SQLite creates the file, not the folder).
        Path(sqlite_file).parent.mkdir(parents=True, exist_ok=True)
    return CatalogService.open(
        settings.resolved_database_url,
        settings.warehouse_uri,
        settings.catalog_name,
        settings.allowed_locations,
        settings.file_io_properties,
        metadata_cache_entries=settings.metadata_cache_entries,
    )


class RunningCatalogServer:
    """A catalog server this process started: on a background thread, or as a child process."""

    def __init__(
        self,
        settings: CatalogServerSettings,
        port: int,
        stop: Callable[[float], None],
        service: CatalogService | None = None,
    ) -> None:
        self.settings = settings
        self.host = settings.host
        self.port = port
        self._stop = stop
        # The service answering the requests, when it runs in this process: a caller here
        # may read through it directly (bulk reads without one HTTP request per table).
        self.service = service

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

    def bearer_token(self) -> str:
        """An access token from the server's client-credentials endpoint, for raw HTTP
        clients (pyiceberg, Spark and DuckDB fetch their own from `credential`)."""
        import requests

        secret = self.settings.client_secret
        response = requests.post(
            token_endpoint(self.uri),
            data={
                "grant_type": "client_credentials",
                "client_id": self.settings.client_id,
                "client_secret": secret.get_secret_value() if secret is not None else "",
            },
            timeout=10,
        )
        response.raise_for_status()
        return str(response.json()["access_token"])

    def spark_properties(self, warehouse: str | None = None) -> dict[str, str]:
        return spark_catalog_properties(self.uri, self.credential, warehouse)

    def stop(self, timeout: float = 10.0) -> None:
        self._stop(timeout)

    def __enter__(self) -> RunningCatalogServer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def serve_in_background(
    settings: CatalogServerSettings, timeout: float = 30.0, *, on_first_connection: bool = False
) -> RunningCatalogServer:
    """Start the server on a daemon thread; returns once it accepts requests.

    Use as `with serve_in_background(settings) as server: ... server.uri ...`,
    or keep the result and call `.stop()`.

    `on_first_connection`: the port is bound and listening at once (the URI is known), but
    the server (FastAPI building its routes, uvicorn's loop) starts only when a client
    first connects; that client waits in the listen queue meanwhile. A command whose
    catalog calls are all answered in this process (`catalog/in_process.py`: a driver-only
    apply) then never starts it, nor waits for it to stop: ~0.13 s to start and 0.12-0.17 s
    to stop (uvicorn's 0.1-s loop tick and its fixed 0.1-s sleep in shutdown), measured in
    a new process's 100k-record upsert batch.
    """
    service = open_service(settings)
    background = _BackgroundServer(
        settings, service, bind_listener(settings.host, settings.port), timeout
    )
    if on_first_connection:
        background.start_on_first_connection()
    else:
        try:
            background.start()
        except BaseException:
            service.close()
            raise
    return RunningCatalogServer(settings, background.port, background.stop, service)


class _BackgroundServer:
    """uvicorn serving one listening socket on a daemon thread, started now or when a
    client first connects; `stop` also closes the service."""

    def __init__(
        self,
        settings: CatalogServerSettings,
        service: CatalogService,
        sock: socket.socket,
        timeout: float,
    ) -> None:
        self._settings = settings
        self._service = service
        self._sock = sock
        self._timeout = timeout
        self.port = int(sock.getsockname()[1])
        self._starting = threading.Lock()
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self._watcher: threading.Thread | None = None
        self._wake, self._woken = socket.socketpair()
        self._stopping = False  # once set, nothing starts the server

    def start(self) -> None:
        """Serve now (if not yet); raises RuntimeError if the server does not start."""
        with self._starting:
            if self._server is not None or self._stopping:
                return
            try:
                server = _uvicorn_server(self._settings, self._service)
                thread = threading.Thread(
                    target=server.run,
                    kwargs={"sockets": [self._sock]},
                    name=f"catalog-server-{self.port}",
                    daemon=True,
                )
                thread.start()
            except BaseException:
                self._close_unserved()
                raise
            deadline = time.monotonic() + self._timeout
            while not server.started:
                if not thread.is_alive() or time.monotonic() > deadline:
                    server.should_exit = True
                    self._close_unserved()
                    raise RuntimeError(
                        f"catalog server did not start on {self._settings.host}:{self.port}"
                    )
                time.sleep(0.005)
            self._server, self._thread = server, thread

    def start_on_first_connection(self) -> None:
        self._watcher = threading.Thread(
            target=self._start_when_connected,
            name=f"catalog-server-{self.port}-unstarted",
            daemon=True,
        )
        self._watcher.start()

    def _start_when_connected(self) -> None:
        with selectors.DefaultSelector() as selector:  # not select(): descriptors > 1023
            selector.register(self._sock, selectors.EVENT_READ)
            selector.register(self._woken, selectors.EVENT_READ)
            ready = {key.fileobj for key, _ in selector.select()}
        if self._sock not in ready or self._stopping:
            return
        try:
            self.start()
        except Exception as exc:  # the waiting client's connection is reset
            log.error("catalog server on %s:%s: %s", self._settings.host, self.port, exc)

    def _close_unserved(self) -> None:
        """Close the socket no server took over: waiting clients are refused, not kept."""
        self._sock.close()

    def stop(self, timeout: float) -> None:
        if self._stopping:  # stopped already
            return
        self._stopping = True
        self._wake.send(b"\0")
        if self._watcher is not None:
            self._watcher.join(timeout)
        with self._starting:
            if self._server is not None and self._thread is not None:
                self._server.should_exit = True
                self._thread.join(timeout)
            else:
                self._close_unserved()
        self._wake.close()
        self._woken.close()
        self._service.close()


def serve_in_subprocess(
    settings: CatalogServerSettings, timeout: float = 60.0
) -> RunningCatalogServer:
    """Start the server as a child process; returns once it answers HTTP.

    In its own process the server does not compete for this process's GIL: beside a
    CPU-bound Python thread, requests to an in-process server waited tens of ms for it
    (`benchmarks/catalog_commits.py --gil`). The child listens on a socket bound here (so
    the port is known at once) and exits when this process goes away, even on kill -9:
    it watches its stdin, a pipe only this process holds.
    """
    listener = bind_listener(settings.host, settings.port)
    port = int(listener.getsockname()[1])
    command = [
        sys.executable, "-m", "tableflow_core.catalog.server",
        *server_arguments(settings),
        "--listen-fd", str(listener.fileno()), "--exit-on-stdin-eof",
    ]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k not in (CLIENT_SECRET_ENV, *STORAGE_KEY_ENVS)}
    if settings.client_secret is not None:
        env[CLIENT_SECRET_ENV] = settings.client_secret.get_secret_value()
    if settings.storage is not None:
        env.update(settings.storage.environment())
    try:
        process = subprocess.Popen(
            command, env=env, stdin=subprocess.PIPE, pass_fds=(listener.fileno(),)
        )
    finally:
        listener.close()  # the child holds its own copy

    def stop(stop_timeout: float) -> None:
        if process.stdin is not None:
            process.stdin.close()  # the child shuts down gracefully on EOF
        try:
            process.wait(stop_timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    if not _answers_http(settings.host, port, process, timeout):
        stop(2.0)
        raise RuntimeError(f"catalog server process did not start on {settings.host}:{port}")
    return RunningCatalogServer(settings, port, stop)


def _answers_http(host: str, port: int, process: subprocess.Popen[bytes], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while process.poll() is None and time.monotonic() < deadline:
        connection = http.client.HTTPConnection(host, port, timeout=5)
        try:
            connection.request("GET", "/v1/config")
            connection.getresponse().read()  # any status: the app is up
            return True
        except OSError:
            time.sleep(0.05)
        finally:
            connection.close()
    return False


def server_arguments(settings: CatalogServerSettings) -> list[str]:
    """Command-line arguments of `python -m tableflow_core.catalog.server` for `settings`
    (the client secret goes through the environment, never the command line)."""
    arguments = [
        "--host", settings.host, "--port", str(settings.port),
        "--warehouse", str(settings.warehouse),
        "--auth", settings.auth, "--client-id", settings.client_id,
        "--catalog-name", settings.catalog_name,
        "--token-ttl-seconds", str(settings.token_ttl_seconds),
        "--token-max-lifetime-seconds", str(settings.token_max_lifetime_seconds),
        "--log-level", settings.log_level,
    ]  # fmt: skip
    if settings.database_url is not None:
        arguments += ["--database-url", settings.database_url]
    for location in settings.allowed_locations:
        arguments += ["--allow-location", location]
    if not settings.access_log:
        arguments.append("--no-access-log")
    if settings.storage is not None:
        arguments += settings.storage.server_arguments()
    return arguments


def serve_forever(settings: CatalogServerSettings, sock: socket.socket | None = None) -> None:
    """Run in the foreground until SIGINT/SIGTERM (on `sock` if given, else bind one)."""
    service = open_service(settings)
    try:
        sock = sock or bind_listener(settings.host, settings.port)
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
