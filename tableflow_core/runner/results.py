"""`target/run_results.json`: what one apply did, per table."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from tableflow_core.output_files import write_text
from tableflow_core.text import plural

RUN_RESULTS_VERSION: Literal[1] = 1


class TableResult(BaseModel):
    model_config = ConfigDict(frozen=True)

    table: str
    identifier: str
    status: Literal["success", "error", "skipped", "no_changes"]
    ddl: tuple[str, ...] = Field(default=(), description="DDL actions performed")
    records_read: int = 0
    records_written: int = 0
    records_dead_lettered: int = 0
    records_skipped: int = 0
    records_lost: int = Field(
        0,
        description="Offsets gone from the topic before the table read them, skipped under "
        "on_data_loss accept (`lost_offsets` names them)",
    )
    lost_offsets: dict[int, tuple[int, int]] = Field(
        default_factory=dict, description="{partition: [start, end)} of `records_lost`"
    )
    offsets_before: dict[int, int] = Field(default_factory=dict)
    offsets_after: dict[int, int] = Field(default_factory=dict)
    snapshot_id: int | None = None
    committed_at_ms: int | None = Field(
        None, description="When this run's commit made `snapshot_id` (Unix ms; None: no commit)"
    )
    duration_s: float = 0.0
    error: str | None = None
    warnings: tuple[str, ...] = ()
    published: tuple[str, ...] = Field(
        default=(),
        description="Catalogs of publish_to given the table's pointer after its commits "
        "(a failed one makes the table's status error; its commits stand)",
    )
    delta_version: int | None = Field(None, description="The Delta log's version after the sync")
    finished_at: str | None = Field(
        None,
        description="When the apply that ran the table ended (`tableflow run` keeps each "
        "table's last entry, whichever of its lanes wrote the file last)",
    )
    accounting: dict[str, Any] | None = Field(
        None,
        description="Where every record read went, per partition and in total "
        "(deadletter/accounting.py RunAccounting.to_json()); None when nothing was read",
    )
    transforms: dict[str, int] | None = Field(
        None, description="The transforms' counts: rows in/out, filtered, duplicates, rejected"
    )
    checks: dict[str, Any] | None = Field(
        None, description="The data-quality checks' report (CheckReport.as_dict())"
    )
    timings: dict[str, float] | None = Field(
        None,
        description="Wall seconds of the run's phases: load (table state), start_run (the "
        "branch commit), each stage (the write includes the Spark work; upsert also gives "
        "merge), publish_commit",
    )


class RunResults(BaseModel):
    model_config = ConfigDict(frozen=True)

    run_results_version: Literal[1] = RUN_RESULTS_VERSION
    project: str
    target: str
    started_at: str
    finished_at: str
    duration_s: float
    status: Literal["success", "error"]
    plan_summary: str
    tables: tuple[TableResult, ...]
    errors: tuple[str, ...] = ()

    def summary_counts(self) -> dict[str, int]:
        """The figures of `summary_line` (the JSON log's too)."""
        return {
            "tables_ok": sum(1 for t in self.tables if t.status in ("success", "no_changes")),
            "tables_failed": sum(1 for t in self.tables if t.status == "error"),
            "tables_skipped": sum(1 for t in self.tables if t.status == "skipped"),
            "records_written": sum(t.records_written for t in self.tables),
        }

    def summary_line(self) -> str:
        counts = self.summary_counts()
        return (
            f"Apply {'complete' if self.status == 'success' else 'FAILED'}: "
            f"{plural(counts['tables_ok'], 'table')} ok, {counts['tables_failed']} failed, "
            f"{counts['tables_skipped']} skipped; "
            f"{plural(counts['records_written'], 'record')} written in {self.duration_s:.1f}s"
        )


def write_run_results(results: RunResults, path: Path, base: Path | None = None) -> None:
    """Write atomically; no symbolic link from `base` (e.g. the project root) down to
    the file is followed (`output_files`)."""
    write_text(path, results.model_dump_json(indent=2) + "\n", base=base)


# `tableflow run`'s lanes apply at once in one process: each read-merge-write of the file
# holds this, so no lane's entries are lost to another's write.
_MERGE_LOCK = threading.Lock()


def merge_run_results(results: RunResults, path: Path, base: Path | None = None) -> None:
    """Write `results` keeping the file's entries of the tables it does not name (their
    last apply's, each with its `finished_at`): `tableflow run` applies its lanes apart,
    and `tableflow status` reads every table's last run from the one file."""
    with _MERGE_LOCK:
        kept: list[TableResult] = []
        named = {t.table for t in results.tables}
        try:
            if path.is_symlink():  # never read through a link (written afresh, refused)
                raise OSError(path)
            before = json.loads(path.read_text())
            for entry in before.get("tables", []):
                if entry.get("table") not in named:
                    entry.setdefault("finished_at", before.get("finished_at"))
                    kept.append(TableResult.model_validate(entry))
        except (OSError, ValueError, TypeError, AttributeError):
            kept = []  # no file yet, or not one of ours: written afresh
        tables = tuple(sorted((*results.tables, *kept), key=lambda t: t.table))
        write_run_results(results.model_copy(update={"tables": tables}), path, base)
