"""The HTTP relay the dev stack's S3 middlemen share (the fault proxy and the STS gateway):
read a request's body, send it on to the store, answer with what the store said."""

from __future__ import annotations

import contextlib
import http.client
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Generic, Self, TypeVar

# Hop-by-hop headers (RFC 9110 7.6.1) are not forwarded; the body is re-framed.
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-connection",
        "transfer-encoding",
        "te",
        "trailer",
        "upgrade",
    }
)

Headers = list[tuple[str, str]]


class RelayHandler(BaseHTTPRequestHandler):
    """A request handler that relays to an upstream store; subclasses decide what to
    relay (and what to refuse or break) in their `do_*` methods."""

    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:
        pass  # nothing printed: query strings and headers can carry signatures

    def read_body(self) -> bytes:
        """The request's body, `Transfer-Encoding: chunked` or `Content-Length` framed."""
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks: list[bytes] = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def relay(
        self, host: str, port: int, target: str, headers: Headers, body: bytes
    ) -> tuple[int, Headers, bytes]:
        """Send this request's method to `host:port` `target` with `headers` (hop-by-hop
        ones dropped) and `body`: the store's status, headers and payload (OSError when
        it does not answer)."""
        connection = http.client.HTTPConnection(host, port, timeout=300)
        try:
            connection.putrequest(self.command, target, skip_host=True, skip_accept_encoding=True)
            for name, value in headers:
                lower = name.lower()
                if lower in HOP_BY_HOP or lower in ("content-length", "expect"):
                    continue
                connection.putheader(name, value)
            if body or self.command in ("PUT", "POST"):
                connection.putheader("Content-Length", str(len(body)))
            connection.endheaders(body or None)
            response = connection.getresponse()
            payload = response.read()
            answer = [(k, v) for k, v in response.getheaders() if k.lower() not in HOP_BY_HOP]
            return response.status, answer, payload
        finally:
            connection.close()

    def respond(self, status: int, headers: Headers, payload: bytes) -> None:
        """Answer with `payload`, its Content-Length re-computed (none sent for HEAD)."""
        self.send_response_only(status)
        has_length = False
        for name, value in headers:
            if name.lower() == "content-length":
                has_length = True
                if self.command != "HEAD":
                    value = str(len(payload))
            self.send_header(name, value)
        if not has_length:
            self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(payload)

    def finish(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            super().finish()


State = TypeVar("State")


class RelayServer(ThreadingHTTPServer, Generic[State]):
    """A threaded HTTP server whose handlers share `state`. Handler errors are not
    printed: a connection the client (or a fault) dropped is no traceback worth."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(
        self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler], state: State
    ) -> None:
        super().__init__(address, handler)
        self.state = state

    def handle_error(self, request: object, client_address: object) -> None:
        pass


class BackgroundRelay(Generic[State]):
    """A relay serving on `host` and a port (0: a free one) on a background thread, in
    this process; `close()`, or leaving a `with` block, stops it."""

    def __init__(
        self,
        handler: type[BaseHTTPRequestHandler],
        state: State,
        host: str,
        port: int,
        thread_name: str,
    ) -> None:
        self._state = state
        self._server = RelayServer((host, port), handler, state)
        self._thread = threading.Thread(
            target=self._server.serve_forever, name=thread_name, daemon=True
        )
        self._thread.start()

    @property
    def endpoint(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
