"""DuckDB with the Iceberg extension, attached to an Iceberg REST catalog.

The extensions come from the duckdb-extension-* wheels (no downloads at run time).
"""

from __future__ import annotations

import importlib
from pathlib import Path

import duckdb

# Load order matters: iceberg needs avro and httpfs.
EXTENSIONS = (
    ("duckdb_extension_avro", "avro"),
    ("duckdb_extension_httpfs", "httpfs"),
    ("duckdb_extension_iceberg", "iceberg"),
)


def extension_path(module_name: str, extension: str) -> Path:
    module = importlib.import_module(module_name)
    base = Path(str(module.__file__)).parent
    return base / "extensions" / f"v{duckdb.__version__}" / f"{extension}.duckdb_extension"


def duckdb_connection() -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB with the avro, httpfs and iceberg extensions loaded."""
    con = duckdb.connect(
        config={"autoinstall_known_extensions": False, "autoload_known_extensions": False}
    )
    for module_name, extension in EXTENSIONS:
        con.execute(f"LOAD '{extension_path(module_name, extension)}'")
    return con


def attach_rest_catalog(
    con: duckdb.DuckDBPyConnection,
    alias: str,
    uri: str,
    credential: str | None,
    warehouse: str = "warehouse",
    default_schema: str | None = None,
) -> None:
    """ATTACH an Iceberg REST catalog as `alias` (optionally USE one of its namespaces)."""
    uri = uri.rstrip("/")
    if credential:
        client_id, _, client_secret = credential.partition(":")
        con.execute(
            "CREATE OR REPLACE SECRET tableflow_catalog_secret (TYPE iceberg, CLIENT_ID ?, CLIENT_SECRET ?, "
            "OAUTH2_SERVER_URI ?)",
            [client_id, client_secret, f"{uri}/v1/oauth/tokens"],
        )
        options = "SECRET tableflow_catalog_secret"
    else:
        options = "AUTHORIZATION_TYPE 'none'"
    con.execute(
        f"ATTACH '{_quote(warehouse)}' AS {alias} (TYPE iceberg, ENDPOINT '{_quote(uri)}', {options})"
    )
    if default_schema:
        # DuckDB resolves `namespace.table` against the current catalog once one of its
        # schemas is in use (the REST catalog has no `main` schema to USE).
        con.execute(f"USE {alias}.{default_schema}")


def _quote(text: str) -> str:
    return text.replace("'", "''")
