"""What a small append costs on a table with a long history: pyiceberg's `Table.append`
against the same append through tableflow's staged transaction (`catalog/transactions.py`,
how `run` commits an upsert table's deletes-table rows and every other commit of its own),
on the same table, in the same run.

    .venv/bin/python benchmarks/staged_append.py [--snapshots 400] [--appends 10] [--rounds 2]

A table in a SQLite catalog (pyiceberg `SqlCatalog`, a temporary warehouse) gets
`--snapshots` 3-row appends first. Then, alternating `--rounds` times, `--appends`
appends each way: load the table, append 3 rows, commit. pyiceberg deep-copies the whole
metadata on every read of a transaction's staged state, so its cost follows the history
the table keeps. The last line: `staged/pyiceberg CPU per append: X.XXx`.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
from pyiceberg.catalog.sql import SqlCatalog

from tableflow_core.catalog.transactions import transaction

IDENTIFIER = ("bench", "history")
ROWS = pa.table(
    {
        "id": pa.array([1, 2, 3], pa.int64()),
        "partition": pa.array([0, 0, 0], pa.int32()),
        "offset": pa.array([1, 2, 3], pa.int64()),
    }
)


def cpu_ms_per_call(call: Callable[[], None], times: int) -> float:
    began = time.process_time()
    for _ in range(times):
        call()
    return (time.process_time() - began) / times * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--snapshots", type=int, default=400)
    parser.add_argument("--appends", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tableflow-staged-") as work:
        root = Path(work)
        catalog = SqlCatalog(
            "bench", uri=f"sqlite:///{root / 'catalog.db'}", warehouse=root.as_uri()
        )
        catalog.create_namespace(IDENTIFIER[0])
        table = catalog.create_table(IDENTIFIER, schema=ROWS.schema)
        for _ in range(args.snapshots):
            table.append(ROWS)

        def pyiceberg_append() -> None:
            catalog.load_table(IDENTIFIER).append(ROWS)

        def staged_append() -> None:
            with transaction(catalog.load_table(IDENTIFIER)) as staged:
                staged.append(ROWS)

        totals = {"pyiceberg": 0.0, "staged": 0.0}
        for round_ in range(1, args.rounds + 1):
            for name, call in (("pyiceberg", pyiceberg_append), ("staged", staged_append)):
                ms = cpu_ms_per_call(call, args.appends)
                totals[name] += ms
                snapshots = len(catalog.load_table(IDENTIFIER).metadata.snapshots)
                print(
                    f"round {round_}: {name:9s} {ms:6.0f} ms CPU per append ({snapshots} snapshots)"
                )
        print(f"staged/pyiceberg CPU per append: {totals['staged'] / totals['pyiceberg']:.2f}x")


if __name__ == "__main__":
    main()
