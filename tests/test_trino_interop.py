"""Trino reads what Spark and pyiceberg wrote through our REST catalog on S3, value by value.

Trino 476 (its own Iceberg reader, its own S3 client) against the embedded catalog on
s3proxy: an append table of every type tableflow writes (decimals, timestamps with and
without zone, dates, times, binary, fixed, structs, lists, maps, nulls) written by
pyiceberg; the same types written by Spark and then upserted with MERGE merge-on-read
(position delete files); evolved schemas (ADD COLUMN, RENAME COLUMN, int -> long) from
both writers. Each table is read by Trino and by pyiceberg and compared value by value
(`tests/iceberg_values.py`), with Trino's column types checked against the mapping.
"""

from __future__ import annotations

import datetime as dt
import decimal
from collections.abc import Iterator

import pyarrow as pa
import pytest
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.schema import Schema
from pyiceberg.types import IntegerType, LongType

from tableflow_core.dev.artifacts import ensure, load_lock
from tableflow_core.dev.trino_server import TrinoServer
from tests.fixtures.catalog import unique_namespace
from tests.fixtures.s3_catalog import S3CatalogServer
from tests.fixtures.trino import trino_rows
from tests.iceberg_values import canonical_rows, first_difference
from tests.spark_sql_runner import iceberg_rest_conf, run_spark_sql

pytestmark = pytest.mark.slow

UTC = dt.UTC
ARROW_SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("flag", pa.bool_()),
        pa.field("i32", pa.int32()),
        pa.field("f32", pa.float32()),
        pa.field("f64", pa.float64()),
        pa.field("dec", pa.decimal128(18, 4)),
        pa.field("dec38", pa.decimal128(38, 10)),
        pa.field("name", pa.string()),
        pa.field("ts_tz", pa.timestamp("us", tz="UTC")),
        pa.field("ts", pa.timestamp("us")),
        pa.field("d", pa.date32()),
        pa.field("t", pa.time64("us")),
        pa.field("bin", pa.binary()),
        pa.field("fx", pa.binary(4)),
        pa.field("st", pa.struct([pa.field("a", pa.int32()), pa.field("b", pa.string())])),
        pa.field("lst", pa.list_(pa.string())),
        pa.field("mp", pa.map_(pa.string(), pa.int64())),
    ]
)
# What Trino 476 calls each column of ARROW_SCHEMA (the Iceberg -> Trino type mapping).
TRINO_TYPES = [
    "bigint",
    "boolean",
    "integer",
    "real",
    "double",
    "decimal(18, 4)",
    "decimal(38, 10)",
    "varchar",
    "timestamp(6) with time zone",
    "timestamp(6)",
    "date",
    "time(6)",
    "varbinary",
    "varbinary",
    "row(a integer, b varchar)",
    "array(varchar)",
    "map(varchar, bigint)",
]
# The same columns as Spark SQL expressions over `id` (no TIME and no fixed in Spark).
SPARK_COLUMNS = """id, id % 2 = 0 AS flag, CAST(id * 7 AS INT) AS i32,
 CAST(id / 4 AS FLOAT) AS f32, id / 3 AS f64, CAST(id / 7 AS DECIMAL(18,4)) AS dec,
 CAST(CAST(id AS DECIMAL(38,10)) * 1000000000000 + 0.0123456789 AS DECIMAL(38,10)) AS dec38,
 concat('n', id, 'é') AS name, timestamp_micros(1704067200000000 + id * 1000001) AS ts_tz,
 CAST(timestamp_micros(1706749323000000 + id) AS TIMESTAMP_NTZ) AS ts,
 date_add(DATE '1969-12-25', CAST(id AS INT)) AS d, CAST(concat('b', id) AS BINARY) AS bin,
 named_struct('a', CAST(id AS INT), 'b', concat('s', id)) AS st,
 IF(id % 10 = 3, NULL, array(concat('x', id), NULL)) AS lst,
 IF(id % 10 = 4, map_filter(map('k', id), (k, v) -> false), map('k', id, 'z', -id)) AS mp"""


