"""The catalog's metadata cache: never stale across catalog instances, never a lost update.

Two `CatalogService`s on one SQLite file stand for two server processes on one
database (`tableflow catalog serve` plus the one `apply` embeds), which the docs allow.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pyarrow as pa
import pytest
import requests
from pydantic import SecretStr
from pyiceberg.catalog import load_catalog
from pyiceberg.catalog.rest import TableResponse
from pyiceberg.io import load_file_io
from pyiceberg.serializers import FromInputFile
from pyiceberg.table import CommitTableResponse
from pyiceberg.table.metadata import TableMetadata

from tableflow_core.catalog import CatalogServerSettings, serve_in_background
from tableflow_core.catalog.clients import pyiceberg_catalog_properties
from tests.fixtures.catalog import start_catalog_server

IDENT = ("n", "t")


def _read_file(location: str) -> TableMetadata:
    return FromInputFile.table_metadata(load_file_io(location=location).new_input(location))


def test_responses_match_pyiceberg_models(tmp_path: Path) -> None:
    """Load and commit answers are built from cached JSON: same content as pyiceberg's models."""
    settings = CatalogServerSettings(
        warehouse=tmp_path / "wh", client_secret=SecretStr("s"), access_log=False
    )
    with serve_in_background(settings) as server:
        catalog = load_catalog("c", **server.pyiceberg_properties())
        catalog.create_namespace("n")
        table = catalog.create_table(IDENT, pa.schema([("id", pa.int64())]))
        table.append(pa.table({"id": [1, 2]}))
        token = server.bearer_token()
        headers = {"Authorization": f"Bearer {token}"}
        path = server.uri + "/v1/namespaces/n/tables/t"
        for _ in range(2):  # the second answer comes from the cache
            loaded = requests.get(path, headers=headers, timeout=10)
            assert loaded.status_code == 200
            body = loaded.json()
            expected = TableResponse(
                **{"metadata-location": body["metadata-location"]},
                metadata=_read_file(body["metadata-location"]),
            )
            assert body == json.loads(expected.model_dump_json())
        committed = requests.post(
            path,
            headers=headers,
            json={
                "requirements": [],
                "updates": [{"action": "set-properties", "updates": {"a": "b"}}],
            },
            timeout=10,
        )
        assert committed.status_code == 200
        body = committed.json()
        expected_commit = CommitTableResponse(
            **{"metadata-location": body["metadata-location"]},
            metadata=_read_file(body["metadata-location"]),
        )
        assert body == json.loads(expected_commit.model_dump_json())
        assert body["metadata"]["properties"]["a"] == "b"
        # The next load is answered from what the commit cached: still the file's content.
        reloaded = requests.get(path, headers=headers, timeout=10).json()
        assert reloaded["metadata-location"] == body["metadata-location"]
        assert reloaded["metadata"] == body["metadata"]


@pytest.mark.slow
def test_answered_commit_survives_kill_9_of_the_server(tmp_path: Path) -> None:
    """SQLite WAL with synchronous=NORMAL: durable against a killed process."""
    server = start_catalog_server(tmp_path)
    try:
        catalog = load_catalog("k", **pyiceberg_catalog_properties(server.uri, server.credential))
        catalog.create_namespace("n")
        table = catalog.create_table(IDENT, pa.schema([("id", pa.int64())]))
        for i in range(5):
            table.append(pa.table({"id": [i]}))
        answered = table.metadata.current_snapshot_id
    finally:
        os.kill(server.process.pid, signal.SIGKILL)
    time.sleep(0.5)
    restarted = start_catalog_server(tmp_path)
    try:
        catalog = load_catalog(
            "k2", **pyiceberg_catalog_properties(restarted.uri, restarted.credential)
        )
        reloaded = catalog.load_table(IDENT)
        assert reloaded.metadata.current_snapshot_id == answered
        assert sorted(reloaded.scan().to_arrow().column("id").to_pylist()) == [0, 1, 2, 3, 4]
    finally:
        restarted.process.stop()
