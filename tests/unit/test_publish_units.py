"""Pure parts of publishing: config rules, pointer states, the dispatch, conflict retries."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from tableflow_core.config.models.files import ProjectConfig
from tableflow_core.config.models.targets import Target
from tableflow_core.publish import PublishConflictError, PublishError, published_state
from tableflow_core.publish.glue import glue_type, table_details
from tableflow_core.publish.publish import publish_table
from tableflow_core.publish.registry import PUBLISHERS, open_publisher
from tests.unit.test_maintenance_schedule import table_with

TABLE = replace(table_with(None), publish_to=("a", "b", "c"))


def test_pointer_states() -> None:
    states = published_state(TABLE, "m2.json", {"a": "m2.json", "b": "m1.json"})
    assert [(s.catalog, s.status) for s in states] == [
        ("a", "current"),
        ("b", "stale"),
        ("c", "missing"),
    ]
    assert states[1].describe() == (
        "update shop.orders in catalog b: points at m1.json, table is at m2.json"
    )
    assert states[2].describe() == "register shop.orders in catalog c (not published yet)"
    assert [s.needs_publish for s in states] == [False, True, True]


def test_embedded_and_hive_cannot_be_publish_targets() -> None:
    for kind in (
        {"type": "embedded"},
        {"type": "hive", "uri": "thrift://x:9083", "warehouse": "w"},
    ):
        with pytest.raises(ValidationError, match="cannot be published to"):
            Target.model_validate(
                {"kafka": {"bootstrap_servers": "x:1"}, "publish_catalogs": {"p": kind}}
            )


def test_the_registry_covers_every_publishable_type() -> None:
    from tableflow_core.config.models.catalogs import PUBLISHABLE_CATALOG_TYPES

    assert set(PUBLISHERS) == set(PUBLISHABLE_CATALOG_TYPES)

    class Fake:
        type = "hive"

    with pytest.raises(PublishError, match="cannot publish to a hive catalog"):
        open_publisher("x", Fake())


def test_glue_secrets_are_masked() -> None:
    config = ProjectConfig.model_validate(
        {
            "name": "p",
            "targets": {
                "dev": {
                    "kafka": {"bootstrap_servers": "x:1"},
                    "publish_catalogs": {
                        "g": {"type": "glue", "secret_access_key": "s3cr3t", "session_token": "t0k"}
                    },
                }
            },
        }
    )
    shown = repr(config) + config.model_dump_json()
    assert "s3cr3t" not in shown and "t0k" not in shown


def test_glue_types() -> None:
    from pyiceberg.types import (
        DecimalType,
        ListType,
        LongType,
        MapType,
        NestedField,
        StringType,
        StructType,
        TimestamptzType,
    )

    assert glue_type(LongType()) == "bigint"
    assert glue_type(TimestamptzType()) == "timestamp"
    assert glue_type(DecimalType(10, 2)) == "decimal(10,2)"
    assert glue_type(ListType(1, StringType())) == "array<string>"
    assert glue_type(MapType(1, StringType(), 2, LongType())) == "map<string,bigint>"
    struct = StructType(NestedField(1, "a", LongType()), NestedField(2, "b", StringType()))
    assert glue_type(struct) == "struct<a:bigint,b:string>"


def test_table_details_fall_back_to_the_path() -> None:
    location, columns = table_details("file:///nowhere/ns/t/metadata/00001-x.metadata.json")
    assert (location, columns) == ("file:///nowhere/ns/t", [])


class FlakyPublisher:
    """Conflicts `conflicts` times, then accepts (a stand-in for a contended catalog)."""

    def __init__(self, conflicts: int, pointer: str | None) -> None:
        self.conflicts = conflicts
        self.pointer = pointer
        self.calls: list[str] = []

    def current_pointer(self, namespace: tuple[str, ...], table: str) -> str | None:
        return self.pointer

    def register(self, namespace: tuple[str, ...], table: str, location: str) -> None:
        self._maybe_conflict("register", location)

    def update(self, namespace: tuple[str, ...], table: str, location: str, previous: str) -> None:
        assert previous == self.pointer
        self._maybe_conflict("update", location)

    def _maybe_conflict(self, what: str, location: str) -> None:
        self.calls.append(what)
        if self.conflicts:
            self.conflicts -= 1
            raise PublishConflictError("moved")
        self.pointer = location

    def close(self) -> None:
        pass


class FakeProject:
    def __init__(self, catalogs: dict[str, Any]) -> None:
        self.target = type("T", (), {"publish_catalogs": catalogs})()
        self.root = Path(".")

    def redact(self, text: str) -> str:
        return text.replace("hunter2", "**********")


def test_conflicts_are_retried_then_reported() -> None:
    table = replace(TABLE, publish_to=("a", "b"))
    publishers = {"a": FlakyPublisher(2, "old.json"), "b": FlakyPublisher(9, None)}
    result = publish_table(
        FakeProject({"a": object(), "b": object()}),  # type: ignore[arg-type]
        table,
        "new.json",
        attempts=3,
        backoff_s=0,
        opener=lambda name, _config: publishers[name],
    )
    a, b = result.entries
    assert (a.action, a.previous, publishers["a"].calls) == ("updated", "old.json", ["update"] * 3)
    assert b.action == "error" and "PublishConflictError" in (b.error or "")


def test_errors_are_redacted() -> None:
    def opener(name: str, _config: object) -> Any:
        raise RuntimeError("login failed for password hunter2")

    result = publish_table(
        FakeProject({"a": object(), "b": object()}),  # type: ignore[arg-type]
        replace(TABLE, publish_to=("a",)),
        "m.json",
        opener=opener,
    )
    assert result.entries[0].error == "RuntimeError: login failed for password **********"