def _row(i: int) -> dict:
    if i % 25 == 0:  # every nullable column null
        return {"id": i, **{f.name: None for f in ARROW_SCHEMA if f.name != "id"}}
    return {
        "id": i,
        "flag": i % 2 == 0,
        "i32": -(i * 7) if i % 3 else 2**31 - 1,
        "f32": i / 3,
        "f64": i / 7 if i % 11 else -0.0,
        "dec": decimal.Decimal(i * 10001).scaleb(-4).quantize(decimal.Decimal("0.0001")),
        "dec38": decimal.Decimal(f"{'-' if i % 2 else ''}{i}1234567890123456.0123456789"),
        "name": f"n{i}é\u4e2d" if i % 7 else "",
        # Before 1970, across a leap second day, at the microsecond.
        "ts_tz": dt.datetime(1969 + i % 60, 6, 30, 23, 59, 59, i, tzinfo=UTC),
        "ts": dt.datetime(2024, 2, 29, 1, 2, 3, 999999 - i),
        "d": dt.date(1900, 1, 1) + dt.timedelta(days=i * 997),
        "t": dt.time(23, 59, 59, i) if i % 2 else dt.time(0, 0, 0),
        "bin": bytes([i % 256, 0, 255]) if i % 5 else b"",
        "fx": i.to_bytes(4, "big"),
        "st": {"a": i, "b": None if i % 4 == 0 else f"s{i}"},
        "lst": [f"x{i}", None] if i % 3 else [],
        "mp": [("k", i), ("z", -i)] if i % 6 else [],
    }


@pytest.fixture(scope="module")
def catalog(s3_catalog: S3CatalogServer) -> RestCatalog:
    return s3_catalog.pyiceberg_catalog()


@pytest.fixture(scope="module")
def namespace(catalog: RestCatalog) -> Iterator[str]:
    ns = unique_namespace("trino")
    catalog.create_namespace(ns)
    yield ns


def _compare(
    trino: TrinoServer, catalog: RestCatalog, namespace: str, table: str
) -> tuple[Schema, list[tuple], list[str]]:
    """Read the table with both engines; assert they hold the same rows, value by value."""
    loaded = catalog.load_table((namespace, table))
    schema = loaded.schema()
    expected = canonical_rows(loaded.scan().to_arrow().to_pylist(), schema)
    columns = ", ".join(f'"{f.name}"' for f in schema.fields)
    rows, types = trino_rows(trino, f"SELECT {columns} FROM lake.{namespace}.{table}")
    got = canonical_rows(rows, schema)
    assert first_difference(got, expected, schema) is None, first_difference(got, expected, schema)
    return schema, expected, types


def test_trino_reads_every_type_pyiceberg_appends(
    trino_on_s3_catalog: TrinoServer, catalog: RestCatalog, namespace: str
) -> None:
    table = catalog.create_table((namespace, "types"), schema=ARROW_SCHEMA)
    table.append(pa.Table.from_pylist([_row(i) for i in range(0, 60)], schema=ARROW_SCHEMA))
    table.append(pa.Table.from_pylist([_row(i) for i in range(60, 130)], schema=ARROW_SCHEMA))

    schema, rows, types = _compare(trino_on_s3_catalog, catalog, namespace, "types")
    assert len(rows) == 130
    assert types == TRINO_TYPES
    # Spot checks against the model, beside the engine-against-engine comparison.
    by_id = {r[0]: r for r in rows}
    names = [f.name for f in schema.fields]
    assert by_id[1][names.index("ts_tz")] == dt.datetime(1970, 6, 30, 23, 59, 59, 1, tzinfo=UTC)
    assert by_id[3][names.index("dec38")] == "-31234567890123456.0123456789"
    assert by_id[25] == (25, *([None] * (len(names) - 1)))
    # Aggregates computed inside Trino agree with Python on the same rows.
    sums = trino_on_s3_catalog.query(
        f"SELECT count(*), sum(id), sum(dec), count(lst), min(d) FROM lake.{namespace}.types"
    )
    model = [_row(i) for i in range(130)]
    assert sums == [
        [
            130,
            sum(range(130)),
            str(sum(r["dec"] for r in model if r["dec"] is not None)),
            sum(1 for r in model if r["lst"] is not None),
            min(r["d"] for r in model if r["d"] is not None).isoformat(),
        ]
    ]


