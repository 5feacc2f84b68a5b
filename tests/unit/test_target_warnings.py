"""plan warns when data files would be written on a local path by a cluster's executors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from tableflow_core.config.loader import load_project
from tableflow_core.plan.target_warnings import local_warehouse, target_warnings


def _project(root: Path, catalog: dict[str, Any], master: str) -> Path:
    target = {
        "kafka": {"bootstrap_servers": "127.0.0.1:9"},
        "catalog": catalog,
        "spark": {"master": master},
    }
    config = {"name": "shop", "default_target": "t", "targets": {"t": target}}
    (root / "tableflow_project.yml").write_text(yaml.safe_dump(config))
    return root


S3_CATALOG = {
    "type": "embedded",
    "warehouse": "s3://warehouse/wh",
    "database_url": "sqlite:///./catalog.db",
    "storage": {"endpoint": "http://10.0.0.3:9000", "credentials": "vended"},
}


def test_a_local_warehouse_on_a_cluster_is_warned_about(tmp_path: Path) -> None:
    project = load_project(_project(tmp_path, {"type": "embedded"}, "spark://10.0.0.5:7077"))
    (warning,) = target_warnings(project)
    assert warning.key == "targets.t.catalog.warehouse"
    assert str(tmp_path / ".tableflow" / "warehouse") in warning.message
    assert "same path" in warning.message and "s3://" in warning.message
    assert warning.location == str(project.config_file)


def test_a_file_uri_warehouse_of_a_sql_catalog_is_local_too(tmp_path: Path) -> None:
    sql = {"type": "sql", "uri": "sqlite:///c.db", "warehouse": "file:///data/wh"}
    project = load_project(_project(tmp_path, sql, "yarn"))
    assert local_warehouse(project) == Path("/data/wh")
    assert len(target_warnings(project)) == 1


def test_no_warning_on_one_machine_or_with_object_storage(tmp_path: Path) -> None:
    local = tmp_path / "local"
    local.mkdir()
    assert target_warnings(load_project(_project(local, {"type": "embedded"}, "local[*]"))) == []
    on_s3 = tmp_path / "s3"
    on_s3.mkdir()
    project = load_project(_project(on_s3, S3_CATALOG, "spark://10.0.0.5:7077"))
    assert local_warehouse(project) is None
    assert target_warnings(project) == []


def test_a_rest_catalog_decides_its_warehouse(tmp_path: Path) -> None:
    rest = {"type": "rest", "uri": "http://10.0.0.4:8181"}
    project = load_project(_project(tmp_path, rest, "spark://10.0.0.5:7077"))
    assert target_warnings(project) == []
