"""Table properties that keep a table's metadata flat however often it commits."""

from __future__ import annotations

# What keeps a table's metadata flat however often it commits (docs/maintenance.md,
# "What keeps a table's cost flat"): every commit writes a new metadata.json, and the
# ones older than the last 100 are deleted by the catalog (Iceberg's default count, off
# by default in Iceberg); appends merge their manifests once 10 of them are small (the
# merge is on by default in Iceberg's Java writer, at 100; pyiceberg's fast append, which
# tableflow's publish commits used, never merged). tests/unit/test_history.py.
UPKEEP_TABLE_PROPERTIES: dict[str, str] = {
    "write.metadata.delete-after-commit.enabled": "true",
    "write.metadata.previous-versions-max": "100",
    "commit.manifest-merge.enabled": "true",
    "commit.manifest.min-count-to-merge": "10",
}