def test_trino_reads_spark_merge_on_read_upserts(
    trino_on_s3_catalog: TrinoServer,
    s3_catalog: S3CatalogServer,
    catalog: RestCatalog,
    namespace: str,
) -> None:
    conf = iceberg_rest_conf(
        "lake",
        s3_catalog.uri,
        ensure(load_lock("iceberg-s3")).files,
        credential=s3_catalog.credential,
        extra={"header.X-Iceberg-Access-Delegation": "vended-credentials"},
    )
    t = f"lake.{namespace}.upserts"
    result = run_spark_sql(
        conf,
        [
            f"CREATE TABLE {t} USING iceberg PARTITIONED BY (bucket(4, id)) TBLPROPERTIES ("
            "'format-version'='2', 'write.delete.mode'='merge-on-read', "
            "'write.update.mode'='merge-on-read', 'write.merge.mode'='merge-on-read') "
            f"AS SELECT {SPARK_COLUMNS} FROM range(0, 400)",
            f"MERGE INTO {t} t USING (SELECT {SPARK_COLUMNS} FROM range(350, 450)) s "
            "ON t.id = s.id WHEN MATCHED AND s.id % 2 = 0 THEN DELETE "
            "WHEN MATCHED THEN UPDATE SET t.name = 'updated', t.mp = map('u', s.id) "
            "WHEN NOT MATCHED THEN INSERT *",
            f"DELETE FROM {t} WHERE id < 10",
            f"SELECT content, count(*) FROM {t}.delete_files GROUP BY content",
            f"SELECT count(*), sum(id) FROM {t}",
        ],
    )
    delete_files, (count_sum,) = result["results"][3], result["results"][4]
    assert dict((c, n) for c, n in delete_files).get(1, 0) >= 1, delete_files  # position deletes
    ids = [i for i in range(450) if i >= 10 and not (350 <= i < 400 and i % 2 == 0)]
    assert count_sum == [len(ids), sum(ids)]

    schema, rows, _ = _compare(trino_on_s3_catalog, catalog, namespace, "upserts")
    assert [r[0] for r in rows] == ids
    name = [f.name for f in schema.fields].index("name")
    assert sum(1 for r in rows if r[name] == "updated") == 25


def test_trino_reads_evolved_schemas(
    trino_on_s3_catalog: TrinoServer,
    s3_catalog: S3CatalogServer,
    catalog: RestCatalog,
    namespace: str,
) -> None:
    # pyiceberg: add a column, rename one, widen int -> long; old files keep old names.
    base = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("n", pa.int32())])
    table = catalog.create_table((namespace, "evolved_py"), schema=base)
    table.append(pa.Table.from_pylist([{"id": i, "n": i * 2} for i in range(5)], schema=base))
    with table.update_schema() as update:
        update.update_column("n", field_type=LongType())
        update.rename_column("n", "renamed")
        update.add_column("added", LongType())
    after = table.schema().as_arrow()
    table.append(
        pa.Table.from_pylist(
            [{"id": i, "renamed": 2**40 + i, "added": -i} for i in range(5, 9)], schema=after
        )
    )
    schema, rows, types = _compare(trino_on_s3_catalog, catalog, namespace, "evolved_py")
    assert [f.name for f in schema.fields] == ["id", "renamed", "added"]
    assert types == ["bigint", "bigint", "bigint"]
    assert rows[0] == (0, 0, None) and rows[-1] == (8, 2**40 + 8, -8)

    # Spark: ALTER TABLE ADD COLUMN / RENAME COLUMN / ALTER COLUMN TYPE between inserts.
    conf = iceberg_rest_conf(
        "lake",
        s3_catalog.uri,
        ensure(load_lock("iceberg-s3")).files,
        credential=s3_catalog.credential,
        extra={"header.X-Iceberg-Access-Delegation": "vended-credentials"},
    )
    t = f"lake.{namespace}.evolved_spark"
    run_spark_sql(
        conf,
        [
            f"CREATE TABLE {t} (id BIGINT NOT NULL, n INT, s STRUCT<a: INT>) USING iceberg",
            f"INSERT INTO {t} VALUES (1, 10, named_struct('a', 1)), (2, 20, NULL)",
            f"ALTER TABLE {t} ADD COLUMN extra DECIMAL(10, 2)",
            f"ALTER TABLE {t} ADD COLUMN s.b STRING",
            f"ALTER TABLE {t} RENAME COLUMN n TO number",
            f"ALTER TABLE {t} ALTER COLUMN number TYPE BIGINT",
            f"INSERT INTO {t} VALUES (3, 30000000000, named_struct('a', 3, 'b', 'x'), 1.25)",
        ],
    )
    schema, rows, types = _compare(trino_on_s3_catalog, catalog, namespace, "evolved_spark")
    assert types == ["bigint", "bigint", "row(a integer, b varchar)", "decimal(10, 2)"]
    assert rows == [
        (1, 10, (1, None), None),
        (2, 20, None, None),
        (3, 30000000000, (3, "x"), "1.25"),
    ]
    assert isinstance(schema.find_field("number").field_type, LongType)
    assert not isinstance(schema.find_field("number").field_type, IntegerType)
