"""Table maintenance that must not lose the committed offsets.

Compaction (`rewrite_data_files`) writes "replace" snapshots without our summary
key; readers walk the ancestry past them. Snapshot expiry can remove the snapshot
that carries the offsets, so `expire_snapshots` first copies the current committed
offsets into the table property `tableflow.offsets` (the reader's fallback).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tableflow_core.engine.table_state import read_table_state
from tableflow_core.ingest.spec import IngestSpec, quote_ident
from tableflow_core.state.offsets import OFFSETS_KEY, encode_offsets

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def _table_arg(spec: IngestSpec) -> str:
    # Fully qualified: a bare "ns.table" is misread when the namespace equals a catalog name.
    return spec.identifier.replace("'", "\\'")


def preserve_offsets(spark: SparkSession, spec: IngestSpec) -> dict[int, int] | None:
    """Copy the committed offsets into the table property; returns them (None: none yet)."""
    found = read_table_state(spark, spec.identifier).committed_offsets(spec.topic)
    if found is None:
        return None
    value = encode_offsets(spec.topic, found.offsets).replace("'", "\\'")
    spark.sql(f"ALTER TABLE {spec.identifier} SET TBLPROPERTIES ('{OFFSETS_KEY}' = '{value}')")
    return dict(found.offsets)


def expire_snapshots(
    spark: SparkSession, spec: IngestSpec, older_than_iso: str | None = None, retain_last: int = 1
) -> None:
    """Expire old snapshots without losing the offsets (run under the apply lock)."""
    preserve_offsets(spark, spec)
    args = [f"table => '{_table_arg(spec)}'", f"retain_last => {int(retain_last)}"]
    if older_than_iso is not None:
        args.append(f"older_than => TIMESTAMP '{older_than_iso}'")
    spark.sql(f"CALL {quote_ident(spec.catalog)}.system.expire_snapshots({', '.join(args)})")


def compact(spark: SparkSession, spec: IngestSpec, min_input_files: int = 2) -> None:
    """Bin-pack small data files (the replace snapshot carries no offsets; readers walk past)."""
    spark.sql(
        f"CALL {quote_ident(spec.catalog)}.system.rewrite_data_files(table => '{_table_arg(spec)}', "
        f"options => map('min-input-files', '{int(min_input_files)}'))"
    )
