"""The HTTP endpoint of `tableflow run --metrics-port`: `/metrics` (Prometheus text
format, by prometheus_client), `/healthz` and `/readyz` (JSON; 200 or 503).

Served by a thread of its own (the standard library's WSGI server, one thread per
request), on loopback unless the target's `metrics.host` says otherwise.
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Callable, Iterable
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app

from tableflow_core.observability.health import Health

DEFAULT_HOST = "127.0.0.1"

StartResponse = Callable[..., Any]


class _ThreadingServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _ThreadingServer6(_ThreadingServer):
    address_family = socket.AF_INET6


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # scrapes are not news
        pass


def _json(start_response: StartResponse, result: tuple[bool, dict[str, Any]]) -> Iterable[bytes]:
    ok, body = result
    start_response(
        "200 OK" if ok else "503 Service Unavailable",
        [("Content-Type", "application/json"), ("Cache-Control", "no-store")],
    )
    return [json.dumps(body, sort_keys=True).encode() + b"\n"]


def metrics_app(registry: CollectorRegistry, health: Health) -> Callable[..., Iterable[bytes]]:
    metrics = make_wsgi_app(registry)

    def app(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "/")
        if path == "/healthz":
            return _json(start_response, health.healthz())
        if path == "/readyz":
            return _json(start_response, health.readyz())
        if path in ("/metrics", "/"):
            return metrics(environ, start_response)
        start_response("404 Not Found", [("Content-Type", "text/plain")])
        return [b"not found: /metrics, /healthz, /readyz\n"]

    return app


class MetricsServer:
    """Serves until `stop()`. `port` 0 takes a free port (`self.port` tells which)."""

    def __init__(
        self, registry: CollectorRegistry, health: Health, port: int, host: str = DEFAULT_HOST
    ) -> None:
        self._server = make_server(
            host,
            port,
            metrics_app(registry, health),
            server_class=_ThreadingServer6 if ":" in host else _ThreadingServer,
            handler_class=_QuietHandler,
        )
        self.host = host
        self.port: int = self._server.server_address[1]
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="tableflow-metrics-http", daemon=True
        )
        self._thread.start()

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
