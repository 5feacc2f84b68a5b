"""The Delta mirror's log on S3: delta-rs commits with a conditional put, never a rename.

deltalake 1.6.6 writes each `_delta_log/<version>.json` with `If-None-Match: *` on S3
(no locking provider, no `AWS_S3_ALLOW_UNSAFE_RENAME`); the store refuses the second
writer of a version with 412 and delta-rs retries on the next version. Concurrent
committers therefore never both win a version: every commit lands exactly once. DuckDB's
delta extension reads the table from S3.
"""

from __future__ import annotations

import threading
from collections import Counter

import duckdb
import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, write_deltalake

from tableflow_core.dev.s3_server import RunningS3Server
from tableflow_core.readers.duckdb_reader import extension_path
from tests.fixtures.s3 import duckdb_s3_secret, unique_prefix
from tests.support.fault_proxy import FaultProxy

WRITERS = 4
COMMITS_EACH = 5


def delta_options(server: RunningS3Server, endpoint: str | None = None) -> dict[str, str]:
    """What delta-rs needs for an S3-compatible store: nothing about locking or renames."""
    return {
        "AWS_ENDPOINT_URL": endpoint or server.endpoint,
        "AWS_ACCESS_KEY_ID": server.credentials.access_key_id,
        "AWS_SECRET_ACCESS_KEY": server.credentials.secret_access_key.get_secret_value(),
        "AWS_REGION": server.region,
        "AWS_ALLOW_HTTP": "true",
    }


def test_concurrent_committers_never_both_win_a_version(s3_server: RunningS3Server) -> None:
    uri = f"s3://{s3_server.bucket}/{unique_prefix('delta')}"
    with FaultProxy(upstream=s3_server.endpoint) as proxy:
        options = delta_options(s3_server, proxy.endpoint)
        write_deltalake(uri, pa.table({"writer": [-1], "n": [-1]}), storage_options=options)
        barrier = threading.Barrier(WRITERS)
        errors: list[BaseException] = []

        def commit(writer: int) -> None:
            barrier.wait()
            try:
                for n in range(COMMITS_EACH):
                    write_deltalake(
                        uri,
                        pa.table({"writer": [writer], "n": [n]}),
                        mode="append",
                        storage_options=options,
                        commit_properties=CommitProperties(
                            custom_metadata={"tableflow.writer": f"{writer}:{n}"},
                            max_commit_retries=50,
                        ),
                    )
            except BaseException as exc:  # reported below
                errors.append(exc)

        threads = [threading.Thread(target=commit, args=(w,)) for w in range(WRITERS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        log_puts = [r for r in proxy.requests if "/_delta_log/" in r.path and r.method == "PUT"]
    assert errors == []
    commits = [r for r in log_puts if r.path.endswith(".json")]
    assert all(
        any(n.lower() == "if-none-match" and v == "*" for n, v in r.conditions) for r in commits
    )
    refused = [r for r in commits if r.status == 412]
    won = Counter(r.path for r in commits if r.status == 200)
    # Each version file was created once; the writers did race (some got 412 and retried).
    assert all(count == 1 for count in won.values())
    assert len(won) == 1 + WRITERS * COMMITS_EACH
    print(f"{len(commits)} commit PUTs, {len(refused)} refused with 412")
    assert refused, "the writers never raced for a version: the test proved nothing"

    table = DeltaTable(uri, storage_options=delta_options(s3_server))
    assert table.version() == WRITERS * COMMITS_EACH
    rows = table.to_pyarrow_table().to_pylist()
    assert Counter((r["writer"], r["n"]) for r in rows) == Counter(
        [(-1, -1)] + [(w, n) for w in range(WRITERS) for n in range(COMMITS_EACH)]
    )
    claimed = [
        str(entry["tableflow.writer"])
        for entry in table.history()
        if entry.get("operation") == "WRITE" and "tableflow.writer" in entry
    ]
    assert sorted(claimed) == sorted(
        f"{w}:{n}" for w in range(WRITERS) for n in range(COMMITS_EACH)
    )


def test_duckdb_reads_the_delta_table_from_s3(s3_server: RunningS3Server) -> None:
    uri = f"s3://{s3_server.bucket}/{unique_prefix('delta')}"
    options = delta_options(s3_server)
    write_deltalake(uri, pa.table({"id": [1, 2, 3], "v": ["a", "b", "c"]}), storage_options=options)
    write_deltalake(uri, pa.table({"id": [4], "v": ["d"]}), mode="append", storage_options=options)
    DeltaTable(uri, storage_options=options).delete("id = 2")
    con = duckdb.connect(
        config={"autoinstall_known_extensions": False, "autoload_known_extensions": False}
    )
    try:
        con.execute(f"LOAD '{extension_path('duckdb_extension_httpfs', 'httpfs')}'")
        con.execute(f"LOAD '{extension_path('duckdb_extension_delta', 'delta')}'")
        duckdb_s3_secret(con, s3_server)
        rows = con.sql(f"SELECT id, v FROM delta_scan('{uri}') ORDER BY id").fetchall()
    finally:
        con.close()
    assert rows == [(1, "a"), (3, "c"), (4, "d")]
