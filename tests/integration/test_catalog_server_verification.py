"""Issue #32: plan/apply send the embedded catalog's credentials only to a server that
proved it holds the project's secret. Servers run on threads of this process."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from pydantic import SecretStr

from tableflow_core.catalog import CatalogServerSettings, serve_in_background
from tableflow_core.catalog.project_settings import embedded_server_settings
from tableflow_core.catalog.settings import CLIENT_SECRET_ENV
from tableflow_core.catalog.verification import verification_problem
from tableflow_core.config.loader import load_project
from tableflow_core.config.models.catalogs import EmbeddedCatalog
from tableflow_core.config.project import Project
from tableflow_core.dev.processes import free_port
from tableflow_core.targets.catalog import (
    ALLOW_UNVERIFIED_ENV,
    CatalogServerNotVerifiedError,
    open_catalog,
)

SECRET = "the-projects-secret-0123456789"


def project_on_port(directory: Path, port: int, mode: str = "client_credentials") -> Project:
    (directory / "tableflow_project.yml").write_text(
        "name: p\ntargets:\n  dev:\n    kafka: {bootstrap_servers: 'b:1'}\n"
        f"    catalog: {{type: embedded, port: {port}, warehouse: ./wh,\n"
        f"              auth: {{mode: {mode}, client_secret: {SECRET}}}}}\n"
    )
    return load_project(directory)


class RecordingServer(ThreadingHTTPServer):
    """Anything else on the port: answers every request and keeps what it was sent."""

    def __init__(self, port: int) -> None:
        self.seen: list[bytes] = []
        super().__init__(("127.0.0.1", port), _Recorder)


class _Recorder(BaseHTTPRequestHandler):
    server: RecordingServer

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        self.server.seen.append(self.requestline.encode() + bytes(self.headers) + body)
        payload = b'{"access_token": "x", "token_type": "bearer", "expires_in": 3600}'
        if self.path.startswith("/v1/config"):
            payload = b'{"defaults": {}, "overrides": {}}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    do_GET = do_POST = do_HEAD = _answer

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def impostor() -> Iterator[RecordingServer]:
    server = RecordingServer(free_port())
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def test_credentials_are_never_sent_to_another_server_on_the_port(
    tmp_path: Path, impostor: RecordingServer
) -> None:
    project = project_on_port(tmp_path, impostor.server_address[1])
    with pytest.raises(CatalogServerNotVerifiedError) as refused, open_catalog(project):
        pass
    message = str(refused.value)
    assert "did not prove it is this project's catalog server" in message
    assert "not a tableflow catalog server" in message and "sent it no credentials" in message
    assert SECRET not in message
    assert impostor.seen, "the proof request reached it"
    assert not any(SECRET.encode() in request for request in impostor.seen)
    assert not any(b"oauth" in request or b"Authorization" in request for request in impostor.seen)


def test_a_tableflow_catalog_with_another_secret_or_no_auth_is_refused(tmp_path: Path) -> None:
    port = free_port()
    project = project_on_port(tmp_path, port)
    other = CatalogServerSettings(
        warehouse=tmp_path / "other", port=port, client_secret=SecretStr("x"), access_log=False
    )
    with (
        serve_in_background(other),
        pytest.raises(CatalogServerNotVerifiedError, match="another client secret"),
        open_catalog(project),
    ):
        pass
    open_server = CatalogServerSettings(
        warehouse=tmp_path / "other", port=port, auth="none", access_log=False
    )
    with (
        serve_in_background(open_server),
        pytest.raises(CatalogServerNotVerifiedError, match=r"auth\.mode: none"),
        open_catalog(project),
    ):
        pass


def test_the_projects_own_server_is_verified_and_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(CLIENT_SECRET_ENV, raising=False)
    port = free_port()
    project = project_on_port(tmp_path, port)
    config = project.target.catalog
    assert isinstance(config, EmbeddedCatalog)
    settings = embedded_server_settings(project, config, access_log=False)
    with serve_in_background(settings) as running, open_catalog(project) as handle:
        assert not handle.started_server and handle.address == running.uri
        handle.catalog.create_namespace("verified")
        assert ("verified",) in handle.catalog.list_namespaces()


def test_auth_none_projects_send_nothing_to_verify(tmp_path: Path) -> None:
    port = free_port()
    project = project_on_port(tmp_path, port, mode="none")
    settings = CatalogServerSettings(
        warehouse=tmp_path / "wh", port=port, auth="none", access_log=False
    )
    with serve_in_background(settings), open_catalog(project) as handle:
        assert handle.catalog.list_namespaces() == []


def test_a_relayed_answer_does_not_verify(tmp_path: Path) -> None:
    """A server that forwards the challenge to the real one (elsewhere) gets a proof
    bound to the real server's address: it does not match the relay's."""
    settings = CatalogServerSettings(
        warehouse=tmp_path / "wh", client_secret=SecretStr(SECRET), access_log=False
    )
    with serve_in_background(settings) as real:
        assert verification_problem(real.host, real.port, SECRET) is None
        relay = _Relay(real.port)
        try:
            problem = verification_problem("127.0.0.1", relay.port, SECRET)
        finally:
            relay.close()
    assert problem == "it is a tableflow catalog with another client secret"


class _Relay:
    """A TCP forwarder from a free port to 127.0.0.1:`target`."""

    def __init__(self, target: int) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self._target = target
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self._target))
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=_pump, args=(source, sink), daemon=True).start()

    def close(self) -> None:
        self._listener.close()


def _pump(source: socket.socket, sink: socket.socket) -> None:
    try:
        while data := source.recv(65536):
            sink.sendall(data)
    except OSError:
        pass
    finally:
        for sock in (source, sink):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)


# ---------------------------------------------------------------- issue 41: no secret


def test_without_a_secret_a_server_that_cannot_be_verified_is_refused(
    tmp_path: Path,
    impostor: RecordingServer,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """With `auth: none` plan trusted whatever answered on the port (a fake server
    decided what plan saw). Now it must prove it holds the project database's key."""
    monkeypatch.delenv(ALLOW_UNVERIFIED_ENV, raising=False)
    project = project_on_port(tmp_path, impostor.server_address[1], mode="none")
    with pytest.raises(CatalogServerNotVerifiedError) as refused, open_catalog(project):
        pass
    message = str(refused.value)
    assert "cannot verify it is this project's catalog server" in message
    assert ALLOW_UNVERIFIED_ENV in message
    assert "holds no server key" in message  # the project never ran a server on it
    assert all(b"/tableflow/v1/proof" in request for request in impostor.seen)
    # the same with client_credentials but no secret anywhere
    monkeypatch.delenv(CLIENT_SECRET_ENV, raising=False)
    (tmp_path / "nosecret").mkdir()
    (tmp_path / "nosecret" / "tableflow_project.yml").write_text(
        "name: p\ntargets:\n  dev:\n    kafka: {bootstrap_servers: 'b:1'}\n"
        f"    catalog: {{type: embedded, port: {impostor.server_address[1]}, warehouse: ./wh}}\n"
    )
    with (
        pytest.raises(CatalogServerNotVerifiedError),
        open_catalog(load_project(tmp_path / "nosecret")),
    ):
        pass
    # explicit opt-in: used, with a warning
    monkeypatch.setenv(ALLOW_UNVERIFIED_ENV, "1")
    with open_catalog(project) as handle:
        assert not handle.started_server
    assert "without verifying it" in capsys.readouterr().err


def test_without_a_secret_a_catalog_on_another_database_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(ALLOW_UNVERIFIED_ENV, raising=False)
    port = free_port()
    project = project_on_port(tmp_path, port, mode="none")
    # the project's own database got a key from an earlier server of the project
    config = project.target.catalog
    assert isinstance(config, EmbeddedCatalog)
    with serve_in_background(embedded_server_settings(project, config, port=0)):
        pass
    other = CatalogServerSettings(
        warehouse=tmp_path / "other", port=port, auth="none", access_log=False
    )
    with (
        serve_in_background(other),
        pytest.raises(CatalogServerNotVerifiedError, match="another catalog database"),
        open_catalog(project),
    ):
        pass
