"""SQLite persistence of schemas, subject versions and compatibility config.

One connection guarded by a lock: requests are tiny, and a single writer keeps
id allocation and version numbering race-free. WAL keeps reads cheap.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tableflow_core.registry.schemas import Reference, SchemaDefinition, SchemaType

_DDL = """
CREATE TABLE IF NOT EXISTS schemas (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    fingerprint TEXT NOT NULL UNIQUE,
    guid TEXT NOT NULL UNIQUE,
    schema_type TEXT NOT NULL,
    schema TEXT NOT NULL,
    refs TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS versions (
    subject TEXT NOT NULL,
    version INTEGER NOT NULL,
    schema_id INTEGER NOT NULL REFERENCES schemas(id),
    deleted INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (subject, version)
);
CREATE INDEX IF NOT EXISTS versions_by_schema ON versions(schema_id);
CREATE TABLE IF NOT EXISTS config (
    subject TEXT PRIMARY KEY,  -- '' is the global config
    compatibility TEXT NOT NULL
);
"""

GLOBAL = ""


@dataclass(frozen=True)
class StoredSchema:
    id: int
    guid: str
    definition: SchemaDefinition


@dataclass(frozen=True)
class SubjectVersion:
    subject: str
    version: int
    schema_id: int
    deleted: bool


class RegistryStore:
    """Tables `schemas` (global ids), `versions` (subject -> schema id) and `config`."""

    def __init__(self, database: Path | str) -> None:
        if str(database) != ":memory:":
            Path(database).parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.RLock()
        self._conn = sqlite3.connect(str(database), check_same_thread=False, isolation_level=None)
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute("PRAGMA synchronous=NORMAL")
        self._conn.executescript(_DDL)

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """Hold the lock and one SQLite transaction: check-then-write stays atomic."""
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                yield
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")

    # -- schemas ---------------------------------------------------------------------------

    def schema_by_id(self, schema_id: int) -> StoredSchema | None:
        return self._one_schema("SELECT * FROM schemas WHERE id = ?", (schema_id,))

    def schema_by_guid(self, guid: str) -> StoredSchema | None:
        return self._one_schema("SELECT * FROM schemas WHERE guid = ?", (guid,))

    def schema_by_fingerprint(self, fingerprint: str) -> StoredSchema | None:
        return self._one_schema("SELECT * FROM schemas WHERE fingerprint = ?", (fingerprint,))

    def insert_schema(self, definition: SchemaDefinition, fingerprint: str, guid: str) -> int:
        refs = json.dumps([r.to_dict() for r in definition.references])
        with self._lock:
            cursor = self._conn.execute(
                "INSERT INTO schemas (fingerprint, guid, schema_type, schema, refs) VALUES (?,?,?,?,?)",
                (fingerprint, guid, definition.schema_type.value, definition.schema, refs),
            )
            return int(cursor.lastrowid or 0)

    def all_schemas(self) -> list[StoredSchema]:
        with self._lock:
            rows = self._conn.execute("SELECT * FROM schemas ORDER BY id").fetchall()
        return [_row_to_schema(row) for row in rows]

    def _one_schema(self, sql: str, args: tuple[object, ...]) -> StoredSchema | None:
        with self._lock:
            row = self._conn.execute(sql, args).fetchone()
        return _row_to_schema(row) if row else None

    # -- subject versions ------------------------------------------------------------------

    def versions(self, subject: str, include_deleted: bool = False) -> list[SubjectVersion]:
        return self._versions("subject", subject, "version", include_deleted)

    def versions_of_schema(
        self, schema_id: int, include_deleted: bool = False
    ) -> list[SubjectVersion]:
        return self._versions("schema_id", schema_id, "subject, version", include_deleted)

    def _versions(
        self, column: str, value: object, order: str, include_deleted: bool
    ) -> list[SubjectVersion]:
        """The versions whose `column` is `value`, in `order` (columns: constants here)."""
        sql = f"SELECT subject, version, schema_id, deleted FROM versions WHERE {column} = ?"
        if not include_deleted:
            sql += " AND deleted = 0"
        with self._lock:
            rows = self._conn.execute(f"{sql} ORDER BY {order}", (value,)).fetchall()
        return [SubjectVersion(r[0], r[1], r[2], bool(r[3])) for r in rows]

    def subjects(self, include_deleted: bool = False, deleted_only: bool = False) -> list[str]:
        if deleted_only:
            sql = (
                "SELECT subject FROM versions GROUP BY subject "
                "HAVING SUM(deleted = 0) = 0 ORDER BY subject"
            )
        elif include_deleted:
            sql = "SELECT DISTINCT subject FROM versions ORDER BY subject"
        else:
            sql = "SELECT DISTINCT subject FROM versions WHERE deleted = 0 ORDER BY subject"
        with self._lock:
            return [row[0] for row in self._conn.execute(sql).fetchall()]

    def next_version(self, subject: str) -> int:
        with self._lock:
            row = self._conn.execute(
                "SELECT COALESCE(MAX(version), 0) FROM versions WHERE subject = ?", (subject,)
            ).fetchone()
        return int(row[0]) + 1

    def add_version(self, subject: str, version: int, schema_id: int) -> None:
        with self._lock:
            self._conn.execute(
                "INSERT INTO versions (subject, version, schema_id) VALUES (?,?,?)",
                (subject, version, schema_id),
            )

    def soft_delete(self, subject: str, version: int | None = None) -> None:
        with self._lock:
            if version is None:
                self._conn.execute("UPDATE versions SET deleted = 1 WHERE subject = ?", (subject,))
            else:
                self._conn.execute(
                    "UPDATE versions SET deleted = 1 WHERE subject = ? AND version = ?",
                    (subject, version),
                )

    def hard_delete(self, subject: str, version: int | None = None) -> None:
        with self._lock:
            if version is None:
                self._conn.execute("DELETE FROM versions WHERE subject = ?", (subject,))
                self._conn.execute("DELETE FROM config WHERE subject = ?", (subject,))
            else:
                self._conn.execute(
                    "DELETE FROM versions WHERE subject = ? AND version = ?", (subject, version)
                )

    # -- config ----------------------------------------------------------------------------

    def compatibility(self, subject: str) -> str | None:
        with self._lock:
            row = self._conn.execute(
                "SELECT compatibility FROM config WHERE subject = ?", (subject,)
            ).fetchone()
        return str(row[0]) if row else None

    def set_compatibility(self, subject: str, level: str) -> None:
        with self._lock:
            self._conn.execute(
                "INSERT INTO config (subject, compatibility) VALUES (?, ?) "
                "ON CONFLICT(subject) DO UPDATE SET compatibility = excluded.compatibility",
                (subject, level),
            )

    def delete_compatibility(self, subject: str) -> None:
        with self._lock:
            self._conn.execute("DELETE FROM config WHERE subject = ?", (subject,))


def _row_to_schema(row: tuple[object, ...]) -> StoredSchema:
    schema_id, _fingerprint, guid, schema_type, schema, refs = row
    references = tuple(
        Reference(r["name"], r["subject"], int(r["version"])) for r in json.loads(str(refs))
    )
    definition = SchemaDefinition(str(schema), SchemaType(str(schema_type)), references)
    return StoredSchema(int(str(schema_id)), str(guid), definition)
