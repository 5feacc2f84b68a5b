"""The world read of an embedded catalog running in the command's process: tables read
straight from its service (one query per namespace) observe exactly what one loadTable
HTTP request per table observes."""

from __future__ import annotations

import dataclasses
import threading
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import yaml
from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import DayTransform
from pyiceberg.types import DateType, LongType, NestedField, StringType

from tableflow_core.config.loader import load_project
from tableflow_core.config.models.catalogs import EmbeddedCatalog
from tableflow_core.dev.processes import free_port, port_is_open
from tableflow_core.plan.world import Readers, read_world
from tableflow_core.targets.catalog import open_catalog

SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=False),
    NestedField(2, "name", StringType(), required=False),
    NestedField(3, "day", DateType(), required=False),
)


def _project(root: Path, tables: list[str]) -> Path:
    project = {
        "name": "inproc",
        "default_target": "dev",
        "targets": {
            "dev": {
                "kafka": {"bootstrap_servers": "127.0.0.1:1"},  # not read here
                "schema_registry": {"url": "http://127.0.0.1:1"},
                "catalog": {
                    "type": "embedded",
                    "warehouse": str(root / "warehouse"),
                    "port": free_port("127.0.0.1"),
                    "auth": {"mode": "none"},
                },
            }
        },
        "defaults": {"namespace": "ns"},
        "tables": [{"name": t, "topic": t} for t in tables],
    }
    root.mkdir(parents=True, exist_ok=True)
    (root / "tableflow_project.yml").write_text(yaml.safe_dump(project))
    return root


def _no_io(*_args: Any, **_kwargs: Any) -> Any:
    return None


def test_in_process_and_http_world_reads_observe_the_same_tables(tmp_path: Path) -> None:
    names = [f"t{i}" for i in range(5)]
    project = load_project(_project(tmp_path / "p", names))
    readers = Readers(resolve_schema=_no_io, get_watermarks=_no_io, offsets_for_timestamp=_no_io)
    with open_catalog(project) as handle:
        assert handle.reads_in_process
        catalog = handle.catalog
        catalog.create_namespace("ns")
        spec = PartitionSpec(PartitionField(3, 1000, DayTransform(), "day_day"))
        for i, name in enumerate(names[:4]):  # t4 stays missing
            table = catalog.create_table(
                ("ns", name), SCHEMA, partition_spec=spec if i % 2 else PartitionSpec(),
                properties={"tableflow.topic": name},
            )  # fmt: skip
            if i == 1:
                rows = pa.table({"id": [1, 2], "name": ["a", "b"], "day": [None, None]})
                table.append(rows.cast(table.schema().as_arrow()))
        direct = read_world(project, project.tables, handle, read_kafka=False, readers=readers)
        over_http = dataclasses.replace(handle, _server=None)
        assert not over_http.reads_in_process
        requested = read_world(
            project, project.tables, over_http, read_kafka=False, readers=readers
        )
    assert sorted(direct.tables) == ["ns.t0", "ns.t1", "ns.t2", "ns.t3"]
    assert direct.tables == requested.tables
    assert direct.tables["ns.t1"].snapshot_id is not None
    assert [t.transform for t in direct.tables["ns.t1"].partition_by] == ["day"]
    # A plan reads the same catalog without serving it (catalog/reader.py): same world,
    # no server thread, and nothing listening on the catalog's port.
    with open_catalog(project, serve=False) as unserved:
        assert unserved.reads_in_process and not unserved.spark_properties
        assert not any(t.name.startswith("catalog-server") for t in threading.enumerate())
        config = project.target.catalog
        assert isinstance(config, EmbeddedCatalog) and config.port
        assert not port_is_open("127.0.0.1", config.port)
        read = read_world(project, project.tables, unserved, read_kafka=False, readers=readers)
        assert read.tables == direct.tables
        assert read.namespaces == direct.namespaces
        assert read.listed_tables == direct.listed_tables
        assert unserved.catalog.load_table("ns.t1").metadata == direct_t1_metadata(project)


def direct_t1_metadata(project: Any) -> Any:
    with open_catalog(project) as served:
        return served.catalog.load_table(("ns", "t1")).metadata


def test_an_unserved_read_reports_a_missing_namespace_and_table_as_pyiceberg_does(
    tmp_path: Path,
) -> None:
    project = load_project(_project(tmp_path / "p", ["t0"]))
    with open_catalog(project, serve=False) as handle:
        with pytest.raises(NoSuchNamespaceError):
            handle.catalog.list_tables(("nope",))
        with pytest.raises(NoSuchTableError):
            handle.catalog.load_table(("ns", "t0"))
        assert handle.catalog.list_namespaces() == []
