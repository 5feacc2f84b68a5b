"""The library API: serve_in_background, auth none, and secrets kept out of the logs."""

from __future__ import annotations

import asyncio
import socket
import threading
from pathlib import Path

import pyarrow as pa
import pytest
import requests
from pydantic import SecretStr
from pyiceberg.catalog import load_catalog
from pyiceberg.exceptions import (
    CommitFailedException,
    NoSuchNamespaceError,
    NoSuchTableError,
    OAuthError,
    TableAlreadyExistsError,
)

from tableflow_core.catalog import CatalogServerSettings, serve_in_background
from tableflow_core.catalog.in_process import InProcessRestCatalog
from tableflow_core.catalog.runner import bind_listener


def test_auth_none_serves_without_token(tmp_path: Path) -> None:
    settings = CatalogServerSettings(warehouse=tmp_path / "wh", auth="none", access_log=False)
    with serve_in_background(settings) as server:
        assert server.credential is None
        assert requests.get(server.uri + "/v1/config", timeout=10).status_code == 200
        catalog = load_catalog("inproc", **server.pyiceberg_properties())
        catalog.create_namespace("n")
        table = catalog.create_table(("n", "t"), pa.schema([("id", pa.int64())]))
        table.append(pa.table({"id": [1]}))
        assert catalog.load_table(("n", "t")).scan().to_arrow().num_rows == 1
    assert (tmp_path / "wh" / "catalog.db").exists()
    with pytest.raises(requests.ConnectionError):
        requests.get(server.uri + "/v1/config", timeout=2)


