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
from collections.abc import Iterator

import pyarrow as pa
import pytest
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.schema import Schema
from pyiceberg.types import IntegerType, LongType

from tests.fixtures.catalog import unique_namespace
from tests.fixtures.s3_catalog import S3CatalogServer
from tests.fixtures.trino import assert_trino_reads_as_pyiceberg
from tests.iceberg_values import (
    SAMPLE_ARROW_SCHEMA,
    SAMPLE_SPARK_COLUMNS,
    SAMPLE_TRINO_TYPES,
    UTC,
    sample_row,
)
from tests.spark_sql_runner import run_spark_sql
from tests.support.trino_server import TrinoServer

pytestmark = pytest.mark.slow


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
    return assert_trino_reads_as_pyiceberg(trino, "lake", catalog, namespace, table)


def test_trino_reads_every_type_pyiceberg_appends(
    trino_on_s3_catalog: TrinoServer, catalog: RestCatalog, namespace: str
) -> None:
    table = catalog.create_table((namespace, "types"), schema=SAMPLE_ARROW_SCHEMA)
    table.append(
        pa.Table.from_pylist([sample_row(i) for i in range(0, 60)], schema=SAMPLE_ARROW_SCHEMA)
    )
    table.append(
        pa.Table.from_pylist([sample_row(i) for i in range(60, 130)], schema=SAMPLE_ARROW_SCHEMA)
    )

    schema, rows, types = _compare(trino_on_s3_catalog, catalog, namespace, "types")
    assert len(rows) == 130
    assert types == SAMPLE_TRINO_TYPES
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
    model = [sample_row(i) for i in range(130)]
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
    conf = s3_catalog.vended_spark_conf()
    t = f"lake.{namespace}.upserts"
    result = run_spark_sql(
        conf,
        [
            f"CREATE TABLE {t} USING iceberg PARTITIONED BY (bucket(4, id)) TBLPROPERTIES ("
            "'format-version'='2', 'write.delete.mode'='merge-on-read', "
            "'write.update.mode'='merge-on-read', 'write.merge.mode'='merge-on-read') "
            f"AS SELECT {SAMPLE_SPARK_COLUMNS} FROM range(0, 400)",
            f"MERGE INTO {t} t USING (SELECT {SAMPLE_SPARK_COLUMNS} FROM range(350, 450)) s "
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
    conf = s3_catalog.vended_spark_conf()
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
