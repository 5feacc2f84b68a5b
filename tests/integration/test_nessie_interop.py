"""Project Nessie as a real external Iceberg REST catalog on S3: written to by pyiceberg and
Spark through its Iceberg REST endpoint, read back by Trino, and published to by
tableflow's REST publisher (the `register` endpoint).

What Nessie 0.99 does here, each asserted below: tables get a location with a `_<uuid>`
suffix; every write is a Nessie commit on `main`; `register` points Nessie at our
metadata file (no copy); `register` with `overwrite` is refused (Iceberg REST 1.10's
pointer move), so tableflow's publisher cannot move a published table in Nessie yet;
remote signing does not work with the Iceberg 1.12 client (strict xfail). tableflow's
Nessie publisher (Nessie's API v2) registers and moves pointers with compare-and-set
commits.
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.table import Table

from tableflow_core.config.models.catalogs import NessieCatalog as NessieCatalogConfig
from tableflow_core.config.models.catalogs import RestCatalog as RestCatalogConfig
from tableflow_core.jvm.artifacts import ensure, load_lock
from tableflow_core.publish.base import CatalogPublisher
from tableflow_core.publish.errors import PublishConflictError, PublishError
from tableflow_core.publish.nessie import NessiePublisher, put_operation, table_content
from tableflow_core.publish.rest import RestPublisher
from tests.fixtures.catalog import new_namespace, unique_namespace
from tests.fixtures.nessie import NessieCatalog
from tests.fixtures.s3_catalog import S3CatalogServer
from tests.fixtures.trino import (
    assert_trino_reads_as_pyiceberg,
    iceberg_catalog_for,
    start_trino_for,
)
from tests.iceberg_values import SAMPLE_ARROW_SCHEMA, SAMPLE_SPARK_COLUMNS, sample_row
from tests.spark_sql_runner import run_spark_sql
from tests.support.trino_server import TrinoServer

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def trino(
    tmp_path_factory: pytest.TempPathFactory, nessie: NessieCatalog, s3_catalog: S3CatalogServer
) -> Iterator[TrinoServer]:
    """Trino with `nessie` (Nessie's Iceberg REST) and `lake` (our catalog)."""
    server = start_trino_for(
        tmp_path_factory.mktemp("trino-nessie"),
        [nessie.trino_catalog("nessie"), iceberg_catalog_for(s3_catalog, "lake")],
    )
    try:
        yield server
    finally:
        server.stop()


def _commits(nessie: NessieCatalog) -> list[str]:
    url = f"{nessie.server.api_uri}/trees/main/history?max-records=100"
    with urllib.request.urlopen(url, timeout=10) as response:
        entries = json.loads(response.read())["logEntries"]
    return [e["commitMeta"]["message"] for e in entries]


def append_samples(table: Table, start: int, end: int) -> None:
    """Append the sample rows `start` to `end` (exclusive) to `table`."""
    table.append(
        pa.Table.from_pylist([sample_row(i) for i in range(start, end)], schema=SAMPLE_ARROW_SCHEMA)
    )


def test_pyiceberg_and_spark_write_through_nessie_and_trino_reads_back(
    nessie: NessieCatalog, trino: TrinoServer
) -> None:
    catalog = nessie.pyiceberg_catalog()
    ns = new_namespace(catalog, "nessie")

    table = catalog.create_table((ns, "py_events"), schema=SAMPLE_ARROW_SCHEMA)
    rows = [sample_row(i) for i in range(80)]
    table.append(pa.Table.from_pylist(rows[:40], schema=SAMPLE_ARROW_SCHEMA))
    table.append(pa.Table.from_pylist(rows[40:], schema=SAMPLE_ARROW_SCHEMA))
    assert table.location().startswith(f"{nessie.warehouse}/{ns}/py_events_")  # + a uuid
    assert catalog.load_table((ns, "py_events")).scan().to_arrow().num_rows == 80

    jars = ensure(load_lock("iceberg-s3")).files
    t = f"nessie.{ns}.spark_events"
    result = run_spark_sql(
        nessie.spark_conf("nessie", jars),
        [
            f"CREATE TABLE {t} USING iceberg TBLPROPERTIES ('format-version'='2', "
            "'write.merge.mode'='merge-on-read') "
            f"AS SELECT {SAMPLE_SPARK_COLUMNS} FROM range(0, 300)",
            f"MERGE INTO {t} t USING (SELECT {SAMPLE_SPARK_COLUMNS} FROM range(250, 350)) s "
            "ON t.id = s.id WHEN MATCHED AND s.id % 2 = 0 THEN DELETE "
            "WHEN MATCHED THEN UPDATE SET t.name = 'updated' WHEN NOT MATCHED THEN INSERT *",
            f"SELECT count(*), sum(id) FROM {t}",
            # (Spark 3.5 cannot read py_events at all: "Spark does not support time fields".)
        ],
    )
    ids = [i for i in range(350) if not (250 <= i < 300 and i % 2 == 0)]
    assert result["results"][2] == [[len(ids), sum(ids)]]

    for name in ("py_events", "spark_events"):
        _, got, _ = assert_trino_reads_as_pyiceberg(trino, "nessie", catalog, ns, name)
        assert len(got) == (80 if name == "py_events" else len(ids))
    # Every write was a Nessie commit on main.
    messages = _commits(nessie)
    assert sum(1 for m in messages if "py_events" in m) >= 3, messages
    assert sum(1 for m in messages if "spark_events" in m) >= 2, messages


@pytest.mark.xfail(
    strict=True,
    reason="Nessie 0.99 hands out s3.signer.uri/s3.signer.endpoint; the Iceberg 1.12 client "
    "reads signer.uri/signer.endpoint and posts to the default v1/aws/s3/sign: 404",
)
def test_spark_with_nessie_signing_its_s3_requests(nessie: NessieCatalog) -> None:
    """No S3 keys in Spark at all: Nessie hands out `s3.remote-signing-enabled` and signs."""
    ns = unique_namespace("signed")
    jars = ensure(load_lock("iceberg-s3")).files
    t = f"nessie.{ns}.signed"
    result = run_spark_sql(
        nessie.spark_conf("nessie", jars, remote_signing=True),
        [
            f"CREATE NAMESPACE nessie.{ns}",
            f"CREATE TABLE {t} (id BIGINT, s STRING) USING iceberg",
            f"INSERT INTO {t} VALUES (1, 'a'), (2, 'b')",
            f"SELECT count(*), sum(id) FROM {t}",
        ],
    )
    assert result["results"][3] == [[2, 3]]
    rows = nessie.pyiceberg_catalog().load_table((ns, "signed")).scan().to_arrow()
    assert sorted(rows["id"].to_pylist()) == [1, 2]


def _orders_on_s3(s3_catalog: S3CatalogServer, prefix: str) -> tuple[Any, str, Table]:
    """Table `orders` with 30 sample rows in a new namespace of the S3 catalog."""
    source_catalog = s3_catalog.pyiceberg_catalog()
    ns = new_namespace(source_catalog, prefix)
    source = source_catalog.create_table((ns, "orders"), schema=SAMPLE_ARROW_SCHEMA)
    append_samples(source, 0, 30)
    return source_catalog, ns, source


def _trino_row_count(trino: TrinoServer, nessie: NessieCatalog, ns: str) -> int:
    _, rows, _ = assert_trino_reads_as_pyiceberg(
        trino, "nessie", nessie.pyiceberg_catalog(), ns, "orders"
    )
    return len(rows)


def _register_orders(
    publisher: CatalogPublisher, source: Table, trino: TrinoServer, nessie: NessieCatalog
) -> None:
    """`publisher` registers the new `orders`: Nessie points at the source's metadata
    file (nothing is copied) and Trino reads its 30 rows through Nessie."""
    ns = source.name()[0]
    assert publisher.current_pointer((ns,), "orders") is None
    publisher.register((ns,), "orders", source.metadata_location)  # the namespace too
    assert publisher.current_pointer((ns,), "orders") == source.metadata_location
    assert _trino_row_count(trino, nessie, ns) == 30


def test_tableflow_publishes_to_nessie_by_register(
    nessie: NessieCatalog, s3_catalog: S3CatalogServer, trino: TrinoServer
) -> None:
    _, ns, source = _orders_on_s3(s3_catalog, "pub")
    config = RestCatalogConfig(uri=nessie.uri, properties=nessie.s3_keys())
    publisher = RestPublisher("nessie", config)
    _register_orders(publisher, source, trino, nessie)

    # The next snapshot: the publisher moves pointers with register(overwrite=true),
    # which Nessie 0.99 refuses. Recorded here; `type: nessie` publishes through Nessie's API.
    previous = source.metadata_location
    append_samples(source, 30, 40)
    with pytest.raises(PublishError, match="overwrite"):
        publisher.update((ns,), "orders", source.metadata_location, previous)
    assert publisher.current_pointer((ns,), "orders") == previous


def test_tableflow_publishes_to_nessie_through_its_api_with_compare_and_set(
    nessie: NessieCatalog, s3_catalog: S3CatalogServer, trino: TrinoServer
) -> None:
    source_catalog, ns, source = _orders_on_s3(s3_catalog, "napi")
    # The publisher reads the metadata file (snapshot, schema, spec ids) with these keys.
    config = NessieCatalogConfig(
        uri=nessie.server.api_uri,
        properties={**nessie.s3_keys(), "s3.endpoint": nessie.s3.endpoint},
    )
    publisher = NessiePublisher("nessie", config)
    _register_orders(publisher, source, trino, nessie)

    # The source moves on: the pointer moves with one Nessie commit, read by Trino.
    first = source.metadata_location
    append_samples(source, 30, 40)
    source = source_catalog.load_table((ns, "orders"))
    stale = publisher.read((ns, "orders"))  # a second publisher's view, before the move
    publisher.update((ns,), "orders", source.metadata_location, first)
    assert publisher.current_pointer((ns,), "orders") == source.metadata_location
    assert _trino_row_count(trino, nessie, ns) == 40
    assert f"tableflow: publish {ns}.orders" in _commits(nessie)

    # Compare-and-set: a commit against the branch state read before the move is refused,
    # and an update from a pointer that is no longer current is refused before sending.
    assert stale.content is not None
    content = table_content(source.metadata, first, str(stale.content["id"]))
    with pytest.raises(PublishConflictError, match="Nessie refused"):
        publisher.commit(stale.hash, [put_operation((ns, "orders"), content)], "stale")
    with pytest.raises(PublishConflictError, match="moved"):
        publisher.update((ns,), "orders", first, first)
    assert publisher.current_pointer((ns,), "orders") == source.metadata_location
    publisher.close()