def test_access_log_never_shows_secret_or_token(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    secret = "very-secret-value-123"
    settings = CatalogServerSettings(
        warehouse=tmp_path / "wh", client_id="c", client_secret=SecretStr(secret), access_log=True
    )
    with serve_in_background(settings) as server:
        token_response = requests.post(
            server.uri + "/v1/oauth/tokens",
            data={"grant_type": "client_credentials", "client_id": "c", "client_secret": secret},
            timeout=10,
        )
        token = token_response.json()["access_token"]
        headers = {"Authorization": f"Bearer {token}"}
        assert (
            requests.get(server.uri + "/v1/namespaces", headers=headers, timeout=10).status_code
            == 200
        )
        # A client that wrongly puts credentials in the query string must not leak them either.
        requests.get(server.uri + f"/v1/config?token={token}&client_secret={secret}", timeout=10)
        catalog = load_catalog("leak", **server.pyiceberg_properties())
        catalog.list_namespaces()
    output = capfd.readouterr()
    logged = output.out + output.err
    assert "/v1/namespaces" in logged  # the access log is on
    assert secret not in logged and token not in logged


def test_accepted_connections_disable_nagle() -> None:
    """Each response is two writes (headers, body): with Nagle on, the second waited
    for the client's delayed ACK, ~40 ms per request."""
    listener = bind_listener("127.0.0.1", 0)
    port = listener.getsockname()[1]
    seen: list[int] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        sock = writer.get_extra_info("socket")
        seen.append(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
        writer.close()

    async def main() -> None:
        server = await asyncio.start_server(handle, sock=listener)  # as uvicorn does
        async with server:
            _reader, writer = await asyncio.open_connection("127.0.0.1", port)
            await _reader.read()
            writer.close()

    asyncio.run(main())
    assert seen and seen[0] != 0


def test_direct_commits_and_loads_match_http(tmp_path: Path) -> None:
    """catalog/in_process.py: a table loaded through the service is the one HTTP gives; a
    commit through it is what HTTP clients see next; a stale one is refused the same way."""
    settings = CatalogServerSettings(warehouse=tmp_path / "wh", auth="none", access_log=False)
    with serve_in_background(settings) as server:
        http = load_catalog("http", **server.pyiceberg_properties())
        direct = InProcessRestCatalog(
            "direct",
            server.service,
            server.settings,
            **server.pyiceberg_properties(),
        )
        http.create_namespace("n")
        http.create_table(("n", "t"), pa.schema([("id", pa.int64())]))
        mine, theirs = direct.load_table(("n", "t")), http.load_table(("n", "t"))
        assert (mine.metadata, mine.metadata_location) == (
            theirs.metadata,
            theirs.metadata_location,
        )
        # Each catalog has its own auth manager object; every other FileIO property equal.
        drop = {"auth.manager"}
        assert {k: v for k, v in mine.io.properties.items() if k not in drop} == {
            k: v for k, v in theirs.io.properties.items() if k not in drop
        }
        mine.append(pa.table({"id": [1, 2]}))
        assert http.load_table(("n", "t")).scan().to_arrow().num_rows == 2
        stale = theirs.transaction()
        stale.set_properties(k="v")
        with stale.update_snapshot().fast_append():
            pass
        with pytest.raises(CommitFailedException):  # main moved since `theirs` was loaded
            direct.commit_table(theirs, stale._requirements, stale._updates)
        with pytest.raises(NoSuchTableError):
            direct.load_table(("n", "missing"))


def _serving(port: int) -> bool:
    return any(thread.name == f"catalog-server-{port}" for thread in threading.enumerate())


def test_served_on_first_connection_and_reads_answered_in_process(tmp_path: Path) -> None:
    """catalog/runner.py's `on_first_connection` with catalog/in_process.py's client: the
    client's config and token, its reads and (on a local warehouse) its table creations
    answered in this process (no server started); the first HTTP request starts the
    server, which accepts the token minted in process; the answers equal HTTP's, errors
    included."""
    settings = CatalogServerSettings(
        warehouse=tmp_path / "wh", client_secret=SecretStr("first-connection-secret")
    )
    server = serve_in_background(settings, on_first_connection=True)
    try:
        properties = server.pyiceberg_properties()
        direct = InProcessRestCatalog("direct", server.service, server.settings, **properties)
        assert direct.list_namespaces() == []
        assert not direct.namespace_exists("n")
        with pytest.raises(NoSuchNamespaceError):
            direct.list_tables("n")
        schema = pa.schema([("id", pa.int64())])
        with pytest.raises(NoSuchNamespaceError):
            direct.create_table(("n", "t"), schema)
        server.service.create_namespace(("n",), {"owner": "data-team"})
        created = direct.create_table(("n", "t"), schema, properties={"k": "v"})
        with pytest.raises(TableAlreadyExistsError):
            direct.create_table(("n", "t"), schema)
        assert not _serving(server.port)  # nothing above was an HTTP request

        direct.create_namespace("m")  # HTTP: starts the server
        assert _serving(server.port)
        direct.drop_namespace("m")
        http = load_catalog("http", **properties)
        loaded = http.load_table(("n", "t"))
        assert (created.metadata, created.metadata_location) == (
            loaded.metadata,
            loaded.metadata_location,
        )
        assert created.properties["k"] == "v"
        with pytest.raises(TableAlreadyExistsError):
            http.create_table(("n", "t"), schema)
        for catalog in (direct, http):
            assert catalog.list_namespaces() == [("n",)]
            assert catalog.list_tables("n") == [("n", "t")]
            assert catalog.namespace_exists("n") and not catalog.namespace_exists("m")
            assert catalog.table_exists(("n", "t")) and not catalog.table_exists(("n", "u"))
            assert catalog.load_namespace_properties("n") == {"owner": "data-team"}
            with pytest.raises(NoSuchNamespaceError):
                catalog.list_tables("m")
        assert direct.properties == http.properties  # the config answered in process

        wrong = {**properties, "credential": f"{settings.client_id}:not-the-secret"}
        for make in (
            lambda: InProcessRestCatalog("wrong", server.service, server.settings, **wrong),
            lambda: load_catalog("wrong", **wrong),
        ):
            with pytest.raises(OAuthError, match="invalid_client"):
                make()
    finally:
        server.stop()
    assert not _serving(server.port)
    with pytest.raises(requests.ConnectionError):
        requests.get(server.uri + "/v1/config", timeout=2)


def test_a_server_never_connected_to_stops_at_once(tmp_path: Path) -> None:
    settings = CatalogServerSettings(warehouse=tmp_path / "wh", auth="none", access_log=False)
    server = serve_in_background(settings, on_first_connection=True)
    InProcessRestCatalog(
        "direct",
        server.service,
        server.settings,
        **server.pyiceberg_properties(),
    ).list_namespaces()
    server.stop()
    assert not any(
        t.name.startswith(f"catalog-server-{server.port}") for t in threading.enumerate()
    )
    with pytest.raises(requests.ConnectionError):
        requests.get(server.uri + "/v1/config", timeout=2)
