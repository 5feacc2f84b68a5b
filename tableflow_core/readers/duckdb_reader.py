"""DuckDB with the Iceberg extension, attached to an Iceberg REST catalog.

The extensions come from the duckdb-extension-* wheels (no downloads at run time).
"""

from __future__ import annotations

import csv
import datetime
import functools
import importlib
import io
import json
from collections.abc import Callable, Sequence
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
    s3_secret: Sequence[tuple[str, str | bool]] | None = None,
) -> None:
    """ATTACH an Iceberg REST catalog as `alias` (optionally USE one of its namespaces).

    Tables on S3 are read with the keys the catalog vends with each table, unless
    `s3_secret` is given: then with that S3 secret (`CREATE SECRET (TYPE s3, ...)`
    options, e.g. `(("KEY_ID", ...), ("SECRET", ...), ("ENDPOINT", "host:port"))`; no
    KEY_ID: the AWS credential chain), and the catalog is not asked for keys.
    """
    uri = uri.rstrip("/")
    delegation = ""
    if s3_secret is not None:
        create_s3_secret(con, s3_secret)
        delegation = ", ACCESS_DELEGATION_MODE 'none'"
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
        f"ATTACH '{_quote(warehouse)}' AS {alias} "
        f"(TYPE iceberg, ENDPOINT '{_quote(uri)}', {options}{delegation})"
    )
    if default_schema:
        # DuckDB resolves `namespace.table` against the current catalog once one of its
        # schemas is in use (the REST catalog has no `main` schema to USE).
        con.execute(f"USE {alias}.{default_schema}")


def create_s3_secret(
    con: duckdb.DuckDBPyConnection, options: Sequence[tuple[str, str | bool]]
) -> None:
    """The session's S3 secret (httpfs): values are bound, never put in the SQL text.
    Without KEY_ID the AWS credential chain (the aws extension) finds the keys."""
    names = [name for name, _ in options]
    if any(not name.isidentifier() for name in names):
        raise ValueError(f"not an S3 secret option name: {names}")
    clauses = [f"{name} ?" for name in names]
    if "KEY_ID" not in names:
        con.execute(f"LOAD '{extension_path('duckdb_extension_aws', 'aws')}'")
        clauses.insert(0, "PROVIDER credential_chain")
    con.execute(
        f"CREATE OR REPLACE SECRET tableflow_s3 (TYPE s3, {', '.join(clauses)})",
        [value for _, value in options],
    )


def _quote(text: str) -> str:
    return text.replace("'", "''")


# Query results as text, for `tableflow query --format csv|json|markdown` (the `table`
# format is drawn by rich in the CLI). Values are never truncated.


def _text(value: object) -> str:
    return "NULL" if value is None else str(value)


@functools.singledispatch
def json_value(value: object) -> object:
    """A JSON-ready value; exact types (decimals, times, bytes) become strings."""
    return str(value)


@json_value.register(type(None))
@json_value.register(bool)
@json_value.register(int)
@json_value.register(float)
@json_value.register(str)
def _json_plain(value: object) -> object:
    return value


@json_value.register(datetime.date)
@json_value.register(datetime.time)
def _json_time(value: datetime.date | datetime.time) -> object:
    return value.isoformat()


@json_value.register(bytes)
def _json_bytes(value: bytes) -> object:
    return value.hex()


@json_value.register(list)
@json_value.register(tuple)
def _json_list(value: list[object] | tuple[object, ...]) -> object:
    return [json_value(v) for v in value]


@json_value.register(dict)
def _json_dict(value: dict[object, object]) -> object:
    return {str(k): json_value(v) for k, v in value.items()}


def rows_as_csv(columns: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(columns)
    writer.writerows([["" if v is None else v for v in row] for row in rows])
    return out.getvalue()


def rows_as_json(columns: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """One JSON array of objects (column name -> value)."""
    records = [dict(zip(columns, (json_value(v) for v in row), strict=True)) for row in rows]
    return json.dumps(records, indent=2) + "\n"


def rows_as_markdown(columns: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    def cell(value: object) -> str:
        return _text(value).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(cell(c) for c in columns) + " |"]
    lines.append("|" + "|".join("---" for _ in columns) + "|")
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


TEXT_FORMATS: dict[str, Callable[[Sequence[str], Sequence[Sequence[object]]], str]] = {
    "csv": rows_as_csv,
    "json": rows_as_json,
    "markdown": rows_as_markdown,
}
