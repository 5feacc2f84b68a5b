"""Table maintenance (`maintenance:` per table or in `defaults`): which operations run, how often."""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import Field, field_validator

from tableflow_core.config.models.base import (
    ConfigModel,
    check_duration,
    parse_duration_seconds,
    parse_size_bytes,
)

# remove_orphans never deletes files younger than this: a run in flight (on any host)
# writes data files before it commits them, and they are "orphans" until it does.
ORPHAN_MIN_AGE = "1d"

# What the rewrite that applies an upsert table's deletes for its readers may spend: a
# share of the ingest CPU of the batches whose deletes it applies, or no bound
# (maintenance/delete_load.py).
UNBOUNDED = "unbounded"
DeletesRewriteBudget = float | Literal["unbounded"]
DEFAULT_DELETES_REWRITE_BUDGET = 1.0


class MaintenanceOperation(ConfigModel):
    """What every maintenance operation has."""

    every: str | None = Field(
        None, description="How often this operation runs; default the block's `every`."
    )

    _every = field_validator("every")(check_duration)


class CompactSettings(MaintenanceOperation):
    """Compaction: bin-pack small data files by size tiers (`rewrite_data_files`)."""

    target_file_size: str = Field(
        "128MB", description="Size of the files compaction writes, e.g. `128MB`."
    )
    min_input_files: int = Field(
        5,
        ge=1,
        description="Compact a partition only when it has at least this many files; a table "
        "with fewer data files (at least 2) is never compacted.",
    )
    every_commits: int | None = Field(
        10,
        ge=1,
        description="Also due once this many commits added files since the last compaction "
        "(Flink CDC's pipeline compacts after N commits); `null` turns this trigger off.",
    )
    every_small_files: int | None = Field(
        20,
        ge=2,
        description="Also due once this many small files (under 75% of `target_file_size`) "
        "were written since the last compaction; `null` turns this trigger off.",
    )

    @field_validator("target_file_size")
    @classmethod
    def _valid_size(cls, value: str) -> str:
        parse_size_bytes(value)
        return value

    @property
    def target_file_size_bytes(self) -> int:
        return parse_size_bytes(self.target_file_size)

    @property
    def small_file_bytes(self) -> int:
        """Files under this are small (Iceberg's `min-file-size-bytes` default: 75% of the
        target size), the ones compaction rewrites."""
        return self.target_file_size_bytes * 3 // 4


class ExpireSnapshotsSettings(MaintenanceOperation):
    """Snapshot expiry (`expire_snapshots`); the committed offsets are kept first."""

    older_than: str | None = Field(
        None,
        description="Expire snapshots older than this (by age only). Not written: the table "
        "keeps its last 500 refreshes: 500 refresh intervals (at most 7d) and at most 500 "
        "snapshots; a table refreshed faster than every 5s keeps 100 refreshes per second of "
        "its interval (1s: 100) (docs/maintenance.md, History by refresh interval).",
    )
    retain_last: int = Field(3, ge=1, description="Always keep at least this many snapshots.")
    keep_files_for: str = Field(
        "10m",
        description="The files only expired snapshots used are deleted this long after the "
        "expiry (by a later expiry run), not at once: a reader still scanning an expired "
        "snapshot finds its files. `0s`: deleted by the expiry itself (Iceberg's way).",
    )

    _older = field_validator("older_than")(check_duration)
    _keep_files = field_validator("keep_files_for")(check_duration)

    @property
    def keep_files_s(self) -> float:
        return parse_duration_seconds(self.keep_files_for)


class RemoveOrphansSettings(MaintenanceOperation):
    """Orphan-file removal (`remove_orphan_files`); never touches `_delta_log/`."""

    older_than: str = Field(
        "3d",
        description=f"Only files older than this are removed; at least {ORPHAN_MIN_AGE}, so the "
        "uncommitted files of a run in flight (on any host) are never taken for orphans.",
    )

    @field_validator("older_than")
    @classmethod
    def _at_least_the_floor(cls, value: str) -> str:
        if parse_duration_seconds(value) < parse_duration_seconds(ORPHAN_MIN_AGE):
            raise ValueError(
                f"remove_orphans.older_than {value!r} is below the {ORPHAN_MIN_AGE} floor: younger "
                "files may belong to a run that has not committed yet"
            )
        return value


class RewriteDeletesSettings(MaintenanceOperation):
    """Position-delete rewrite for upsert tables (`rewrite_position_delete_files`)."""

    min_delete_files: int = Field(
        10, ge=1, description="Rewrite when a partition has at least this many delete files."
    )


class RewriteManifestsSettings(MaintenanceOperation):
    """Manifest rewrite (`rewrite_manifests`): fewer, clustered manifests speed up planning."""


MAINTENANCE_OPERATIONS = (
    "compact",
    "expire_snapshots",
    "remove_orphans",
    "rewrite_deletes",
    "rewrite_manifests",
)


def _enable(value: Any) -> Any:
    # `op: true` means the operation with its defaults; `false`/null means off.
    if value is True:
        return {}
    if value is False:
        return None
    return value


class Maintenance(ConfigModel):
    """Table maintenance, run by `tableflow maintain` when due. Operations not listed never run."""

    every: str = Field("1h", description="How often each listed operation is due.")
    compact: CompactSettings | None = Field(
        None, description="Compaction; `true` for the defaults."
    )
    expire_snapshots: ExpireSnapshotsSettings | None = Field(
        None, description="Snapshot expiry; `true` for the defaults."
    )
    remove_orphans: RemoveOrphansSettings | None = Field(
        None, description="Orphan-file removal; `true` for the defaults."
    )
    rewrite_deletes: RewriteDeletesSettings | None = Field(
        None, description="Position-delete rewrite (upsert tables); `true` for the defaults."
    )
    rewrite_manifests: RewriteManifestsSettings | None = Field(
        None, description="Manifest rewrite; `true` to enable."
    )
    deletes_rewrite_budget: DeletesRewriteBudget = Field(
        DEFAULT_DELETES_REWRITE_BUDGET,
        description="Upsert tables: what rewriting the data files with deletes for readers "
        "may cost, as a share of the ingest CPU of the batches whose deletes it applies "
        "(1: maintenance at most doubles the table's CPU; a table whose every batch touches "
        "most of its rows then waits dozens of batches, readers paying ~3x meanwhile). "
        "`unbounded`: applied after every batch that leaves readers paying over 1.5x, "
        "whatever it rewrites (at 100M rows and random keys, the whole table each time). "
        "Holds whether the block lists operations or not.",
    )

    _every = field_validator("every")(check_duration)

    @field_validator("deletes_rewrite_budget", mode="before")
    @classmethod
    def _positive_budget(cls, value: Any) -> Any:
        number = isinstance(value, int | float) and not isinstance(value, bool)
        if value != UNBOUNDED and not (number and 0 < value < math.inf):
            raise ValueError(f"deletes_rewrite_budget must be a number above 0 or `{UNBOUNDED}`")
        return value

    @field_validator(*MAINTENANCE_OPERATIONS, mode="before")
    @classmethod
    def _booleans(cls, value: Any) -> Any:
        return _enable(value)

    def merged_over(self, defaults: Maintenance | None) -> Maintenance:
        """This block over the `defaults` one: the keys written here win, the others inherit."""
        if defaults is None:
            return self
        inherited = {k: getattr(defaults, k) for k in defaults.model_fields_set}
        own = {k: getattr(self, k) for k in self.model_fields_set}
        return Maintenance.model_validate({**inherited, **own})
