"""serve_in_subprocess: the catalog server as a child process, stopped with its parent."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pytest
import requests
from pydantic import SecretStr
from pyiceberg.catalog import load_catalog

from tableflow_core.catalog import CatalogServerSettings, serve_in_subprocess

pytestmark = pytest.mark.slow  # starts Python processes that import the server (~1-2 s each)


def _refused(uri: str) -> bool:
    try:
        requests.get(uri + "/v1/config", timeout=2)
    except requests.ConnectionError:
        return True
    return False


def test_child_process_serves_with_the_settings_and_stops(tmp_path: Path) -> None:
    settings = CatalogServerSettings(
        warehouse=tmp_path / "wh",
        client_id="me",
        client_secret=SecretStr("child-secret"),
        catalog_name="mine",
        access_log=False,
    )
    with serve_in_subprocess(settings) as server:
        assert requests.get(server.uri + "/v1/config", timeout=10).status_code == 401
        catalog = load_catalog("sub", **server.pyiceberg_properties())
        catalog.create_namespace("n")
        table = catalog.create_table(("n", "t"), pa.schema([("id", pa.int64())]))
        table.append(pa.table({"id": [1, 2]}))
        assert catalog.load_table(("n", "t")).scan().to_arrow().num_rows == 2
    assert _refused(server.uri)
    with sqlite3.connect(tmp_path / "wh" / "catalog.db") as db:
        rows = db.execute("select catalog_name, table_name from iceberg_tables").fetchall()
    assert rows == [("mine", "t")]


PARENT = """
import sys, time
from pydantic import SecretStr
from tableflow_core.catalog import CatalogServerSettings, serve_in_subprocess
server = serve_in_subprocess(
    CatalogServerSettings(warehouse=sys.argv[1], client_secret=SecretStr("s"), access_log=False)
)
print(server.uri, flush=True)
time.sleep(600)
"""


def test_child_exits_when_its_parent_is_killed(tmp_path: Path) -> None:
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, str(tmp_path / "wh")],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ},
    )
    try:
        assert parent.stdout is not None
        uri = parent.stdout.readline().strip()
        assert uri.startswith("http://127.0.0.1:")
        assert requests.get(uri + "/v1/config", timeout=10).status_code == 401
    finally:
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait()
    deadline = time.monotonic() + 30
    while not _refused(uri):
        assert time.monotonic() < deadline, "the catalog child outlived its killed parent"
        time.sleep(0.2)
