"""An HTTP proxy in front of the S3 server that records requests and injects faults.

Tests put it between a client (Spark's S3FileIO, pyiceberg, delta-rs, boto3) and the
object store to prove what happens when the store fails mid-operation, and to count
the S3 requests an operation makes. Clients use the proxy's `endpoint` in place of the
store's; requests are forwarded unchanged (the `Host` header too, so AWS signatures
made for the proxy's address still verify at the store).

    with FaultProxy(upstream=server.endpoint) as proxy:
        proxy.add_fault(Fault(method="PUT", path=r"/metadata/.*\\.json$", action="status",
                              status=503, times=1))
        ... run the client against proxy.endpoint ...
        proxy.requests            # every request seen, with the answer given
        proxy.count(method="PUT") # how many PUTs went through

Actions: `status` answers with an S3 error (the store never sees the request),
`reset` drops the connection before forwarding, `reset-after` forwards (the store
applies the request) and then drops the connection so the client never learns the
outcome, `delay` waits `seconds` before forwarding. `skip` lets the first N matching
requests through untouched; `times` limits how many are hit (None: all).
"""

from __future__ import annotations

import contextlib
import re
import socket
import struct
import threading
import time
from dataclasses import dataclass, field
from typing import Literal
from urllib.parse import urlsplit

from tests.support.http_relay import BackgroundRelay, RelayHandler, RelayServer

FaultAction = Literal["status", "reset", "reset-after", "delay"]

_CONDITIONAL_HEADERS = {"if-match", "if-none-match"}


@dataclass
class Fault:
    """Which requests to hit (regular expressions; None matches anything) and how."""

    action: FaultAction
    method: str | None = None
    path: str | None = None
    query: str | None = None
    status: int = 503
    seconds: float = 0.0
    skip: int = 0
    times: int | None = 1
    seen: int = 0
    hits: int = 0

    def matches(self, method: str, path: str, query: str) -> bool:
        return (
            (self.method is None or self.method == method)
            and (self.path is None or re.search(self.path, path) is not None)
            and (self.query is None or re.search(self.query, query) is not None)
        )

    def take(self) -> bool:
        """Count a matching request; True when this one is to be hit."""
        self.seen += 1
        if self.seen <= self.skip or (self.times is not None and self.hits >= self.times):
            return False
        self.hits += 1
        return True


@dataclass(frozen=True)
class RecordedRequest:
    method: str
    path: str
    query: str
    request_bytes: int
    status: int | None  # None: the connection was dropped
    fault: FaultAction | None
    seconds: float
    at: float  # time.time() when the request arrived, to match it to a client's phases
    conditions: tuple[tuple[str, str], ...] = ()  # If-Match / If-None-Match headers sent


@dataclass
class _State:
    upstream_host: str
    upstream_port: int
    faults: list[Fault] = field(default_factory=list)
    requests: list[RecordedRequest] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def pick(self, method: str, path: str, query: str) -> Fault | None:
        with self.lock:
            for fault in self.faults:
                if fault.matches(method, path, query) and fault.take():
                    return fault
        return None

    def record(self, request: RecordedRequest) -> None:
        with self.lock:
            self.requests.append(request)


class _Handler(RelayHandler):
    """Requests are recorded, not printed (query strings may carry signatures)."""

    server: RelayServer[_State]

    def _proxy(self) -> None:
        started = time.monotonic()
        arrived = time.time()
        split = urlsplit(self.path)
        body = self.read_body()
        fault = self.server.state.pick(self.command, split.path, split.query)

        def record(status: int | None) -> None:
            # Before the client hears back, so a test that asserts right after sees it.
            self.server.state.record(
                RecordedRequest(
                    self.command,
                    split.path,
                    split.query,
                    len(body),
                    status,
                    fault.action if fault else None,
                    time.monotonic() - started,
                    arrived,
                    tuple(
                        (name, value)
                        for name, value in self.headers.items()
                        if name.lower() in _CONDITIONAL_HEADERS
                    ),
                )
            )

        if fault is not None and fault.action == "status":
            record(fault.status)
            self._send_error(fault.status)
            return
        if fault is not None and fault.action == "reset":
            record(None)
            self._reset()
            return
        if fault is not None and fault.action == "delay":
            time.sleep(fault.seconds)
        try:
            status, headers, payload = self._forward(body)
        except OSError:
            record(None)
            self._send_error(502)
            return
        if fault is not None and fault.action == "reset-after":
            record(None)
            self._reset()
            return
        record(status)
        self.respond(status, headers, payload)

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _proxy

    def _forward(self, body: bytes) -> tuple[int, list[tuple[str, str]], bytes]:
        state = self.server.state
        return self.relay(
            state.upstream_host, state.upstream_port, self.path, list(self.headers.items()), body
        )

    def _send_error(self, status: int) -> None:
        code = {500: "InternalError", 502: "BadGateway", 503: "SlowDown"}.get(
            status, "ServiceUnavailable"
        )
        body = (
            '<?xml version="1.0" encoding="UTF-8"?>'
            f"<Error><Code>{code}</Code><Message>injected by the fault proxy</Message></Error>"
        ).encode()
        self.send_response_only(status)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _reset(self) -> None:
        """Close with RST (SO_LINGER 0): the client sees 'connection reset by peer'."""
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.connection.close()


class FaultProxy(BackgroundRelay[_State]):
    """The proxy, serving on `host` (loopback) and a free port, on a background thread."""

    def __init__(self, upstream: str, host: str = "127.0.0.1", port: int = 0) -> None:
        parsed = urlsplit(upstream)
        if parsed.scheme != "http" or not parsed.hostname or not parsed.port:
            raise ValueError(f"upstream must be http://host:port, got {upstream!r}")
        super().__init__(
            _Handler, _State(parsed.hostname, parsed.port), host, port, "s3-fault-proxy"
        )

    def add_fault(self, fault: Fault) -> Fault:
        with self._state.lock:
            self._state.faults.append(fault)
        return fault

    def clear_faults(self) -> None:
        with self._state.lock:
            self._state.faults.clear()

    @property
    def requests(self) -> list[RecordedRequest]:
        with self._state.lock:
            return list(self._state.requests)

    def reset_requests(self) -> None:
        with self._state.lock:
            self._state.requests.clear()

    def count(self, method: str | None = None, path: str | None = None) -> int:
        return sum(
            1
            for r in self.requests
            if (method is None or r.method == method)
            and (path is None or re.search(path, r.path) is not None)
        )
