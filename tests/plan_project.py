"""Writing throwaway tableflow projects against the test stack (used by test_plan_*/test_apply_*)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml


def write_project(
    root: Path,
    *,
    bootstrap: str,
    registry_url: str,
    catalog_uri: str,
    credential: str,
    namespace: str,
    tables: list[dict[str, Any]],
    catalog_name: str = "tf_test",
    storage: dict[str, Any] | None = None,
) -> Path:
    """`storage`: the catalog's storage block (tables on S3; tests/fixtures/lake.py)."""
    target = {
        "kafka": {"bootstrap_servers": bootstrap},
        "schema_registry": {"url": registry_url},
        "catalog": {
            "type": "rest",
            "name": catalog_name,
            "uri": catalog_uri,
            "credential": credential,
            "properties": {
                "oauth2-server-uri": catalog_uri + "/v1/oauth/tokens",
                "scope": "catalog",
            },
            **({"storage": storage} if storage is not None else {}),
        },
    }
    return write_project_files(
        root, name="shop", target=("test", target), defaults={"namespace": namespace}, tables=tables
    )


def write_project_files(
    root: Path,
    *,
    name: str,
    target: tuple[str, dict[str, Any]],
    defaults: dict[str, Any],
    tables: list[dict[str, Any]],
) -> Path:
    """`root/tableflow_project.yml` with one target (its name and its kafka, registry,
    catalog and spark blocks), the default one, and `root/tables/tables.yml`: the layout
    `tableflow init` writes (tests and benchmarks write their projects through here)."""
    root.mkdir(parents=True, exist_ok=True)
    target_name, settings = target
    project = {
        "name": name,
        "default_target": target_name,
        "targets": {target_name: settings},
        "defaults": defaults,
    }
    (root / "tableflow_project.yml").write_text(yaml.safe_dump(project, sort_keys=False))
    (root / "tables").mkdir(exist_ok=True)
    (root / "tables" / "tables.yml").write_text(yaml.safe_dump({"tables": tables}, sort_keys=False))
    return root
